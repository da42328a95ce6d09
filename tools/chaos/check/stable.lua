-- chaos.check.stable: what the checkers of the recipes that promise a
-- stable state (group, partitioner, persistent node) share: when the run
-- had been quiet (no fault) long enough for that state to settle, which
-- contender processes were alive then, and what a process last logged.
local _M = {}

--- How long the run must have been quiet before a probe is judged: a
--- killed contender's session expires (one session timeout), the others see
--- it and rebalance; the driver's settle phase waits as long (driver.lua).
function _M.window(R)
    return 3 * R.st + 2
end

--- Was the run free of faults (any kind, on anyone) during [t - secs, t]?
function _M.quiet(R, t, secs)
    for _, f in ipairs(R.faults) do
        if f.from <= t and (f.to or t) >= t - secs then
            return false
        end
    end
    return true
end

--- Had the run settled at t: no fault during [t - secs, t], and no
--- contender process started then (the ones at the start included)?
function _M.settled(R, t, secs)
    if not _M.quiet(R, t, secs) then
        return false
    end
    local any = false
    for _, P in pairs(R.procs) do
        if P.first_t and P.first_t <= t then
            if P.first_t > t - secs then
                return false
            end
            any = true
        end
    end
    return any
end

--- Was contender process P free of faults (its own, and servers') during [a, b]?
function _M.untouched(R, P, a, b)
    for _, f in ipairs(R.faults) do
        local mine = f.target == nil or (f.target == P.id and f.inc == P.inc)
        if mine and f.from <= b and (f.to or b) >= a then
            return false
        end
    end
    return true
end

--- The processes alive at t that had run `since` seconds by then (they
--- logged before t - since and after t, and were not killed).
function _M.alive(R, t, since)
    local out = {}
    for _, P in pairs(R.procs) do
        local killed = R.killed[P.key] or R.stuck[P.key]
        if P.first_t and P.first_t <= t - since and P.last_t >= t and not (killed and killed <= t) then
            out[#out + 1] = P
        end
    end
    table.sort(out, function(a, b) return a.key < b.key end)
    return out
end

--- The last event `ev` of process P at or before t (nil if none).
function _M.last(P, ev, t)
    local found
    for _, e in ipairs(P.events) do
        if e.t > t then break end
        if e.ev == ev then found = e end
    end
    return found
end

--- The driver's probes `ev` (from chaos/recipe/<name>.lua's probe), in order.
function _M.probes(R, ev)
    local out = {}
    for _, e in ipairs(R.driver_events) do
        if e.ev == ev then out[#out + 1] = e end
    end
    return out
end

--- "a,b,c" -> sorted, comma-joined again ("" for none).
function _M.norm(list)
    local t = {}
    for x in (list or ""):gmatch("[^,]+") do t[#t + 1] = x end
    table.sort(t)
    return table.concat(t, ",")
end

return _M
