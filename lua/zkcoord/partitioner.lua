--- zkcoord.partitioner: N partitions shared by the live members, each
--- owned by one member at a time (kazoo's SetPartitioner idea).
--
--   local p = client:partitioner("/jobs/shards", { partitions = 16, id = "host-a" })
--   p:on_change(function(owned) ... end)   -- sorted partition numbers, now and on every change
--   p:owned()                              -- { 0, 3, 6, ... }
--   p:close()
--
-- Membership is a zkcoord.group under <path>/members (Curator GroupMember's
-- layout: <path>/members/<id>). Every member computes the same assignment
-- from a whole listing of the member ids (read while connected, with the
-- watch set again, never pieced together): member i of the m ids in sorted
-- order wants the partitions p with p % m == i - 1. Ownership is a node
-- (zkcoord.owned_node): a member owns partition p while the ephemeral
-- <path>/owners/<p> (data: its id) that it created in its current session
-- is there. So two live members never own one partition at the same
-- moment: a member gives a partition up (its on_change runs without it)
-- before it deletes the node, deletes only its own node (never a path), and
-- the next owner owns it only once its own create succeeded; it waits on
-- the node, not in a loop. A node of ours deleted by someone else is given
-- up at once. Once membership is stable, every partition has exactly one
-- owner.
--
-- Suspended: owned partitions stay owned (the session may live); stop work
-- that must never overlap while client:state() ~= "connected". Lost: our
-- nodes went with the session: on_change runs with {} at once; with the
-- new session we join again and take our share.
local util = require "zkcoord.util"
local errors = require "zkcoord.errors"
local owned_node = require "zkcoord.owned_node"
local contract = require "zkcoord.contract"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local setmetatable = setmetatable
local sort, concat = table.sort, table.concat
local argerror = util.argerror

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = util.self_checker(mt, "partitioner", "p")

local OPT_KEYS = { "partitions", "id", "data" }
local transient, unknown_outcome = errors.transient, errors.unknown_outcome


---@class zkcoord.partitioner_opts
---@field partitions integer how many partitions (>= 1)
---@field id string? this member's id (default "<hostname>:<pid>")
---@field data string? this member's data in the group

--- client:partitioner(path, opts) -> p: joins at once and takes its share.
---@return table|nil p, string? err
function _M.new(client, path, opts)
    contract.check_path(path, "partitioner", 1)
    if type(opts) ~= "table" then
        argerror(2, "partitioner", "opts must be a table with partitions, got " .. type(opts))
    end
    util.check_opts(opts, OPT_KEYS, "partitioner", 2)
    local n = opts.partitions
    if type(n) ~= "number" or n % 1 ~= 0 or n < 1 or n > 1000000 then
        argerror(2, "partitioner", "partitions must be an integer from 1 to 1000000, got "
                 .. tostring(n))
    end
    local base = path == "/" and "" or path
    local self = setmetatable({
        client = client,
        path = path,
        partitions = n,
        id = opts.id or util.default_id(),
        owners = base .. "/owners",
        _nodes = {},          -- partition -> its owned_node (made when first wanted)
        _releasing = {},      -- partitions given up, their delete under way
        _freed = {},          -- partitions whose node (someone else's) we watch
        _want = {},
        _ids = nil,           -- the member ids of the newest whole listing, sorted
        _ids_zxid = -1,       -- its pzxid: an older listing never replaces it
        _told = "",           -- the owned list on_change last saw
        _fns = {},
        _busy = false,
        _again = false,       -- something changed while a rebalance ran
        _closed = false,
    }, mt)
    self.group = client:group(base .. "/members", { id = self.id, data = opts.data })
    local ok, err = self.group:join()
    if not ok then
        return nil, err
    end
    local members = base .. "/members"
    self._listener = client:on_state(function(state)
        if state == "lost" or state == "closed" then
            self._freed = {}           -- the watches went with the session
            -- Our nodes too: {} at once, not what owned() says: its held()
            -- takes what reached the process first, and may run the new
            -- session's "connected" (after a pause) and take them again.
            self:_tell({})
            self:_notify()             -- then what a new session took
        elseif state == "connected" then
            -- Members may have changed while we were away, and the watch
            -- tells only a change: list them now (one round trip), then
            -- take again what failed on the connection loss. Partitions
            -- we waited for are looked at again too, not left to a watch
            -- set before the loss (a chaos run saw a member that never
            -- took its share after a reconnect: its partition had no
            -- owner node, its watch never fired).
            self._freed = {}
            local names, stat = client:children(members)
            if names or stat == "nonode" then
                if names then sort(names) end
                self:_seen(names, stat)
            end
            self:_rebalance()
        end
    end)
    -- Only the ids matter: a listing, not each member's data (fewer reads
    -- that can fail half-way through a reconnect storm).
    local w, werr = client:watch(members, function(names, stat)
        self:_seen(names, stat)
        self:_rebalance()
    end, { kind = "children" })
    if not w then
        self.group:leave()
        client:remove_listener(self._listener)
        return nil, werr
    end
    self._watch = w
    return self
end


-- A whole listing of the member ids: kept unless we hold a newer one (the
-- watch's and a reconnect's listings may answer in either order). nil: no
-- members node, no members.
function _M:_seen(names, stat)
    if not names then
        self._ids = {}
        return
    end
    local zxid = stat.pzxid
    if self._ids and zxid < self._ids_zxid then
        return
    end
    self._ids, self._ids_zxid = names, zxid
end


-- What we want: our share of the partitions for these members.
function _M:_wanted(ids)
    local want, me = {}, nil
    for i, id in ipairs(ids) do      -- sorted
        if id == self.id then
            me = i
        end
    end
    if me and not self._closed then
        for p = me - 1, self.partitions - 1, #ids do
            want[p] = true
        end
    end
    return want
end


-- Runs on_change when what we own changed since it last ran.
function _M:_notify()
    return self:_tell(self:owned())
end

-- Runs on_change with `owned` unless it is what it last told.
function _M:_tell(owned)
    local key = concat(owned, ",")
    if key ~= self._told then
        self._told = key
        util.call_all(self.client, self._fns, "partitioner on_change", owned)
    end
end


-- Gives p up: first in our view (on_change), then on the server (our own
-- node only; a delete cut off by a connection loss finishes once back).
function _M:_release(p)
    self._releasing[p] = true
    self:_notify()
    self._nodes[p]:delete()
    self._releasing[p] = nil
end


-- Made outside the waiting frame (see util.waker): fires after a delete
-- (or the end of the session), when p may be ours to take.
local function freed_watcher(self, p)
    return function()
        self._freed[p] = nil
        self:_rebalance()
    end
end


-- Our node of p went (deleted by someone else, our session ended).
local function node_gone(self)
    return function()
        self:_notify()
        self:_rebalance()      -- ours again at once if still ours to want
    end
end


function _M:_node(p)
    local n = self._nodes[p]
    if not n then
        n = owned_node.new(self.client, self.owners .. "/" .. p, {
            data = self.id, on_gone = node_gone(self),
        })
        self._nodes[p] = n
    end
    return n
end


-- Takes p if its node is free; otherwise watches the node (someone
-- else's) and comes back when it goes. true: ours; false: another's,
-- watched; nil, err: could not tell (the caller tries again).
function _M:_take(p)
    if self._freed[p] then
        return false                 -- watched already: the watch brings us back
    end
    local client, node = self.client, self:_node(p)
    for _ = 1, util.MAX_RACES do     -- again only when the node went between create and look
        local ok, other = node:create()
        if ok or ok == nil then
            return ok, other
        elseif other then
            -- Marked before the watch is set: its event may come, and its
            -- callback run, inside this very wait (the node deleted right
            -- after our look). Marked after, that callback's "free again"
            -- was overwritten and the member waited for good on a watch
            -- that had fired (a chaos run and a CI run: a partition left
            -- without an owner).
            self._freed[p] = true
            local stat, err = client:exists(node.path, freed_watcher(self, p))
            if stat then
                return false
            end
            self._freed[p] = nil
            if stat == nil then
                return nil, err
            end
        end
    end
    return false
end


-- Moves partitions to match the members: gives up what we no longer want,
-- then takes what we want. One at a time: a change during it runs after.
-- Only from a whole listing, and only while connected (every step is a
-- request; the next "connected" runs it again, also for a take that failed
-- on a connection loss).
function _M:_rebalance()
    if self._busy then
        self._again = true
        return
    end
    self._busy = true
    repeat
        self._again = false
        if self._ids and self.client:state() == "connected" then
            local want = self:_wanted(self._ids)
            self._want = want
            for p, node in pairs(self._nodes) do
                if not want[p] and node:held() then
                    self:_release(p)
                end
            end
            local failed
            for p = 0, self.partitions - 1 do
                if want[p] and not self._closed and not self:_node(p):held() then
                    local ok, err = self:_take(p)
                    if ok == nil then
                        failed = err
                    end
                end
            end
            self:_notify()
            if failed and not (transient[failed] or unknown_outcome[failed]) then
                self.client:log("error", "partitioner " .. self.path .. ": " .. tostring(failed))
            end
        end
    until not self._again
    self._busy = false
end


--- The partitions we own now, sorted: those whose node we created in the
--- current session and is there, as far as this process has been told.
---@return integer[]
function _M:owned()
    check_self(self, "owned")
    local out = {}
    for p, node in pairs(self._nodes) do
        if not self._releasing[p] and node:held() then
            out[#out + 1] = p
        end
    end
    sort(out)
    return out
end


--- fn(owned) now and whenever the partitions we own change.
function _M:on_change(fn)
    check_self(self, "on_change")
    util.check_fn(fn, "on_change")
    self._fns[#self._fns + 1] = fn
    util.call(self.client, fn, "partitioner on_change", self:owned())
    return fn
end


--- Gives every partition up and leaves the group.
function _M:close()
    check_self(self, "close")
    if self._closed then
        return true
    end
    self._closed = true
    self._want = {}
    self.client:remove_listener(self._listener)
    self._watch:cancel()
    for p, node in pairs(self._nodes) do
        if node:held() then
            self:_release(p)
        end
    end
    return self.group:close()
end


_M.mt = mt
return _M
