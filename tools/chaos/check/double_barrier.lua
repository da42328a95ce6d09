-- chaos.check.double_barrier: start together, finish together (README),
-- from the op=dbenter / dbleave lines. A participant is present on a path
-- from its enter's try to its leave's outcome (or a session timeout after
-- its enter failed, or after it was killed: its session lives on): a
-- superset of the time its node existed.
--   early enter   an enter that returned true though at no moment since it
--                 began were N participants present.
--   early leave   a leave that returned true though a participant surely
--                 present when that one got through (its enter had returned
--                 true, its leave not begun) had shown no sign of leaving by
--                 then (its leave tried, its process killed, paused,
--                 expired or its session lost).
local format = string.format

local _M = {}

local N = 3     -- chaos/recipe/double_barrier.lua's

local function intervals(R)
    local by_path = {}
    for _, P in pairs(R.procs) do
        local kill_t = R.killed[P.key] or R.stuck[P.key]
        local cur
        for _, o in ipairs(P.order) do
            if o.op == "dbenter" then
                local path = o.kv.path
                cur = { key = P.key, P = P, path = path, from = o.try_t, enter = o }
                by_path[path] = by_path[path] or {}
                by_path[path][#by_path[path] + 1] = cur
                if o.out ~= "ack" then
                    -- A failed enter deletes its node, maybe later (a
                    -- guaranteed delete): a session timeout of slack.
                    cur.to = o.out_t and o.out_t + R.st
                end
            elseif o.op == "dbleave" and cur and cur.path == o.kv.path then
                -- The lowest node stays until every other went: present
                -- until the leave's outcome.
                cur.to, cur.leave = o.out_t, o
            end
        end
        -- Killed inside: its node stays until its session expires.
        local gone = kill_t and kill_t + R.st + 1 or P.last_t
        for _, list in pairs(by_path) do
            for _, iv in ipairs(list) do
                if iv.key == P.key and not iv.to then iv.to = gone end
            end
        end
    end
    return by_path
end

-- Most participants present at once during [a, b].
local function most_present(list, a, b)
    local best = 0
    for _, x in ipairs(list) do
        local s = math.max(a, x.from)
        if s <= b and x.to >= s then
            local k = 0
            for _, y in ipairs(list) do
                if y.from <= s and y.to >= s then k = k + 1 end
            end
            best = math.max(best, k)
        end
    end
    return best
end

-- Any sign by time t that participant y left: its leave tried, its enter
-- failed, a fault on its process, its session lost.
local function gone_by(R, y, t)
    if (y.leave and y.leave.try_t <= t) or (y.enter.out ~= "ack" and y.to <= t) then
        return true
    end
    local kill_t = R.killed[y.key]
    if kill_t and kill_t <= t then return true end
    for _, f in ipairs(R.by_target[y.P.id] or {}) do
        if f.inc == y.P.inc and f.from <= t and f.to >= y.from then return true end
    end
    for _, s in ipairs(y.P.states) do
        if s.new == "lost" and s.t >= y.from and s.t <= t then return true end
    end
    return false
end

function _M.run(R)
    local by_path = intervals(R)
    local through, left = 0, 0
    for path, list in pairs(by_path) do
        for _, x in ipairs(list) do
            local e = x.enter
            if e.out == "ack" then
                through = through + 1
                local most = most_present(list, e.try_t, e.out_t)
                if most < N then
                    R:violation("double_barrier: through before all arrived",
                                format("%s entered %s at %.3f; at most %d of %d participants "
                                       .. "present since %.3f", x.key, path, e.out_t, most, N,
                                       e.try_t))
                end
                local l = x.leave
                if l and l.out == "ack" then
                    left = left + 1
                    for _, y in ipairs(list) do
                        -- y surely had its node when x got through: its
                        -- enter had returned true, its leave not begun.
                        local ye = y.enter
                        local sure = ye.out == "ack" and ye.out_t <= e.out_t
                            and (not y.leave or y.leave.try_t >= e.out_t)
                        if y ~= x and sure and not gone_by(R, y, l.out_t) then
                            R:violation("double_barrier: left before all left",
                                        format("%s left %s at %.3f while %s (present since "
                                               .. "%.3f) had not begun to leave", x.key, path,
                                               l.out_t, y.key, y.from))
                        end
                    end
                end
            end
        end
    end
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "double barrier: through before all " .. N .. " arrived, or out before all left",
        prefix = "double_barrier: ", name = "double_barrier",
        figures = { through = through, left = left },
        details = format("enters through %d, leaves through %d", through, left) }
end

return _M
