--- zkcoord.double_barrier: start together, finish together.
--
--   local db = client:double_barrier("/jobs/42/barrier", 3)
--   assert(db:enter(60))     -- returns once 3 participants are in
--   compute()
--   assert(db:leave(60))     -- returns once all 3 have left
--
-- Algorithm (ZooKeeper's double barrier recipe, kazoo DoubleBarrier):
--   enter: watch <path>/ready with exists() FIRST, then create our node and
--     count the participants: enough of them, and we create "ready" (that
--     wakes the others through their watch); else wait for the watch.
--     Setting the watch before our node is created is what makes it safe:
--     whoever counts us set its count after our watch was in place.
--   leave: delete "ready"; the lowest participant waits for the highest to
--     go, every other deletes its node and waits for the lowest to go; look
--     again after each wake-up, until no participant is left. Only one
--     node is watched by each process (no herd).
--
-- Node layout: <path> (a container node: the server removes it some time
-- after the last participant went), <path>/<uuid> per participant
-- (ephemeral, data = opts.id, default "<hostname>:<pid>"), <path>/ready
-- (ephemeral: a ready node never outlives the session that made it, so a
-- crashed round cannot leave a stale one behind). Participants sort by
-- name. A round must be over (everyone left) before the path is used again.
--
-- Connection loss ("suspended"): waits go on; our ephemeral node stays.
-- Session loss ("lost"): our node is gone. enter() creates it again in the
-- new session and goes on waiting; leave() counts it as left. Every wait is
-- bounded by its timeout; a timed-out enter() deletes our node. An enter()
-- that counted enough participants but could not learn whether its opening
-- ("ready") happened by its deadline returns "unknown" and keeps our node
-- (the others may have entered): enter() again decides.
local core = require "zkcoord.core"
local args = require "zkcoord.util.args"
local deadlines = require "zkcoord.util.deadline"
local reads = require "zkcoord.util.reads"
local retries = require "zkcoord.util.retry"
local callbacks = require "zkcoord.util.callbacks"
local ids = require "zkcoord.util.ids"
local unknown_outcome = require("zkcoord.errors").unknown_outcome
local contract = require "zkcoord.contract"

local now, uuid = core.now, core.uuid
local type, ipairs, setmetatable = type, ipairs, setmetatable
local sort = table.sort
local retry, remaining = retries.retry, deadlines.remaining
local UNTIL_DEADLINE = retries.UNTIL_DEADLINE

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = args.self_checker(mt, "double barrier", "db")

local OPT_KEYS = { "id" }
local READY = "ready"
-- Opening is idempotent (open_ready): one whose reply was lost is sent again.
local OPEN_AGAIN = { max_tries = math.huge, also = unknown_outcome }


---@class zkcoord.double_barrier_opts
---@field id string? our node's data (default "<hostname>:<pid>")

--- client:double_barrier(path, num_clients, opts) -> double barrier object.
---@param client table
---@param path string
---@param num_clients integer how many participants make a round (>= 1)
---@param opts zkcoord.double_barrier_opts?
function _M.new(client, path, num_clients, opts)
    contract.check_path(path, "double_barrier", 1)
    if path == "/" then
        args.argerror(1, "double_barrier", "the root cannot be a barrier")
    end
    if type(num_clients) ~= "number" or num_clients % 1 ~= 0 or num_clients < 1 then
        args.argerror(2, "double_barrier", "num_clients must be an integer >= 1")
    end
    opts = args.check_opts(opts, OPT_KEYS, "double_barrier", 3)
    if opts.id ~= nil and type(opts.id) ~= "string" then
        args.argerror(3, "double_barrier", "id must be a string, got " .. type(opts.id))
    end
    return setmetatable({
        client = client,
        path = path,
        num_clients = num_clients,
        id = opts.id or ids.default_id(),
        name = uuid(),
        _node = nil,          -- our node's path while in
        _sid = nil,           -- the session that created it
        _maybe = nil,         -- { node, sid }: a create whose outcome we did not learn
        _entered = false,
    }, mt)
end


-- Participant names (without "ready"), sorted.
local function participants(names)
    local out = {}
    for _, n in ipairs(names) do
        if n ~= READY then
            out[#out + 1] = n
        end
    end
    sort(out)
    return out
end


-- Creates our node under our name: true if it is there and ours.
function _M:_create_own()
    local client = self.client
    local node = self.path .. "/" .. self.name
    local ok, err = client:create(node, self.id, { ephemeral = true })
    if err == "nodeexists" then
        -- A create whose reply was lost: ours only if our session owns it.
        local st, serr = client:exists(node)
        if st == nil then
            return nil, serr
        end
        ok = st and st.ephemeral_owner == client:session_id()
    end
    if ok then
        self._node, self._sid, self._maybe = node, client:session_id(), nil
        return true
    end
    -- A create whose reply was lost may have made our node, counted by the
    -- others: if we give up, it is deleted (after the create, in its session).
    if unknown_outcome[err] and err ~= "sessionexpired" then
        self._maybe = { node, client:session_id() }
    end
    return nil, err
end


-- Creates our node in the current session (and the parent if missing).
function _M:_join()
    local ok, err = self:_create_own()
    if err == "nonode" then
        local pok, perr = self.client:create(self.path, nil, { container = true,
                                                               parents = "container" })
        if not pok and perr ~= "nodeexists" then
            return nil, perr
        end
        ok, err = self:_create_own()
    end
    if err == "nodeexists" then
        -- A node of an ended session under our name, not gone yet: take
        -- another name (a new uuid meets no node).
        self.name = uuid()
        ok, err = self:_create_own()
    end
    return ok, err
end


-- Our node in this session (made if missing), then the listing.
function _M:_join_and_list()
    if not self._node or self._sid ~= self.client:session_id() then
        local ok, err = self:_join()
        if not ok then
            return nil, err
        end
    end
    return self.client:children(self.path)
end


-- Creates "ready", or touches it if it is there (watchers that saw it
-- before us wake too). Idempotent: retried as a whole.
local function open_ready(client, ready, id)
    local ok, err = client:create(ready, id, { ephemeral = true })
    if not ok and err == "nodeexists" then
        ok, err = client:set(ready, id)
        if not ok and err == "nonode" then
            ok, err = client:create(ready, id, { ephemeral = true })
        end
    end
    if ok or err == "nodeexists" then
        return true
    end
    return nil, err
end


-- The watch on "ready": sets ev and notes the event (made outside the
-- waiting frame, see util.waker).
local function ready_watcher(ev)
    local w = {}
    w.fn = function(e)
        w.fired = e
        ev:set()
    end
    return w
end


--- Enters the barrier: waits until num_clients participants are in.
---@param timeout number? seconds; nil waits as long as it takes
---@return true|nil ok, string? err "timeout" | "closed" | a ZooKeeper code
function _M:enter(timeout)
    check_self(self, "enter")
    args.check_timeout(timeout, "enter", 1)
    local client = self.client
    local deadline = deadlines.deadline(timeout)
    local ready = self.path .. "/" .. READY
    if self._entered then
        return true
    end
    while true do
        if contract.is_closed(client) then
            return self:_give_up("closed")
        end
        local ev = client:waiter():event()
        local w = ready_watcher(ev)
        -- 1. the watch on "ready" first (see the header)
        local st, err = retry(client, deadline, UNTIL_DEADLINE, client.exists, client, ready, w.fn)
        if st == nil then
            return self:_give_up(err)
        end
        -- 2. our node, in this session; 3. count
        local names, lerr = retry(client, deadline, UNTIL_DEADLINE, self._join_and_list, self)
        if not names then
            client:remove_watches(ready, w.fn)
            return self:_give_up(lerr)
        end
        if #participants(names) >= self.num_clients then
            client:remove_watches(ready, w.fn)
            -- 4. enough: open the barrier for everyone
            local ok, oerr = retry(client, deadline, OPEN_AGAIN, open_ready, client, ready, self.id)
            if oerr == "timeout" then
                return nil, "unknown"    -- a try may have opened it: our node stays
            elseif not ok then
                return self:_give_up(oerr)
            end
            self._entered = true
            return true
        end
        -- 5. wait for "ready" to be created (or touched)
        ev:wait(remaining(deadline))
        if not ev.is_set then
            client:remove_watches(ready, w.fn)
            return self:_give_up(contract.is_closed(client) and "closed" or "timeout")
        end
        local fired = w.fired
        if fired and (fired.type == "created" or fired.type == "changed") then
            self._entered = true
            return true
        end
        -- deleted (an old ready went) or the session ended: look again
        if deadline and now() >= deadline then
            return self:_give_up("timeout")
        end
    end
end


-- A failed enter(): our node goes.
function _M:_give_up(err)
    self:_delete_own()
    return nil, err
end


function _M:_delete_own()
    local client = self.client
    local node, maybe = self._node, self._maybe
    self._node, self._entered, self._maybe = nil, false, nil
    if node and self._sid == client:session_id() and not contract.is_closed(client) then
        client:delete_guaranteed(node)
    end
    if maybe and maybe[2] == client:session_id() and not contract.is_closed(client) then
        client:delete_guaranteed(maybe[1])
    end
end


--- Leaves the barrier: deletes our node and waits until every participant
--- has left.
---@param timeout number? seconds; nil waits as long as it takes
---@return true|nil ok, string? err "timeout" | "closed" | a ZooKeeper code
function _M:leave(timeout)
    check_self(self, "leave")
    args.check_timeout(timeout, "leave", 1)
    local client = self.client
    local deadline = deadlines.deadline(timeout)
    local base = self.path .. "/"
    self._entered = false
    -- kazoo: the first to leave removes "ready", so it cannot outlive the round.
    client:send("delete", base .. READY)
    while true do
        if contract.is_closed(client) then
            return nil, "closed"
        end
        if self._node and self._sid ~= client:session_id() then
            self._node = nil      -- went with its session: we have left
        end
        local names, err = retry(client, deadline, UNTIL_DEADLINE, client.children, client,
                                 self.path)
        if err == "nonode" then
            self._node = nil
            return true
        elseif not names then
            return nil, err
        end
        local list = participants(names)
        local me = self._node and self.name
        if #list == 0 then
            self._node = nil
            return true
        end
        if #list == 1 and list[1] == me then
            self:_delete_own()
            return true
        end
        local target
        if list[1] == me then
            target = list[#list]        -- lowest: wait for the highest to go
        else
            if me then
                self:_delete_own()      -- others: go, then wait for the lowest
            end
            target = list[1]
        end
        local ev = client:waiter():event()
        local wake = callbacks.waker(ev)
        local st, serr = retry(client, deadline, UNTIL_DEADLINE, client.exists, client,
                               base .. target, wake)
        if st == nil then
            return nil, serr
        elseif st then
            ev:wait(remaining(deadline))
            if not ev.is_set then
                client:remove_watches(base .. target, wake)
                return nil, contract.is_closed(client) and "closed" or "timeout"
            end
        else
            client:remove_watches(base .. target, wake)   -- gone already: look again
        end
        if deadline and now() >= deadline then
            return nil, "timeout"
        end
    end
end


--- The data (ids) of the participants now in the barrier, sorted by node name.
---@return string[]|nil ids, string? err
function _M:participants()
    check_self(self, "participants")
    local names, err = reads.children(self.client, self.path)
    if not names then
        return nil, err
    end
    local paths = {}
    for i, n in ipairs(participants(names)) do
        paths[i] = self.path .. "/" .. n
    end
    return reads.present_data(self.client, paths)
end


_M.mt = mt
return _M
