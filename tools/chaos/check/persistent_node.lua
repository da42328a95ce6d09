-- chaos.check.persistent_node: the persistent node's promises (README),
-- from the contenders' pn_set lines and the driver's probe_pn:
--   two nodes   a probe shows two nodes of one process (name c<ID> or
--               c<ID>-<seq>, data "<INC>:..."): one persistent node made twice.
--   missing     a probe at which a process had been running, with no fault
--               on it nor on a server for stable.window(R) s (healed), does
--               not show its node, or shows a version older than the last
--               one it set before that window began, or newer than any it set.
-- At least one probe must be judged.
local stable = require "chaos.check.stable"

local format = string.format

local _M = {}

-- The versions process P set, in order: { t =, v = }.
local function sets(P)
    local out = {}
    for _, e in ipairs(P.events) do
        if e.ev == "pn_set" then out[#out + 1] = { t = e.t, v = tonumber(e.kv.v) } end
    end
    return out
end

function _M.run(R)
    local N = stable.window(R)
    local judged, checked = 0, 0
    local set_cache = {}
    for _, pr in ipairs(stable.probes(R, "probe_pn")) do
        if pr.kv.nodes then
            local by = {}     -- "<id>.<inc>" -> { {name, v} }
            for name, inc, v in pr.kv.nodes:gmatch("([^=,]+)=(%d+):(%d+)") do
                -- "c<ID>", or protected sequential "_c_<uuid>-c<ID>-<seq>"
                local id = name:match("^c(%d+)$") or name:match("%-c(%d+)%-%d+$")
                local k = tostring(id) .. "." .. inc
                by[k] = by[k] or {}
                by[k][#by[k] + 1] = { name = name, v = tonumber(v) }
            end
            for k, list in pairs(by) do
                if #list > 1 then
                    R:violation("persistent_node: two nodes",
                                format("process %s has %s and %s at %.3f", k, list[1].name,
                                       list[2].name, pr.t))
                end
            end
            local any = false
            for _, P in ipairs(stable.alive(R, pr.t, N)) do
                if stable.untouched(R, P, pr.t - N, pr.t) then
                    any, checked = true, checked + 1
                    set_cache[P.key] = set_cache[P.key] or sets(P)
                    local lo, hi = nil, nil
                    for _, s in ipairs(set_cache[P.key]) do
                        if s.t <= pr.t - N then lo = s.v end
                        if s.t <= pr.t then hi = s.v end
                    end
                    local got = by[P.key] and by[P.key][1]
                    if not got then
                        R:violation("persistent_node: missing",
                                    format("%s's node absent at %.3f, %g s after any fault on it "
                                           .. "or a server", P.key, pr.t, N))
                    elseif (lo and got.v < lo) or (hi and got.v > hi) then
                        R:violation("persistent_node: stale data",
                                    format("%s's node %s has version %d at %.3f; set %s before "
                                           .. "%.3f, %s by then", P.key, got.name, got.v, pr.t,
                                           tostring(lo), pr.t - N, tostring(hi)))
                    end
                end
            end
            if any then judged = judged + 1 end
        end
    end
    if judged == 0 then
        R:violation("persistent_node: never stable", "no probe " .. N .. " s after a heal")
    end
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "persistent node: two nodes, or missing or stale once healed",
        prefix = "persistent_node: ", name = "persistent_node",
        figures = { judged = judged, checked = checked },
        details = format("probes judged %d, nodes checked %d (%g s after the last fault on their "
                         .. "process or a server)", judged, checked, N) }
end

return _M
