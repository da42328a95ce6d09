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
    notleader = "this election object does not lead (election:token())",
    lost = "the session that held it ended",
    toolarge = "data exceeds the node size limit",
    invalid = "the operation cannot be done in this state",
    forked = "used from another process than the one that opened the session",
    interrupted = "the wait was cancelled",
    unknown = "a write's reply was lost and its deadline passed: it may or may not have happened",
    tls = "a TLS connection failed: a file that does not load, a certificate refused, "
          .. "a handshake that fails (connect)",
    sasl = "SASL authentication failed: a wrong user name or password, a mechanism the "
           .. "server or this machine does not have (connect)",
}


--- Name of a ZooKeeper return code.
---@param rc integer
---@return string
function _M.name(rc)
    return by_rc[rc] or ("zk" .. tostring(rc))
end


-- ---------------------------------------------------------------------------
-- How recipes treat a failed request. Two sets, and every recipe uses
-- these two (never a list of its own):
--
-- transient: the request did not get an answer, or the server turned it
--   away for now; the same request may succeed if sent again on a live
--   connection. A recipe sends it again through util.retry (backoff, bounded
--   by its deadline, waiting for the connection while suspended) when the
--   step is idempotent: a read, a delete whose "nonode" is fine, a create
--   whose "nodeexists" it can tell apart from its own (a protected name,
--   ephemeral_owner). "sessionexpired" is not transient: the session's
--   ephemeral nodes and watches are gone, so a step tied to them must start
--   over; a step that holds nothing in the session (a read, a wait for a
--   node) may go on in the new session (util.retry's `also`).
--
-- unknown_outcome: a write failed with one of these may still have been
--   applied by the server (the reply was lost, not the request; or our own
--   wait ran out, "timeout", or the session ended, "sessionexpired", while
--   it was in flight). A recipe never sends such a write again blindly: it
--   first finds out (the node's ephemeral_owner, its version, a protected
--   name) or gets rid of what the write may have made.

--- Errors after which the same request may succeed on a live connection.
_M.transient = {
    connectionloss = true,
    operationtimeout = true,
    sessionmoved = true,
    throttledop = true,
}

--- Errors after which a write may or may not have happened.
_M.unknown_outcome = {
    connectionloss = true,
    operationtimeout = true,
    sessionexpired = true,
    timeout = true,
}


--- What a try-once (a timeout of 0) answers at once, from the client's
--- state, when it cannot try now: nil while connected; "closed"; else
--- "connectionloss" (suspended, connecting, a lost session's successor
--- not connected yet, or connected on a link gone `silent`). It never
--- waits for the connection to come back.
---@param state string client:state()
---@param silent boolean? client:link_silent()
---@return string|nil err
function _M.of_state(state, silent)
    if state == "connected" and not silent then
        return nil
    end
    return state == "closed" and "closed" or "connectionloss"
end


--- The retry policy of a try-once's steps: the one try's own result, never
--- a wait for the connection nor "timeout" in its place.
_M.TRY_ONCE = { max_tries = 1 }


return _M
