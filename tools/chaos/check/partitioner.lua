-- chaos.check.partitioner: the partitioner's promises (README), from the
-- contenders' part_view / part_claim lines and the driver's probe_part:
--   two owners   two processes' ownership of one partition (from on_change
--                to on_change, or to the process's end) overlap, and the
--                older owner was live: no fault on its process and its
--                connection up from 2 session timeouts before the newer
--                one took the partition.
--   false claim  a member that owned a partition (before and after the
--                read, connected, same session, no fault on it for 2
--                session timeouts) while the server's owner node was
--                another session's or missing.
--   unstable     once stable (no fault for stable.window(R) s): a
--                partition without an owner node, or owned by no live
--                member's session; a member whose view is not the
--                partitions the server has it own, or not its share
--                (member i of m sorted ids: p % m == i - 1).
local stable = require "chaos.check.stable"

local format, concat = string.format, table.concat

local _M = {}

local function set_of(list)
    local s = {}
    for x in (list or ""):gmatch("[^,]+") do s[tonumber(x)] = true end
    return s
end

-- Ownership intervals from each process's part_view lines.
local function intervals(R)
    local by_p = {}
    for _, P in pairs(R.procs) do
        local open, sid = {}, nil
        local function close(x, t)
            local g = open[x]
            g.end_t = t
            by_p[x] = by_p[x] or {}
            by_p[x][#by_p[x] + 1] = g
            open[x] = nil
        end
        for _, e in ipairs(P.events) do
            if e.ev == "part_view" then
                local now_set = set_of(e.kv.owned)
                for x in pairs(open) do
                    if not now_set[x] then close(x, e.t) end
                end
                for x in pairs(now_set) do
                    if not open[x] then
                        open[x] = { key = P.key, id = P.id, inc = P.inc, n = x, op = "part",
                                    enter_t = e.t, sid = e.kv.sid }
                    end
                end
                sid = e.kv.sid
            end
        end
        local kill_t = R.killed[P.key] or R.stuck[P.key]
        for x in pairs(open) do close(x, kill_t or P.last_t) end
        P.part_sid = sid
    end
    return by_p
end

-- Was process P live (no fault on it, connection up) during [a, b]?
local function live(R, P, a, b)
    if not stable.untouched(R, P, a, b) then
        return false
    end
    local state = "connected"
    for _, s in ipairs(P.states) do
        if s.t > b then break end
        if s.t >= a and s.new ~= "connected" then return false end
        state = s.new
    end
    return state == "connected"
end

local function two_owners(R, by_p)
    local overlaps = 0
    for x, list in pairs(by_p) do
        table.sort(list, function(a, b) return a.enter_t < b.enter_t end)
        for i, g in ipairs(list) do
            for j = 1, i - 1 do
                local old = list[j]
                if old.key ~= g.key and old.end_t > g.enter_t then
                    overlaps = overlaps + 1
                    local P = R.procs[old.key]
                    if live(R, P, g.enter_t - 2 * R.st, g.enter_t) then
                        R:violation("partitioner: two live owners",
                                    format("partition %d: %s owned it [%.3f, %.3f] (session %s) "
                                           .. "while %s took it at %.3f (session %s)", x, old.key,
                                           old.enter_t, old.end_t, tostring(old.sid), g.key,
                                           g.enter_t, tostring(g.sid)))
                    end
                end
            end
        end
    end
    return overlaps
end

local function claims(R)
    local n, bad = 0, 0
    for _, P in pairs(R.procs) do
        for _, e in ipairs(P.events) do
            if e.ev == "part_claim" and e.kv.still == "1" and e.kv.owner ~= "error" then
                n = n + 1
                if e.kv.owner ~= e.kv.mine and live(R, P, e.t - 2 * R.st, e.t) then
                    bad = bad + 1
                    R:violation("partitioner: claim not backed by the server",
                                format("%s at %.3f owns partition %s in session %s; the owner "
                                       .. "node's session: %s", P.key, e.t, tostring(e.kv.p),
                                       tostring(e.kv.mine), tostring(e.kv.owner)))
                end
            end
        end
    end
    return n
end

local function stable_state(R)
    local N = stable.window(R)
    local judged = 0
    for _, pr in ipairs(stable.probes(R, "probe_part")) do
        if pr.kv.owners and stable.settled(R, pr.t, N) then
            judged = judged + 1
            local owner, members, np = {}, {}, 0
            for x, s in pr.kv.owners:gmatch("(%d+)=([^,]+)") do
                owner[tonumber(x)], np = s, np + 1
            end
            for m in (pr.kv.members or ""):gmatch("[^,]+") do members[#members + 1] = m end
            local live_sids = {}
            for _, P in ipairs(stable.alive(R, pr.t, N)) do
                local v = stable.last(P, "part_view", pr.t)
                local sid = v and v.kv.sid or "?"
                live_sids[sid] = true
                local want, share, idx = {}, {}, nil
                for x, s in pairs(owner) do
                    if s == sid then want[#want + 1] = x end
                end
                table.sort(want)
                for i, m in ipairs(members) do
                    if m == "c" .. P.id then idx = i end
                end
                if idx then
                    for x = idx - 1, np - 1, #members do share[#share + 1] = x end
                end
                local view = v and stable.norm(v.kv.owned) or "none"
                local wanted = stable.norm(concat(want, ","))
                if view ~= wanted then
                    R:violation("partitioner: view differs from the server's",
                                format("%s at %.3f owns %s in its view, the server's owner nodes "
                                       .. "give its session %s %s", P.key, pr.t, view, sid, wanted))
                elseif wanted ~= stable.norm(concat(share, ",")) then
                    R:violation("partitioner: not its share",
                                format("%s at %.3f owns %s, its share of members %s is %s",
                                       P.key, pr.t, wanted, pr.kv.members,
                                       concat(share, ",")))
                end
            end
            for x = 0, np - 1 do
                if not owner[x] or owner[x] == "-" then
                    R:violation("partitioner: partition without owner",
                                format("partition %d has no owner node at %.3f", x, pr.t))
                elseif not live_sids[owner[x]] then
                    R:violation("partitioner: owner not a live member",
                                format("partition %d's owner node at %.3f is session %s's, no "
                                       .. "live member's", x, pr.t, owner[x]))
                end
            end
        end
    end
    if judged == 0 then
        R:violation("partitioner: never stable", "no probe after " .. N .. " s without a fault")
    end
    return judged, N
end

function _M.run(R)
    local by_p = intervals(R)
    local overlaps = two_owners(R, by_p)
    local nclaims = claims(R)
    local judged, N = stable_state(R)
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "partitioner: two live owners, a claim the server denies, no single owner or "
            .. "a view not the server's once stable",
        prefix = "partitioner: ", name = "partitioner",
        figures = { overlaps = overlaps, claims = nclaims, judged = judged },
        details = format("overlapping ownerships %d (the older owner not live: excused); claims "
                         .. "checked against the owner node %d; stable probes judged (no fault "
                         .. "for %g s before) %d", overlaps, nclaims, N, judged) }
end

return _M
