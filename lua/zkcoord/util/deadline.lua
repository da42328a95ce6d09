--- zkcoord.util.deadline: deadlines, and waiting for the connection
--- until one (internal).
--
-- A deadline is a core.now() time, or nil for none.
local core = require "zkcoord.core"

local now = core.now
local min = math.min

local _M = { _VERSION = require("zkcoord.version") }


--- The deadline `timeout` seconds from now (nil for nil: no deadline).
function _M.deadline(timeout)
    return timeout and now() + timeout
end


--- Seconds left until `deadline` (a core.now() time), never below 0;
--- nil for no deadline.
function _M.remaining(deadline)
    if not deadline then
        return nil
    end
    local left = deadline - now()
    return left > 0 and left or 0
end
local remaining = _M.remaining


--- Waits until the client is connected (true), closed (nil, "closed") or
--- the deadline (nil, "timeout"); nil deadline: as long as it takes.
function _M.wait_connected(client, deadline)
    while true do
        local left = remaining(deadline)
        if left == 0 then
            return nil, "timeout"
        end
        local ok, err = client:wait_connected(left and min(left, 1) or 1)
        if ok or err == "closed" then
            return ok, err
        end
    end
end

return _M
