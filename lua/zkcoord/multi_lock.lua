--- zkcoord.multi_lock: several locks taken as one, all or none (Curator's
--- InterProcessMultiLock).
--
--   local ml = client:multi_lock({ "/locks/account-1", "/locks/account-2" })
--   local ok, err = ml:acquire(5)      -- nil: wait forever, 0: try once
--   if ok then transfer() ml:release() end
--
-- Algorithm: the locks (zkcoord.lock, so each is fair and herd-free, and
-- Curator's InterProcessMutex on the same path excludes us too) are taken
-- one by one in the byte order of their paths, whatever the order given.
-- Two multi-locks over overlapping paths therefore never wait for each
-- other in a cycle: no deadlock, with or without timeouts (Curator takes
-- them in the order given and relies on the timeout). If one cannot be had
-- in time, those taken are released: all or none.
--
-- Suspended: the locks stay held. Lost (session expired, or one of our
-- nodes deleted): held() turns false and on_lost(fn(reason, path)) runs for
-- each lock lost; release() then gives back the others.
local args = require "zkcoord.util.args"
local deadlines = require "zkcoord.util.deadline"
local callbacks = require "zkcoord.util.callbacks"
local holds = require "zkcoord.util.held"
local contract = require "zkcoord.contract"

local type, pairs, ipairs, setmetatable = type, pairs, ipairs, setmetatable
local sort = table.sort
local argerror = args.argerror

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = args.self_checker(mt, "multi-lock", "ml")


--- client:multi_lock(paths, opts) -> ml. opts go to every lock (owner, data).
function _M.new(client, paths, opts)
    if type(paths) ~= "table" or #paths == 0 then
        argerror(1, "multi_lock", "paths must be a non-empty array of paths, got "
                 .. type(paths))
    end
    local sorted, seen = {}, {}
    for i, p in ipairs(paths) do
        contract.check_path(p, "multi_lock", 1)
        if seen[p] then
            argerror(1, "multi_lock", "paths[" .. i .. "] is there twice: " .. p)
        end
        seen[p] = true
        sorted[i] = p
    end
    local keys = 0
    for _ in pairs(paths) do
        keys = keys + 1
    end
    if keys ~= #sorted then     -- a hole, or a key ipairs does not reach
        argerror(1, "multi_lock", "paths must be an array without holes")
    end
    sort(sorted)
    local locks = {}
    for i, p in ipairs(sorted) do
        locks[i] = client:lock(p, opts)
    end
    local self = setmetatable({ client = client, paths = sorted, locks = locks,
                                _lost_fns = {} }, mt)
    for i, l in ipairs(locks) do
        l:on_lost(function(reason)
            self._lost = true
            callbacks.call_all(client, self._lost_fns, "multi_lock on_lost", reason, sorted[i])
        end)
    end
    return self
end


--- Takes every lock, in path order, within `timeout` seconds in all (nil:
--- as long as it takes, 0: try each once). All or none.
---@return true|nil ok, string? err "timeout" | "closed" | a code
function _M:acquire(timeout)
    check_self(self, "acquire")
    args.check_timeout(timeout, "acquire", 1)
    local deadline = deadlines.deadline(timeout)
    while true do
        self._lost = false
        for i, l in ipairs(self.locks) do
            local ok, err = l:acquire(deadlines.remaining(deadline))
            if not ok then
                for j = i - 1, 1, -1 do
                    self.locks[j]:release()
                end
                return nil, err
            end
        end
        -- A lock taken first may have been lost while the later ones were
        -- taken (its session ended meanwhile): all or none, so give them
        -- all back and take them again, within the same deadline.
        contract.current_state(self.client)    -- a loss that reached the process, first
        if self:held() then
            self._lost = false
            return true
        end
        for i = #self.locks, 1, -1 do
            self.locks[i]:release()
        end
        local left = deadlines.remaining(deadline)
        if left and left <= 0 then
            return nil, contract.is_closed(self.client) and "closed" or "timeout"
        end
    end
end


--- Releases every lock (the reverse order), the others also when one
--- fails. nil, "lost" if one was lost since acquire(); else the first
--- failure ("notheld": not held).
---@return true|nil ok, string? err
function _M:release()
    check_self(self, "release")
    contract.current_state(self.client)    -- a loss that reached the process, first
    if self._lost then
        self._lost = false
        for i = #self.locks, 1, -1 do
            self.locks[i]:release()
        end
        return nil, contract.is_closed(self.client) and "closed" or "lost"
    end
    local first
    for i = #self.locks, 1, -1 do
        local ok, err = self.locks[i]:release()
        if not ok and not first then
            first = err
        end
    end
    if first then
        return nil, first
    end
    return true
end


--- Runs fn(...) holding every lock (acquire(timeout), fn protected,
--- release whatever fn did), as lock:run: fn's results; nil, err when the
--- acquire failed or a lock was lost while fn ran ("lost"); an error in fn
--- is raised again after the release.
---@return any ... fn's results, or nil, err
function _M:run(fn, timeout, ...)
    check_self(self, "run")
    return holds.acquire_run(self, self.release, false, fn, timeout, ...)
end


--- Are all the locks held, in a live session?
function _M:held()
    check_self(self, "held")
    for _, l in ipairs(self.locks) do
        if not l:held() then
            return false
        end
    end
    return true
end


--- The fencing token of the hold: the highest czxid of its lock nodes (it
--- grows with every acquire of this multi-lock), and a table path -> that
--- lock's token, for a resource guarded by one of the paths. While every
--- lock is held by the current owner; else nil, "notheld".
---@return number|nil token, table|string by_path_or_err
function _M:token()
    check_self(self, "token")
    local top, by_path = nil, {}
    for i, l in ipairs(self.locks) do
        local t = l:token()
        if t == nil then
            return nil, "notheld"
        end
        by_path[self.paths[i]] = t
        if top == nil or t > top then
            top = t
        end
    end
    return top, by_path
end


--- fn(reason, path) when one of the held locks is lost.
function _M:on_lost(fn)
    check_self(self, "on_lost")
    return args.add_fn(self._lost_fns, fn, "on_lost")
end


_M.mt = mt
return _M
