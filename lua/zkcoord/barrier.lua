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
local args = require "zkcoord.util.args"
local deadlines = require "zkcoord.util.deadline"
local retries = require "zkcoord.util.retry"
local callbacks = require "zkcoord.util.callbacks"
local errors = require "zkcoord.errors"
local contract = require "zkcoord.contract"

local setmetatable = setmetatable
local now = core.now
local retry, remaining, waker = retries.retry, deadlines.remaining, callbacks.waker
local UNTIL_DEADLINE = retries.UNTIL_DEADLINE

-- Setting and lifting are idempotent: a write whose reply was lost
-- (errors.unknown_outcome) is sent again once connected, and its answer
-- ("nodeexists", "nonode") decides it. Undecided within the request
-- timeout: "unknown" (it may have happened), never "timeout".
local AGAIN = { max_tries = math.huge, also = errors.unknown_outcome }

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = args.self_checker(mt, "barrier", "b")


--- client:barrier(path) -> barrier object.
---@param client table
---@param path string
function _M.new(client, path)
    contract.check_path(path, "barrier", 1)
    if path == "/" then
        args.argerror(1, "barrier", "the root cannot be a barrier")
    end
    return setmetatable({ client = client, path = path }, mt)
end


local function create_once(client, path, deadline)
    return client:send("create", path, nil, { parents = true }):wait(remaining(deadline))
end


-- seen.maybe: a try's outcome was unknown (it may have been the delete).
local function delete_once(client, path, deadline, seen)
    local ok, err = client:send("delete", path):wait(remaining(deadline))
    seen.maybe = seen.maybe or errors.unknown_outcome[err] == true
    return ok, err
end


--- Sets the barrier (creates its node). Setting a set barrier is fine.
---@return true|nil ok, string? err "unknown" (no reply in time: it may be set) | a code
function _M:create()
    check_self(self, "create")
    local client = self.client
    local deadline = now() + contract.request_timeout(client)
    local ok, err = retry(client, deadline, AGAIN, create_once, client, self.path, deadline)
    if ok or err == "nodeexists" then
        return true
    end
    return nil, err == "timeout" and "unknown" or err
end


--- Lifts the barrier (deletes its node): every waiter goes.
---@return boolean|nil removed true (when a reply was lost: lifted, by this call or
---   another), or false if it was not set; nil, err "unknown" (no reply in time: it may
---   be lifted) | a code
function _M:remove()
    check_self(self, "remove")
    local client = self.client
    local deadline = now() + contract.request_timeout(client)
    local seen = { maybe = false }
    local ok, err = retry(client, deadline, AGAIN, delete_once, client, self.path, deadline,
                          seen)
    if ok then
        return true
    elseif err == "nonode" then
        return seen.maybe    -- after a lost reply, ours may have been the delete
    end
    return nil, err == "timeout" and "unknown" or err
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
    args.check_timeout(timeout, "wait", 1)
    local client, path = self.client, self.path
    local deadline = deadlines.deadline(timeout)
    local down = timeout == 0 and errors.of_state(client:state())
    if down then
        return nil, down    -- only looks, and no look can go out now
    end
    while true do
        if contract.is_closed(client) then
            return nil, "closed"
        end
        local ev = client:waiter():event()
        local wake = timeout ~= 0 and waker(ev) or nil
        -- Holds nothing in the session: a failed look is tried again, in a
        -- new session too, until the deadline.
        local st, err = retry(client, deadline, UNTIL_DEADLINE, client.exists, client, path, wake)
        if st == false then
            if wake then
                client:remove_watches(path, wake)    -- an exists() watch on a missing node stays
            end
            return true
        elseif st == nil then
            return nil, err
        elseif timeout == 0 then
            return nil, "timeout"
        end
        ev:wait(remaining(deadline))
        if not ev.is_set then
            client:remove_watches(path, wake)
            return nil, contract.is_closed(client) and "closed" or "timeout"
        end
        -- fired (deleted, changed, or the session ended): look again
    end
end


_M.mt = mt
return _M
