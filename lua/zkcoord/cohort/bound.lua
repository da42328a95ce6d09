--- zkcoord.cohort.bound: how far a cohort's node is passed on locally
--- (internal part of zkcoord.cohort): the one bound of the lock's local
--- handoffs and of the readers joining a read node, and the token's range.
local now = require("zkcoord.core").now

local _M = {}

_M.LOCAL_BITS = 12
_M.LOCAL_MAX = 2 ^ _M.LOCAL_BITS - 1    -- local grants of one node: n <= LOCAL_MAX
_M.DEFAULT_HANDOFFS = 16
_M.DEFAULT_TIME = 0.01

local LOCAL_MAX = _M.LOCAL_MAX


--- May a node granted at `since` be granted locally once more, as grant
--- number `n` (1 for the first local grant)? Always while `remote` is false
--- (no participant behind the node), else within the lock's
--- cohort_handoffs and cohort_time; never beyond LOCAL_MAX (the token's
--- range).
function _M.may_grant(n, since, remote, opts)
    if n > LOCAL_MAX then
        return false
    end
    if not remote then
        return true
    end
    return n <= (opts.cohort_handoffs or _M.DEFAULT_HANDOFFS)
           and now() - since < (opts.cohort_time or _M.DEFAULT_TIME)
end


return _M
