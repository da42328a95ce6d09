-- chaos.check.semaphore: at most MAX live holders at once. At each grant
-- (op=sem), the holders whose grants overlap it, the older ones not having
-- lost their lease (rules.excuse: a fault on their process, their own
-- notice, their connection down), plus the new one, are at most MAX.
local rules = require "chaos.check.rules"
local sem = require "chaos.recipe.semaphore"

local format = string.format

local _M = {}

function _M.run(R)
    local list = R.grants.sem or {}
    table.sort(list, function(a, b) return a.enter_t < b.enter_t end)
    local over, peak = 0, 0
    for i, g in ipairs(list) do
        local live = { g }
        for j = 1, i - 1 do
            local a = list[j]
            if a.end_t > g.enter_t and a.key ~= g.key then
                over = over + 1
                if not rules.excuse(R, a) then live[#live + 1] = a end
            end
        end
        peak = math.max(peak, #live)
        if #live > sem.MAX then
            local d = {}
            for _, h in ipairs(live) do d[#d + 1] = rules.desc(h) end
            R:violation("semaphore: more live holders than leases",
                        format("%d holders at %.3f (max %d): %s", #live, g.enter_t, sem.MAX,
                               table.concat(d, "; ")))
        end
    end
    local s = rules.opstat(R, "sem")
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "semaphore: more live holders than leases (" .. sem.MAX .. ")",
        prefix = "semaphore: ",
        details = format("acquires %d, granted %d; most live holders at once %d", s.tries,
                         s.granted, peak) }
    R.sem_overlaps = over
end

return _M
