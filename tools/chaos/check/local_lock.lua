-- chaos.check.local_lock: the plain lock held by local owners of one
-- process and by other processes: no two live holders (local ones
-- included: a release that wakes a local waiter is a grant too), the
-- fenced resource's accept log strictly increasing (DIR/local.res), and a
-- holder whose token was refused finds its lock lost.
local cohort_lock = require "chaos.check.cohort_lock"

local _M = {}

function _M.run(R)
    cohort_lock.owners_row(R, "local_lock", "locallock", "local.res", "plain lock, local owners")
end

return _M
