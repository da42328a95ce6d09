--- zkcoord.barrier: hold processes until someone lifts the barrier.
--
--   local b = client:barrier("/deploy/ready")
--   b:create()                     -- the coordinator sets it
--   local ok, err = b:wait(60)     -- workers block until it is removed
--   b:remove()                     -- the coordinator lifts it: every waiter goes
--
-- Algorithm (ZooKeeper's barrier recipe, kazoo Barrier): the barrier is one
-- node. wait() asks exists() with a watch: no node means no barrier; else
-- it sleeps until the watch fires and asks again (the node may have been
-- re-created meanwhile: a barrier that is set again holds again).
--
-- Node layout: <path> itself, a persistent node (its parents are created
-- as persistent nodes if missing); no data.
--
-- Connection loss ("suspended"): wait() keeps waiting (the watch is kept
-- by the session and re-sent on reconnect). Session loss ("lost"): the
-- watch is gone with the session; wait() asks again in the new session.
-- The barrier node itself is persistent: neither changes it. Every wait is
-- bounded by its timeout; on timeout the watch is removed.
local core = require "zkcoord.core"

local now = core.now
local type, error, setmetatable, getmetatable = type, error, setmetatable, getmetatable
local min = math.min

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }

local TRANSIENT = { connectionloss = true, operationtimeout = true, sessionexpired = true,
                    closed = true }


-- Waits until the client is connected (true), closed, or the deadline.
local function wait_connected(client, deadline)
    while true do
        local left = deadline and deadline - now()
        if left and left <= 0 then
            return nil, "timeout"
        end
        local ok, err = client:wait_connected(left and min(left, 1) or 1)
        if ok or err == "closed" then
            return ok, err
        end
    end
end
_M.wait_connected = wait_connected


--- client:barrier(path) -> barrier object.
---@param client table
---@param path string
function _M.new(client, path)
    client.check_path(path, "barrier", 1)
    if path == "/" then
        error("bad argument #1 to 'barrier' (the root cannot be a barrier)", 2)
    end
    return setmetatable({ client = client, path = path }, mt)
end


local function check_self(self, name)
    if getmetatable(self) ~= mt then
        error(("'%s' must be called on a barrier (use b:%s())"):format(name, name), 3)
    end
end


--- Sets the barrier (creates its node). Setting a set barrier is fine.
---@return true|nil ok, string? err
function _M:create()
    check_self(self, "create")
    local ok, err = self.client:create(self.path, nil, { parents = true })
    if ok or err == "nodeexists" then
        return true
    end
    return nil, err
end


--- Lifts the barrier (deletes its node): every waiter goes.
---@return boolean|nil removed true, or false if it was not set; nil, err
function _M:remove()
    check_self(self, "remove")
    local ok, err = self.client:delete(self.path)
    if ok then
        return true
    elseif err == "nonode" then
        return false
    end
    return nil, err
end


--- Is the barrier set now? (one exists() round trip)
---@return boolean|nil set, string? err
function _M:is_set()
    check_self(self, "is_set")
    local st, err = self.client:exists(self.path)
    if st == nil then
        return nil, err
    end
    return st ~= false
end


--- Waits until the barrier is not set.
---@param timeout number? seconds; nil waits as long as it takes, 0 only looks
---@return true|nil ok, string? err "timeout" | "closed" | a ZooKeeper code
function _M:wait(timeout)
    check_self(self, "wait")
    if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout < 0) then
        error("bad argument #1 to 'wait' (timeout must be nil or a number >= 0)", 2)
    end
    local client, path = self.client, self.path
    local deadline = timeout and now() + timeout
    while true do
        if client:state() == "closed" then
            return nil, "closed"
        end
        local ev = client:waiter():event()
        local function wake()
            ev:set()
        end
        local st, err = client:exists(path, timeout ~= 0 and wake or nil)
        if st == false then
            if timeout ~= 0 then
                client:remove_watches(path, wake)    -- an exists() watch on a missing node stays
            end
            return true
        elseif st == nil then
            if not TRANSIENT[err] then
                return nil, err
            end
            local ok, werr = wait_connected(client, deadline)
            if not ok then
                return nil, werr
            end
        elseif timeout == 0 then
            return nil, "timeout"
        else
            local left = deadline and deadline - now()
            if left and left < 0 then left = 0 end
            ev:wait(left)
            if not ev.is_set then
                client:remove_watches(path, wake)
                if client:state() == "closed" then
                    return nil, "closed"
                end
                return nil, "timeout"
            end
            -- fired (deleted, changed, or the session ended): look again
        end
    end
end


_M.mt = mt
return _M
