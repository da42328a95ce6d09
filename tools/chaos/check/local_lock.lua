-- chaos.check.local_lock: the plain lock held by local owners of one
-- process and by other processes: no two live holders (local ones
-- included: a release that wakes a local waiter is a grant too), the
-- fenced resource's accept log strictly increasing (DIR/local.res), and a
-- holder whose token was refused finds its lock lost.
local rules = require "chaos.check.rules"
local cohort_lock = require "chaos.check.cohort_lock"

local format = string.format

local _M = {}

function _M.run(R)
    cohort_lock.judge(R, R.grants.locallock or {}, "local_lock", nil, "local.res")
    local s, rs = rules.opstat(R, "locallock"), R.res_stats.local_lock
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "plain lock, local owners: two live holders (local ones included), a stale write accepted",
        prefix = "local_lock: ", name = "local_lock",
        figures = { granted = s.granted, overlaps = R.overlaps.local_lock },
        details = format("acquires %d by 3 local owners at a time, granted %d; overlapping "
                         .. "grants %d (the older holder had lost it: excused); writes accepted "
                         .. "%d, refused %d", s.tries, s.granted, R.overlaps.local_lock,
                         rs.accepted, rs.refused) }
end

return _M
