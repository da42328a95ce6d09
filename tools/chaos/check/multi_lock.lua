-- chaos.check.multi_lock: mutual exclusion per lock, as the lock's rule
-- (rules.mutex): two grants (op=ml) of different processes that share a
-- lock of their pairs and overlap, the older not having lost its hold.
local rules = require "chaos.check.rules"

local format = string.format

local _M = {}

function _M.run(R)
    local list = R.grants.ml or {}
    for _, name in ipairs({ "a", "b", "c" }) do
        local mine = {}
        for _, g in ipairs(list) do
            if (g.kv.locks or ""):find(name, 1, true) then mine[#mine + 1] = g end
        end
        rules.mutex(R, mine, "multi_lock")
    end
    local s = rules.opstat(R, "ml")
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "multi-lock: two live holders of one lock",
        prefix = "multi_lock: ",
        details = format("acquires %d, granted %d; overlapping grants on one lock %d (the older "
                         .. "holder had lost it: excused)", s.tries, s.granted,
                         R.overlaps.multi_lock or 0) }
end

return _M
