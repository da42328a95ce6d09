--- zkcoord.errors: the stable error codes every call returns as `nil, err`.
--
-- ZooKeeper's codes keep their names without the leading Z, lowercased
-- ("nonode", "badversion", "connectionloss" ...). Our own codes follow the
-- same style. Detail (a path, a server's words) always goes in a separate
-- third value so that callers match codes with `==`, never message text.
local core = require "zkcoord.core"

local _M = { _VERSION = require("zkcoord.version") }

-- ZooKeeper return code (number) -> name, from the C core. ZCLOSING (a
-- request our own close() failed) is named "closed" there.
local by_rc = core.codes
_M.by_rc = by_rc

-- Our own codes, beyond ZooKeeper's.
_M.own = {
    timeout = "a bounded wait ran out",
    closed = "the client was closed",
    notheld = "the lock is not held by this owner",
    lost = "the session that held it ended",
    toolarge = "data exceeds the node size limit",
    invalid = "the operation cannot be done in this state",
    forked = "used from another process than the one that opened the session",
    interrupted = "the wait was cancelled",
}


--- Name of a ZooKeeper return code.
---@param rc integer
---@return string
function _M.name(rc)
    return by_rc[rc] or ("zk" .. tostring(rc))
end


--- Errors after which the same request may succeed on a live connection.
_M.retryable = {
    connectionloss = true,
    operationtimeout = true,
    sessionmoved = true,
    throttledop = true,
}


return _M
