-- chaos.check.cohort_lock: the lock with cohort = true: no two live holders
-- (rules.mutex, local owners of one process included: a handoff is a
-- grant too), the fenced resource's accept log strictly increasing in the
-- pair token (DIR/cohort.res), and a holder whose token was refused finds
-- its lock lost.
local rules = require "chaos.check.rules"

local format = string.format

local _M = {}

--- What both cohort checkers do: list (grants), which (name), conflict, res file.
function _M.judge(R, list, which, conflict, file)
    rules.mutex(R, list, which, conflict, true)
    rules.resource(R, file, which, list)
    for _, g in ipairs(list) do
        if g.still_held then
            R:violation(which .. ": fenced holder still believes it holds",
                        rules.desc(g) .. ": token refused, held() still true 10 s later")
        end
    end
end

function _M.run(R)
    local list = R.grants.cohort or {}
    _M.judge(R, list, "cohort_lock", nil, "cohort.res")
    local s, rs = rules.opstat(R, "cohort"), R.res_stats.cohort_lock
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "cohort lock: two live holders (local ones included), a stale write accepted",
        prefix = "cohort_lock: ", name = "cohort_lock",
        figures = { granted = s.granted, overlaps = R.overlaps.cohort_lock },
        details = format("acquires %d by 3 local owners at a time, granted %d; overlapping "
                         .. "grants %d (the older holder had lost it: excused); writes accepted "
                         .. "%d, refused %d", s.tries, s.granted, R.overlaps.cohort_lock,
                         rs.accepted, rs.refused) }
end

return _M
