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
-- bounded by its timeout; a timed-out enter() deletes our node.
local queue = require "zkcoord.queue"
local core = require "zkcoord.core"
local barrier = require "zkcoord.barrier"

local now = core.now
local wait_connected = barrier.wait_connected
local type, error, pairs, ipairs, tostring = type, error, pairs, ipairs, tostring
local setmetatable, getmetatable = setmetatable, getmetatable
local sort = table.sort

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }

local OPT_KEYS = { id = true }
local READY = "ready"

local TRANSIENT = { connectionloss = true, operationtimeout = true, sessionexpired = true,
                    closed = true }


---@class zkcoord.double_barrier_opts
---@field id string? our node's data (default "<hostname>:<pid>")

--- client:double_barrier(path, num_clients, opts) -> double barrier object.
---@param client table
---@param path string
---@param num_clients integer how many participants make a round (>= 1)
---@param opts zkcoord.double_barrier_opts?
function _M.new(client, path, num_clients, opts)
    client.check_path(path, "double_barrier", 1)
    if path == "/" then
        error("bad argument #1 to 'double_barrier' (the root cannot be a barrier)", 2)
    end
    if type(num_clients) ~= "number" or num_clients % 1 ~= 0 or num_clients < 1 then
        error("bad argument #2 to 'double_barrier' (num_clients must be an integer >= 1)", 2)
    end
    opts = opts or {}
    if type(opts) ~= "table" then
        error("bad argument #3 to 'double_barrier' (opts must be a table)", 2)
    end
    for k in pairs(opts) do
        if not OPT_KEYS[k] then
            error("bad argument #3 to 'double_barrier' (unknown option '" .. tostring(k) .. "')", 2)
        end
    end
    if opts.id ~= nil and type(opts.id) ~= "string" then
        error("bad argument #3 to 'double_barrier' (id must be a string)", 2)
    end
    return setmetatable({
        client = client,
        path = path,
        num_clients = num_clients,
        id = opts.id or require("zkcoord.election").default_id(),
        name = queue.uuid(),
        _node = nil,          -- our node's path while in
        _sid = nil,           -- the session that created it
        _entered = false,
    }, mt)
end


local function check_self(self, name)
    if getmetatable(self) ~= mt then
        error(("'%s' must be called on a double barrier (use db:%s())"):format(name, name), 3)
    end
end


local function check_timeout(timeout, name)
    if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout < 0) then
        error("bad argument #1 to '" .. name .. "' (timeout must be nil or a number >= 0)", 3)
    end
end


local left_of = require("zkcoord.util").remaining


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


-- After a failed call: wait for the connection (bounded) and go on, or give up.
local function recover(client, err, deadline)
    if client:state() == "closed" then
        return nil, "closed"
    end
    if not TRANSIENT[err] then
        return nil, err
    end
    return wait_connected(client, deadline)
end


-- Creates our node in the current session (and the parent if missing).
function _M:_join()
    local client = self.client
    local node = self.path .. "/" .. self.name
    for _ = 1, 3 do
        local ok, err = client:create(node, self.id, { ephemeral = true })
        if ok or err == "nodeexists" then
            local mine = true
            if err == "nodeexists" then
                -- A create whose reply was lost: ours only if our session owns it.
                local st = client:exists(node)
                mine = st and st.ephemeral_owner == client:session_id()
            end
            if mine then
                self._node, self._sid = node, client:session_id()
                return true
            end
            -- An older session's node, not gone yet: take another name.
            self.name = queue.uuid()
            node = self.path .. "/" .. self.name
        elseif err == "nonode" then
            local pok, perr = client:create(self.path, nil, { container = true,
                                                              parents = "container" })
            if not pok and perr ~= "nodeexists" then
                return nil, perr
            end
        else
            return nil, err
        end
    end
    return nil, "nonode"
end


