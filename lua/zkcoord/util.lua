--- zkcoord.util: small helpers the client and the recipes share (internal).
local now = require("zkcoord.core").now

local _M = { _VERSION = require("zkcoord.version") }


--- Seconds left until `deadline` (a core.now() time), never below 0;
--- nil for no deadline.
function _M.remaining(deadline)
    if not deadline then
        return nil
    end
    local left = deadline - now()
    return left > 0 and left or 0
end


return _M
