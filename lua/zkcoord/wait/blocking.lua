--- zkcoord.wait.blocking: the default waiter outside nginx.
--
-- The calling thread blocks on the C core's condition variable. While it
-- waits it drains the client's queue, so replies to other requests, watch
-- events and session changes are handled meanwhile, and their callbacks run
-- right after (never on a ZooKeeper thread). A waiter is the only place that
-- knows how to wait: the client and every recipe wait through `event()` and
-- `sleep()` (kazoo's handler idea).
local core = require "zkcoord.core"

local now = core.now
local setmetatable = setmetatable
local huge = math.huge

local _M = { _VERSION = "0.1.0", name = "blocking", inline_callbacks = true }
local mt = { __index = _M }

local Event = {}
local event_mt = { __index = Event }


---@param client table the zkcoord client this waiter serves
function _M.new(client)
    return setmetatable({ client = client }, mt)
end


--- A one-shot event: `set()` once, `wait(timeout)` until it is set.
function _M:event()
    return setmetatable({ client = self.client, is_set = false }, event_mt)
end


function Event:set()
    self.is_set = true
end


--- Waits until set or until `timeout` seconds pass (nil: no limit other
--- than the client's own). Returns true when set, false on timeout.
function Event:wait(timeout)
    local client = self.client
    local deadline = timeout and now() + timeout or huge
    while true do
        client:_pump()
        if self.is_set then
            return true
        end
        local left = deadline - now()
        if left <= 0 or client._closed then
            return self.is_set
        end
        client._q:wait(client:_timer_cap(left))
    end
end


--- Sleeps `seconds` while still serving the client's events.
function _M:sleep(seconds)
    return self:event():wait(seconds)
end


--- Runs `fn(...)` soon, outside the drain loop: at the end of the current
--- pump (blocking mode runs callbacks inline, in arrival order).
function _M:defer(fn, ...)
    self.client:_enqueue_callback(fn, ...)
end


_M.now = now


return _M
