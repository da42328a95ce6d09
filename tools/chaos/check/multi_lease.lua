-- chaos.check.multi_lease: each slot of the multi-lease keeps the lease's
-- promise (chaos/check/lease.lua): no two holders believe they hold one
-- slot at the same second.
local lease = require "chaos.check.lease"
local rules = require "chaos.check.rules"

local format = string.format

local _M = {}

function _M.run(R)
    local terms = lease.terms(R, "mlease")
    lease.judge(R, terms, "multi_lease: two holders of one slot at once")
    local s = rules.opstat(R, "mlease")
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "multi-lease: two holders of one slot at once", prefix = "multi_lease: ",
        name = "multi_lease", figures = { tries = s.tries, granted = #terms },
        details = format("obtain tries %d, obtained %d, refused (every slot held) %d", s.tries,
                         #terms, s.fail.held or 0) }
end

return _M
