--- zkcoord.util.callbacks: user callbacks and watch functions (internal).
--
-- User callbacks (on_lost, on_change ...) always run protected: one that
-- raises is logged through client:log("error", ...) and the others still
-- run, and so does the recipe.
local compat = require "zkcoord.compat"

local tostring = tostring
local xpcall, traceback = compat.xpcall, debug.traceback

local _M = { _VERSION = require("zkcoord.version") }


--- Calls fn(...) protected: an error is logged through client:log("error",
--- "<what> callback failed: ...") with a traceback, never raised.
---@return boolean ok
function _M.call(client, fn, what, ...)
    local ok, err = xpcall(fn, traceback, ...)
    if not ok then
        client:log("error", what .. " callback failed: " .. tostring(err))
    end
    return ok
end
local call = _M.call


--- Calls every function of the array `fns` with the same arguments, each
--- protected as call() does: all of them run even if one raises. The list
--- is read first, so a callback that adds or removes one does not disturb
--- this round.
function _M.call_all(client, fns, what, ...)
    local n = #fns
    local list = {}
    for i = 1, n do
        list[i] = fns[i]
    end
    for i = 1, n do
        call(client, list[i], what, ...)
    end
end


--- A watch function that sets `ev`. Watch closures are made in a function
--- of their own, never in the frame that waits: in nginx that frame's
--- coroutine may be gone (request aborted) when the watch fires.
function _M.waker(ev)
    return function() ev:set() end
end


return _M
