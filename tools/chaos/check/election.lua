-- chaos.check.election: no two live leaders (rules.mutex: an older leader
-- excused only when it had lost its leadership), the fenced resource's
-- accept log strictly increasing in the token (DIR/election.res), and a
-- leader whose token was refused finds its leadership lost.
local rules = require "chaos.check.rules"

local format = string.format

local _M = {}

function _M.run(R)
    local list = R.grants.election or {}
    rules.mutex(R, list, "election")
    rules.resource(R, "election.res", "election", list)
    for _, g in ipairs(list) do
        if g.still_held then
            R:violation("election: fenced leader still believes it leads",
                        rules.desc(g) .. ": token refused, is_leader() still true 10 s later")
        end
    end
    local s, rs = rules.opstat(R, "election"), R.res_stats.election
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "election: two live holders (leaders), a stale write accepted",
        prefix = "election: ", name = "election",
        figures = { granted = s.granted, overlaps = R.overlaps.election },
        details = format("campaigns %d, elected %d; overlapping leaderships %d (the older had "
                         .. "lost it: excused); writes accepted %d, refused %d", s.tries,
                         s.granted, R.overlaps.election, rs.accepted, rs.refused) }
end

return _M
