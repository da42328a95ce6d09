-- chaos.check.cohort_rwlock: the rwlock with cohort = true: no writer
-- overlaps another live holder, local ones included (chaos/check/cohort_lock.lua's
-- judge); the writers' accept log (DIR/cohortrw.res) strictly increasing.
local rules = require "chaos.check.rules"
local cohort_lock = require "chaos.check.cohort_lock"

local format = string.format

local _M = {}

function _M.run(R)
    local list = {}
    for _, op in ipairs({ "crread", "crwrite" }) do
        for _, g in ipairs(R.grants[op] or {}) do list[#list + 1] = g end
    end
    cohort_lock.judge(R, list, "cohort_rwlock", function(a, b)
        return a.op == "crwrite" or b.op == "crwrite"
    end, "cohortrw.res")
    local r, w, rs = rules.opstat(R, "crread"), rules.opstat(R, "crwrite"),
        R.res_stats.cohort_rwlock
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "cohort rwlock: a writer overlapping a live holder (local ones included), a "
            .. "stale write accepted",
        prefix = "cohort_rwlock: ", name = "cohort_rwlock",
        figures = { granted = r.granted + w.granted, writes = w.granted,
                    overlaps = R.overlaps.cohort_rwlock },
        details = format("read acquires %d, granted %d; write acquires %d, granted %d (3 local "
                         .. "owners at a time); overlapping grants %d (the older holder had lost "
                         .. "it: excused); writes accepted %d, refused %d", r.tries, r.granted,
                         w.tries, w.granted, R.overlaps.cohort_rwlock, rs.accepted, rs.refused) }
end

return _M