--- Enters the barrier: waits until num_clients participants are in.
---@param timeout number? seconds; nil waits as long as it takes
---@return true|nil ok, string? err "timeout" | "closed" | a ZooKeeper code
function _M:enter(timeout)
    check_self(self, "enter")
    check_timeout(timeout, "enter")
    local client = self.client
    local deadline = timeout and now() + timeout
    local ready = self.path .. "/" .. READY
    if self._entered then
        return true
    end
    local function give_up(err)
        self:_delete_own()
        return nil, err
    end
    while true do
        if client:state() == "closed" then
            return give_up("closed")
        end
        local ev = client:waiter():event()
        local fired
        local function wake(e)
            fired = e
            ev:set()
        end
        -- 1. the watch on "ready" first (see the header)
        local st, err = client:exists(ready, wake)
        if st == nil then
            local ok, rerr = recover(client, err, deadline)
            if not ok then
                return give_up(rerr)
            end
        else
            -- 2. our node, in this session
            local ok, jerr = true, nil
            if not self._node or self._sid ~= client:session_id() then
                ok, jerr = self:_join()
            end
            -- 3. count
            local names, lerr
            if ok then
                names, lerr = client:children(self.path)
            end
            if not ok or not names then
                client:remove_watches(ready, wake)
                local rok, rerr = recover(client, jerr or lerr, deadline)
                if not rok then
                    return give_up(rerr)
                end
            elseif #participants(names) >= self.num_clients then
                client:remove_watches(ready, wake)
                -- 4. enough: open the barrier for everyone
                local cok, cerr = client:create(ready, self.id, { ephemeral = true })
                if not cok and cerr == "nodeexists" then
                    -- Made by someone else (or left by a round still leaving):
                    -- touch it, so watchers that saw it before us wake too.
                    cok, cerr = client:set(ready, self.id)
                    if not cok and cerr == "nonode" then
                        cok, cerr = client:create(ready, self.id, { ephemeral = true })
                    end
                end
                if cok or cerr == "nodeexists" then
                    self._entered = true
                    return true
                end
                -- Not sure it was made: look again once connected.
                local rok, rerr = recover(client, cerr, deadline)
                if not rok then
                    return give_up(rerr)
                end
            else
                -- 5. wait for "ready" to be created (or touched)
                ev:wait(left_of(deadline))
                if not ev.is_set then
                    client:remove_watches(ready, wake)
                    return give_up(client:state() == "closed" and "closed" or "timeout")
                end
                if fired and (fired.type == "created" or fired.type == "changed") then
                    self._entered = true
                    return true
                end
                -- deleted (an old ready went) or the session ended: look again
            end
        end
        if deadline and now() >= deadline then
            return give_up("timeout")
        end
    end
end


function _M:_delete_own()
    local node = self._node
    self._node, self._entered = nil, false
    if node and self._sid == self.client:session_id() and self.client:state() ~= "closed" then
        self.client:delete_guaranteed(node)
    end
end


--- Leaves the barrier: deletes our node and waits until every participant
--- has left.
---@param timeout number? seconds; nil waits as long as it takes
---@return true|nil ok, string? err "timeout" | "closed" | a ZooKeeper code
function _M:leave(timeout)
    check_self(self, "leave")
    check_timeout(timeout, "leave")
    local client = self.client
    local deadline = timeout and now() + timeout
    local base = self.path .. "/"
    self._entered = false
    -- kazoo: the first to leave removes "ready", so it cannot outlive the round.
    client:send("delete", base .. READY)
    while true do
        if client:state() == "closed" then
            return nil, "closed"
        end
        if self._node and self._sid ~= client:session_id() then
            self._node = nil      -- went with its session: we have left
        end
        local names, err = client:children(self.path)
        if err == "nonode" then
            self._node = nil
            return true
        end
        if not names then
            local ok, rerr = recover(client, err, deadline)
            if not ok then
                return nil, rerr
            end
        else
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
            local function wake()
                ev:set()
            end
            local st, serr = client:exists(base .. target, wake)
            if st == nil then
                local ok, rerr = recover(client, serr, deadline)
                if not ok then
                    return nil, rerr
                end
            elseif st then
                ev:wait(left_of(deadline))
                if not ev.is_set then
                    client:remove_watches(base .. target, wake)
                    return nil, client:state() == "closed" and "closed" or "timeout"
                end
            else
                client:remove_watches(base .. target, wake)   -- gone already: look again
            end
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
    local client = self.client
    local names, err = client:children(self.path)
    if not names then
        if err == "nonode" then
            return {}
        end
        return nil, err
    end
    local fs, out = {}, {}
    for i, n in ipairs(participants(names)) do
        fs[i] = client:send("get", self.path .. "/" .. n)
    end
    for _, f in ipairs(fs) do
        local data = f:wait()
        if data then
            out[#out + 1] = data
        end
    end
    return out
end


_M.mt = mt
return _M
