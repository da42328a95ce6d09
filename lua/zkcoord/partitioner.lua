--- zkcoord.partitioner: N partitions shared by the live members, each
--- owned by one member at a time (kazoo's SetPartitioner idea).
--
--   local p = client:partitioner("/jobs/shards", { partitions = 16, id = "host-a" })
--   p:on_change(function(owned) ... end)   -- sorted partition numbers, now and on every change
--   p:owned()                              -- { 0, 3, 6, ... }
--   p:close()
--
-- Membership is a zkcoord.group under <path>/members (Curator GroupMember's
-- layout: <path>/members/<id>). Every member computes the same assignment:
-- member i of the m ids in sorted order wants the partitions p with
-- p % m == i - 1. Ownership is a node: a member owns partition p while it
-- holds the ephemeral <path>/owners/<p> (data: its id). So two live members
-- never own one partition at the same moment: a member gives a partition
-- up (its on_change runs without it) before it deletes the node, and the
-- next owner can create the node only once it is gone; it waits on the
-- node, not in a loop. Once membership is stable, every partition has
-- exactly one owner.
--
-- Suspended: owned partitions stay owned (the session may live); stop work
-- that must never overlap while client:state() ~= "connected". Lost: our
-- nodes went with the session: on_change runs with {} at once; with the
-- new session we join again and take our share.
local util = require "zkcoord.util"

local type, pairs, ipairs, tostring, tonumber = type, pairs, ipairs, tostring, tonumber
local setmetatable, next = setmetatable, next
local sort = table.sort
local argerror = util.argerror

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = util.self_checker(mt, "partitioner", "p")

local OPT_KEYS = { "partitions", "id", "data" }


---@class zkcoord.partitioner_opts
---@field partitions integer how many partitions (>= 1)
---@field id string? this member's id (default "<hostname>:<pid>")
---@field data string? this member's data in the group

--- client:partitioner(path, opts) -> p: joins at once and takes its share.
---@return table|nil p, string? err
function _M.new(client, path, opts)
    client.check_path(path, "partitioner", 1)
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
        _owned = {},          -- partition -> session id that holds its node
        _fns = {},
        _busy = false,
        _again = nil,         -- members seen while a rebalance ran
        _closed = false,
    }, mt)
    self.group = client:group(base .. "/members", self.id, opts.data)
    local ok, err = self.group:join()
    if not ok then
        return nil, err
    end
    self._listener = client:on_state(function(state)
        if state == "lost" or state == "closed" then
            self:_drop_all()
        elseif state == "connected" and self._members then
            -- takes that failed on a connection loss are tried again
            self:_rebalance(self._members)
        end
    end)
    local w, werr = self.group:on_change(function(members)
        self:_rebalance(members)
    end)
    if not w then
        self.group:leave()
        client:remove_listener(self._listener)
        return nil, werr
    end
    return self
end


-- What we want: our share of the partitions for these members.
function _M:_wanted(members)
    local ids = {}
    for id in pairs(members) do
        ids[#ids + 1] = id
    end
    sort(ids)
    local want, me = {}, nil
    for i, id in ipairs(ids) do
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


function _M:_notify()
    util.call_all(self.client, self._fns, "partitioner on_change", self:owned())
end


-- Our session ended: every node of ours went with it.
function _M:_drop_all()
    if next(self._owned) ~= nil then
        self._owned = {}
        self:_notify()
    end
end


-- Gives p up: first in our view (on_change), then on the server.
function _M:_release(p)
    self._owned[p] = nil
    self:_notify()
    local ok, err = self.client:delete(self.owners .. "/" .. p)
    if not ok and err ~= "nonode" then
        -- could not say so now: the node goes with the session at worst
        self.client:delete_guaranteed(self.owners .. "/" .. p)
    end
end


-- Made outside the waiting frame (see util.waker): fires after a
-- delete, when p may be ours to take.
local function freed_watcher(self, p)
    return function(ev)
        if ev.type == "deleted" and not self._closed and self._want and self._want[p]
                and not self._owned[p] then
            self:_take_and_tell(p)
        end
    end
end


-- Takes p if its node is free; otherwise waits on the node (a watch) and
-- tries again when it goes, if p is still ours to want.
function _M:_take(p)
    local client = self.client
    local node = self.owners .. "/" .. p
    local sid = client:session_id()
    for _ = 1, util.MAX_RACES do     -- again only when the node went between create and look
        local ok, err = client:create(node, self.id, { ephemeral = true, parents = "container" })
        if ok then
            self._owned[p] = sid
            return true
        elseif err ~= "nodeexists" then
            return nil, err
        end
        local stat = client:exists(node, freed_watcher(self, p))
        if stat and stat.ephemeral_owner == sid then
            self._owned[p] = sid             -- ours already (a lost create reply)
            return true
        elseif stat then
            return false                     -- another member's: the watch brings us back
        end
    end
    return false
end


function _M:_take_and_tell(p)
    if self:_take(p) then
        self:_notify()
    end
end


-- Moves partitions to match the members: gives up what we no longer want,
-- then takes what we want. One at a time: a change during it runs after.
function _M:_rebalance(members)
    if self._busy then
        self._again = members
        return
    end
    self._busy = true
    while members do
        self._again = nil
        self._members = members
        local want = self:_wanted(members)
        self._want = want
        local sid = self.client:session_id()
        for p, owner in pairs(self._owned) do
            if owner ~= sid then
                self._owned[p] = nil           -- an ended session's
            elseif not want[p] then
                self:_release(p)
            end
        end
        local changed = false
        for p = 0, self.partitions - 1 do
            if want[p] and not self._owned[p] and not self._closed then
                changed = self:_take(p) or changed
            end
        end
        if changed then
            self:_notify()
        end
        members = self._again
    end
    self._busy = false
end


--- The partitions we own now, sorted.
---@return integer[]
function _M:owned()
    check_self(self, "owned")
    local out, sid = {}, self.client:session_id()
    local state = self.client:state()
    if state == "lost" or state == "closed" then
        return out
    end
    for p, owner in pairs(self._owned) do
        if owner == sid then
            out[#out + 1] = tonumber(p)
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
    for p in pairs(self._owned) do
        self:_release(p)
    end
    return self.group:close()
end


_M.mt = mt
return _M
