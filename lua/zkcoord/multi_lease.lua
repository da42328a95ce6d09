--- zkcoord.multi_lease: at most `count` holders of a time-bound lease
--- (kazoo's MultiNonBlockingLease, same nodes and data).
--
--   local ml = client:multi_lease("/leases/reindex", 2, 600, { identifier = host })
--   local ok, err = ml:obtain()   -- true, slot: one of the 2 is ours
--   if ok then reindex() end      -- false: all taken; nil, err: failed
--
-- Node layout: `count` leases (zkcoord.lease) at <path>/0 .. <path>/<count-1>.
-- obtain() tries them in that order and stops at the first obtained (true,
-- its slot number), kazoo's way: a holder renewing takes a lower slot if
-- one is free by then, and its older slot stays its own until that term
-- ends. Clocks, kazoo compatibility and failures are the lease's
-- (zkcoord.lease); every process must use the same `count`.
local lease = require "zkcoord.lease"
local args = require "zkcoord.util.args"

local type, ipairs, setmetatable, floor = type, ipairs, setmetatable, math.floor
local argerror = args.argerror

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }

local check_self = args.self_checker(mt, "multi-lease", "ml")


--- client:multi_lease(path, count, duration, opts) -> ml (no server state
--- until obtain()). opts as zkcoord.lease's (identifier, timeout, clock).
---@param client table
---@param path string the parent of the leases' nodes
---@param count integer how many holders at most (>= 1)
---@param duration number seconds a term lasts from each obtain()
---@param opts zkcoord.lease_opts?
function _M.new(client, path, count, duration, opts)
    local whole = type(count) == "number" and count >= 1 and count < 2 ^ 31
                  and floor(count) == count
    if not whole then
        argerror(2, "multi_lease", "count must be an integer >= 1")
    end
    local o = lease.check_args(client, path, duration, opts, "multi_lease", 3, 4)
    local leases = {}
    for i = 1, count do
        leases[i] = lease.new(client, ("%s/%d"):format(path, i - 1), duration, o)
    end
    return setmetatable({
        client = client,
        path = path,
        count = count,
        duration = duration,
        identifier = o.identifier,
        _leases = leases,
        _slot = nil,      -- the slot the last obtain() took
    }, mt)
end


--- Obtains (or renews) one of the leases: true, slot (0 .. count-1) for
--- the first one obtained in slot order; false when every slot has
--- another holder whose term runs (or another version's record); nil,
--- err as zkcoord.lease's obtain (the slots after it are not tried).
---@return boolean|nil ok, integer|string|nil slot_or_err
function _M:obtain()
    check_self(self, "obtain")
    for i, l in ipairs(self._leases) do
        local ok, err, detail = l:obtain()
        if ok then
            self._slot = i - 1
            return true, i - 1
        elseif ok == nil then
            return nil, err, detail
        end
    end
    self._slot = nil
    return false
end


--- Is one of our terms still running by our clock (any slot)?
function _M:held()
    check_self(self, "held")
    for _, l in ipairs(self._leases) do
        if l:held() then
            return true
        end
    end
    return false
end


--- The slot the last obtain() took (0 .. count-1), or nil.
function _M:slot()
    check_self(self, "slot")
    return self._slot
end


--- The end of the term of the slot the last obtain() took (UTC seconds
--- since the epoch), or nil.
function _M:ends()
    check_self(self, "ends")
    return self._slot and self._leases[self._slot + 1]:ends()
end


return _M
