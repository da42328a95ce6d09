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

--- Judges the grants logged as `op` (resource DIR/`file`) under the name
--- `which` and adds its row: this checker's, and chaos.check.local_lock's.
function _M.owners_row(R, which, op, file, label)
    _M.judge(R, R.grants[op] or {}, which, nil, file)
    local s, rs = rules.opstat(R, op), R.res_stats[which]
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = label .. ": two live holders (local ones included), a stale write accepted",
        prefix = which .. ": ", name = which,
        figures = { granted = s.granted, overlaps = R.overlaps[which] },
        details = format("acquires %d by 3 local owners at a time, granted %d; overlapping "
                         .. "grants %d (the older holder had lost it: excused); writes accepted "
                         .. "%d, refused %d", s.tries, s.granted, R.overlaps[which],
                         rs.accepted, rs.refused) }
end

function _M.run(R)
    _M.owners_row(R, "cohort_lock", "cohort", "cohort.res", "cohort lock")
end

return _M
