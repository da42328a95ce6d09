-- chaos.check.group: once membership is stable (no fault for
-- stable.window(R) s), every live member's view (its last group_view) is
-- the server's member list (the driver's probe_group), and every live
-- contender is in it. At least one probe must be judged: a run that never
-- settled proves nothing.
local stable = require "chaos.check.stable"

local format = string.format

local _M = {}

function _M.run(R)
    local N = stable.window(R)
    local judged, views = 0, 0
    for _, pr in ipairs(stable.probes(R, "probe_group")) do
        local server = pr.kv.members
        if server and stable.settled(R, pr.t, N) then
            judged = judged + 1
            local listed = {}
            for m in server:gmatch("[^,]+") do listed[m] = true end
            for _, P in ipairs(stable.alive(R, pr.t, N)) do
                views = views + 1
                local v = stable.last(P, "group_view", pr.t)
                local view = v and stable.norm(v.kv.members)
                if view ~= server then
                    R:violation("group: view differs from the server's",
                                format("%s at %.3f sees %s, the server lists %s (quiet %g s)",
                                       P.key, pr.t, tostring(view), server, N))
                end
                if not listed["c" .. P.id] then
                    R:violation("group: live member missing",
                                format("%s (member c%d) not listed at %.3f: %s", P.key, P.id,
                                       pr.t, server))
                end
            end
        end
    end
    if judged == 0 then
        R:violation("group: never stable", "no probe after " .. N .. " s without a fault")
    end
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "group: a view not the server's once stable, a live member missing",
        prefix = "group: ", name = "group", figures = { judged = judged, views = views },
        details = format("probes judged (no fault for %g s before): %d, member views compared: %d",
                         N, judged, views) }
end

return _M
