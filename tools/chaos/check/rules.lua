-- chaos.check.rules: the checker's rules, one function each, over the record
-- R that chaos/check/logs.lua filled (tools/chaos/check.lua defines grant,
-- overlap, stale write, hang, leak and the counter's rule). Each rule
-- records what it finds with R:violation(kind, msg) / R:hang(kind, msg)
-- and leaves its figures in R for the summary.
local resource = require "chaos.resource"
local proc = require "helpers.proc"

local tonumber, tostring, ipairs, pairs, format, sort = tonumber, tostring, ipairs, pairs,
    string.format, table.sort
local num = tonumber

local _M = {}

-- Time a process spent SIGSTOPped within [a, b].
local function paused_within(R, key, a, b)
    local s = 0
    for _, p in ipairs(R.paused[key] or {}) do
        local x, y = math.max(a, p[1]), math.min(b, p[2])
        if y > x then s = s + (y - x) end
    end
    return s
end

--- The statistics of one kind of operation ("lock", "rwread", "rwwrite", "counter").
function _M.opstat(R, op)
    R.ops[op] = R.ops[op] or { tries = 0, granted = 0, acked = 0, fail = {}, failed = 0,
                               ambiguous = 0, killed_mid = 0, accepted = 0, refused = 0,
                               max_over = 0 }
    return R.ops[op]
end

-- How operation o of process P ended: counted, and a hang when it has no
-- outcome or took far longer than its timeout.
local function outcome(R, P, o, s, kill_t, last_op)
    if not o.out then
        -- every try in flight when a fault killed the process (a cohort's
        -- coroutines try at once), not only its last
        if kill_t and not R.stuck[P.key] and (o == last_op or o.try_t <= kill_t) then
            s.killed_mid = s.killed_mid + 1
            if o.op == "counter" then R.ambiguous = R.ambiguous + 1 end
        else
            R:hang("no outcome", format("%s op %d (%s) tried at %.3f never ended", P.key, o.n,
                                        o.op, o.try_t))
        end
        return
    end
    local took = o.out_t - o.try_t - paused_within(R, P.key, o.try_t, o.out_t)
    local over = took - (o.timeout or 0)
    if over > s.max_over then s.max_over = over end
    if over > 120 then
        R:hang("slow outcome", format("%s op %d (%s, timeout %s) took %.1f s", P.key,
                                      o.n, o.op, tostring(o.timeout), took))
    end
    if o.out == "enter" then
        s.granted = s.granted + 1
    elseif o.out == "ack" then
        s.acked = s.acked + 1
        if o.op == "counter" then R.acks[#R.acks + 1] = o end
    elseif o.out == "fail" then
        s.fail[o.err or "?"] = (s.fail[o.err or "?"] or 0) + 1
        if o.ambiguous then
            s.ambiguous = s.ambiguous + 1
            R.ambiguous = R.ambiguous + 1
        else
            s.failed = s.failed + 1
        end
    end
end

-- The grant list of an operation: R.grants[GRANT_LIST[op] or op].
local GRANT_LIST = { rwread = "rw", rwwrite = "rw" }

-- A grant's interval [enter_t, end_t] (a holder killed inside ends at the
-- kill), its writes counted, the grant listed for the overlap rule. A
-- process may hold several grants at once (a cohort's coroutines): every
-- one it was inside when it was killed by a fault ends at the kill (not
-- when it was killed at the end for hanging: that is a hang).
local function grant(R, P, o, s, kill_t, last_op)
    local killed_inside = kill_t and (o == last_op
                                      or not R.stuck[P.key] and o.enter_t <= kill_t)
    if o.leave_t then
        o.end_t = o.leave_t
        if not o.released and not killed_inside then
            R:hang("no release", format("%s op %d (%s) left but never released", P.key, o.n, o.op))
        end
    elseif killed_inside then
        o.end_t = kill_t
    else
        o.end_t = P.last_t
        R:hang("no leave", format("%s op %d (%s) entered at %.3f never left", P.key, o.n, o.op,
                                  o.enter_t))
    end
    for _, w in ipairs(o.writes) do
        if w.res == "A" then s.accepted = s.accepted + 1
        elseif w.res == "R" then s.refused = s.refused + 1 end
    end
    local family = GRANT_LIST[o.op] or o.op
    R.grants[family] = R.grants[family] or {}
    local list = R.grants[family]
    list[#list + 1] = o
end

-- A process that raised, crashed, or had to be killed at the end.
local function process_end(R, P)
    for _, m in ipairs(P.raises) do
        R:violation("error raised", P.key .. ": " .. m)
    end
    if not P.exited and not R.killed[P.key] then
        if R.stuck[P.key] then
            R:hang("did not stop", P.key .. " had to be killed at the end")
        else
            local err = proc.read_file(R.dir .. "/c" .. P.id .. "." .. P.inc .. ".err") or ""
            R:violation("crash", P.key .. " exited without its exit line: " .. err:sub(1, 300))
        end
    end
end

--- Outcomes, hangs, grant intervals: R.ops, R.grants, R.acks, R.ambiguous.
function _M.outcomes(R)
    R.ops, R.grants, R.acks, R.ambiguous = {}, { lock = {}, rw = {} }, {}, 0
    for _, P in pairs(R.procs) do
        local kill_t = R.killed[P.key] or R.stuck[P.key]
        local last_op = P.order[#P.order]
        for _, o in ipairs(P.order) do
            local s = _M.opstat(R, o.op)
            s.tries = s.tries + 1
            outcome(R, P, o, s, kill_t, last_op)
            if o.out == "enter" then
                grant(R, P, o, s, kill_t, last_op)
            end
        end
        process_end(R, P)
    end
    for _, key in ipairs(R.died) do
        if R.procs[key] and R.procs[key].exited then
            R:violation("crash", key .. " died (driver saw it gone) after logging its exit")
        end
    end
end

function _M.desc(g)
    return format("%s op %d %s token %s [%.3f, %.3f]", g.key, g.n, g.op, tostring(g.token),
                  g.enter_t, g.end_t)
end
local desc = _M.desc

-- Why an older grant may overlap a newer one: it had lost its lock (a
-- fault on its process, its own notice, its connection not "connected").
local function excuse(R, g)
    for _, f in ipairs(R.by_target[g.id] or {}) do
        if f.inc == g.inc and f.from <= g.end_t + 1 and f.to >= g.enter_t - R.st - 1 then
            return f.kind
        end
    end
    if g.noticed or g.fenced then
        return "noticed (" .. (g.notice or "fenced") .. ")"
    end
    for _, s in ipairs(R.procs[g.key].states) do
        if s.new ~= "connected" and s.t >= g.enter_t - 1 and s.t <= g.end_t + 1 then
            return "connection " .. s.new
        end
    end
    return nil
end

_M.excuse = excuse

local function first_accept(g)
    for _, w in ipairs(g.writes) do
        if w.res == "A" then return w.t end
    end
    return nil
end

-- Two grants of different processes overlap: a violation unless the older
-- one had lost its lock, and even then none of its writes may be accepted
-- after the newer one's first.
local function overlap(R, which, a, g)
    R.overlaps[which] = R.overlaps[which] + 1
    local old, new = a, g
    if (g.token or 0) < (a.token or 0) then old, new = g, a end
    local why = excuse(R, old)
    if not why then
        R:violation(which .. ": two live holders", desc(old) .. " overlaps " .. desc(new))
        return
    end
    local k = why:match("^(%S+)")
    R.excused[which] = R.excused[which] or {}
    R.excused[which][k] = (R.excused[which][k] or 0) + 1
    if old.noticed or old.fenced then
        R.excused_noticed[which] = (R.excused_noticed[which] or 0) + 1
    end
    local fa = first_accept(new)
    if fa then
        for _, w in ipairs(old.writes) do
            if w.res == "A" and w.t > fa then
                R:violation(which .. ": stale write accepted",
                            format("%s wrote at %.3f after %s", desc(old), w.t, desc(new)))
            end
        end
    end
end

local function check_overlaps(R, list, which, conflict, within)
    sort(list, function(a, b) return a.enter_t < b.enter_t end)
    local active = {}
    for _, g in ipairs(list) do
        local still = {}
        for _, a in ipairs(active) do
            if a.end_t > g.enter_t then still[#still + 1] = a end
        end
        active = still
        for _, a in ipairs(active) do
            if (a.key ~= g.key or (within and a.n ~= g.n)) and conflict(a, g) then
                overlap(R, which, a, g)
            end
        end
        active[#active + 1] = g
    end
end

--- Overlapping grants of `list` (grant records: key, id, inc, enter_t,
--- end_t, token?) that conflict(a, b): a violation "<which>: two live
--- holders" unless the older had lost its hold (as the lock's rule).
--- `within`: grants of one process conflict too (local owners of a cohort).
--- R.overlaps[which], R.excused[which].
function _M.mutex(R, list, which, conflict, within)
    R.overlaps[which] = R.overlaps[which] or 0
    check_overlaps(R, list, which, conflict or function() return true end, within)
end

--- Overlapping grants: R.overlaps, R.excused, R.excused_noticed.
function _M.overlaps(R)
    R.overlaps, R.excused, R.excused_noticed = { lock = 0, rw = 0 }, {}, {}
    check_overlaps(R, R.grants.lock, "lock", function() return true end)
    check_overlaps(R, R.grants.rw, "rwlock", function(a, b)
        return a.op == "rwwrite" or b.op == "rwwrite"
    end)
end

-- Highest token granted (entered) before time t, for the fencing-gap count.
local function max_granted_before_fn(glist)
    local byenter = {}
    for _, g in ipairs(glist) do
        if g.op ~= "rwread" then byenter[#byenter + 1] = g end
    end
    sort(byenter, function(a, b) return a.enter_t < b.enter_t end)
    local prefmax, m = {}, -1
    for i, g in ipairs(byenter) do
        m = math.max(m, g.token or -1)
        prefmax[i] = m
    end
    return function(t)
        local lo, hi = 1, #byenter
        local ans = -1
        while lo <= hi do
            local mid = math.floor((lo + hi) / 2)
            if byenter[mid].enter_t < t then
                ans = prefmax[mid]
                lo = mid + 1
            else
                hi = mid - 1
            end
        end
        return ans
    end
end

-- One resource's decision log: accepted tokens strictly increasing across
-- grants, refusals only below the last accepted, every write inside its
-- writer's hold.
local function check_resource(R, file, which, glist, by_who)
    local entries = resource.read(R.dir .. "/" .. file)
    local rs = { accepted = 0, refused = 0 }
    R.res_stats[which] = rs
    local max_granted_before = max_granted_before_fn(glist)
    local last, last_who, last_t = -1, nil, 0
    for i, e in ipairs(entries) do
        if e.malformed then
            R:violation(which .. ": resource log", "malformed line " .. i .. ": " .. e.malformed)
        else
            if e.t < last_t then
                R:violation(which .. ": resource log", "time went back at line " .. i)
            end
            last_t = e.t
            if e.ok then
                rs.accepted = rs.accepted + 1
                if e.token < last or (e.token == last and e.who ~= last_who) then
                    R:violation(which .. ": stale write accepted",
                                format("line %d: %s accepted token %.0f after %.0f (%s)", i,
                                       e.who, e.token, last, tostring(last_who)))
                end
                if max_granted_before(e.t) > e.token then
                    R.gap_writes = R.gap_writes + 1
                end
                last, last_who = math.max(last, e.token), e.who
            else
                rs.refused = rs.refused + 1
                if e.token >= last then
                    R:violation(which .. ": resource log",
                                format("line %d: refused %.0f though the last accepted was %.0f",
                                       i, e.token, last))
                end
            end
            local o = by_who[e.who]
            if not o or o.token ~= e.token or not o.enter_t
                    or e.t < o.enter_t or e.t > (o.end_t or math.huge) + 0.001 then
                R:violation(which .. ": write outside a hold",
                            format("line %d: %s token %.0f at %.3f", i, e.who, e.token, e.t))
            end
        end
    end
end

--- The accept log DIR/<file> of a fenced resource written by the grants of
--- `list` (as the lock's: strictly increasing across grants, every write
--- inside its hold), named `which` in the violations. Call after resources().
function _M.resource(R, file, which, list)
    local by_who = {}
    for _, o in ipairs(list) do
        by_who["c" .. o.key .. ":" .. o.n] = o
    end
    check_resource(R, file, which, list, by_who)
end

--- The resources' logs: R.gap_writes, R.res_stats.
function _M.resources(R)
    local by_who = {}
    for _, o in ipairs(R.all_ops) do
        by_who["c" .. o.key .. ":" .. o.n] = o
    end
    R.gap_writes, R.res_stats = 0, {}
    check_resource(R, "lock.res", "lock", R.grants.lock, by_who)
    check_resource(R, "rw.res", "rwlock", R.grants.rw, by_who)
end

--- A holder whose token was refused has been passed over: its client must
--- see the lock lost.
function _M.fenced_holders(R)
    for _, list in ipairs({ R.grants.lock, R.grants.rw }) do
        for _, g in ipairs(list) do
            if g.still_held then
                R:violation("fenced holder still believes it holds",
                            desc(g) .. ": token refused, held() still true 10 s later")
            end
        end
    end
end

-- The lock grant a holder-targeted fault hit (the token it held), or nil.
local function hit_grant(R, f)
    local tok = f.kv.holding and num(f.kv.holding)
    local P = f.target and R.procs[f.target .. "." .. tostring(f.inc)]
    local g
    if tok and P then
        for _, o in ipairs(P.order) do
            if o.op == "lock" and o.token == tok and o.enter_t then g = o end
        end
    end
    if g and g.end_t >= f.from then
        return g, tok
    end
    return nil
end

--- Holder-targeted faults (pause, expiry, black hole of a contender that
--- was asked to hold the lock long): when the lock passed on meanwhile,
--- the holder must have found it lost before it let go. R.held_cases.
function _M.held_cases(R)
    R.held_cases = {}
    for _, f in ipairs(R.faults) do
        local g, tok = hit_grant(R, f)
        if g then
            local hc = R.held_cases[f.kind] or { holding = 0, passed_on = 0, noticed = 0,
                                                 refused = 0, survived = 0 }
            R.held_cases[f.kind] = hc
            hc.holding = hc.holding + 1
            local passed = false
            for _, h in ipairs(R.grants.lock) do
                if (h.token or 0) > tok and h.enter_t >= f.from and h.enter_t <= g.end_t then
                    passed = true
                end
            end
            local noticed = g.noticed and g.noticed >= f.from
            if noticed then
                hc.noticed = hc.noticed + 1
            end
            -- Lost for sure: another holder came in, or its session was expired.
            local lost = passed or (f.kind == "expire_session" and f.kv.ok == "1")
            if lost and not noticed then
                R:violation("holder did not find its lock lost",
                            desc(g) .. format(", %s %.3f..%.3f", f.kind, f.from, f.to))
            end
            if passed then
                hc.passed_on = hc.passed_on + 1
                for _, w in ipairs(g.writes) do
                    if w.t > f.from and w.res == "R" then
                        hc.refused = hc.refused + 1
                        break
                    end
                end
            else
                hc.survived = hc.survived + 1
            end
        end
    end
end

--- Acknowledged adds distinct and within 1..final, final <= acknowledged +
--- ambiguous. R.dup.
function _M.counter(R)
    local seen, dup = {}, 0
    R.dup = 0
    if not R.recipes.counter then
        return
    end
    local final = R.final_counter
    for _, o in ipairs(R.acks) do
        if seen[o.value] then
            dup = dup + 1
            R:violation("counter: duplicate value",
                        format("%s op %d and %s op %d both got %s", seen[o.value].key,
                               seen[o.value].n, o.key, o.n, tostring(o.value)))
        else
            seen[o.value] = o
        end
        if final and (o.value < 1 or o.value > final) then
            R:violation("counter: value out of range",
                        format("%s op %d got %s, final %s", o.key, o.n, tostring(o.value),
                               tostring(final)))
        end
    end
    R.dup = dup
    if not final or final < 0 then
        R:violation("counter: no final value", "the driver could not read the counter")
        return
    end
    if final < #R.acks then
        R:violation("counter: lost adds", format("final %d < %d acknowledged", final, #R.acks))
    end
    if final > #R.acks + R.ambiguous then
        R:violation("counter: adds applied that reported failure",
                    format("final %d > %d acknowledged + %d ambiguous", final, #R.acks,
                           R.ambiguous))
    end
end

--- Leaked nodes (left at the end, orphans during the run) and a driver
--- error. R.leaks.
function _M.leaks(R)
    for _, o in ipairs(R.orphan_list) do
        if #R.details < 200 then
            R.details[#R.details + 1] = format("LEAK (orphan): %s, owned by %s (session %s) which "
                                               .. "held nothing, seen by %d checks from %.3f to %.3f",
                                               o.node, o.key, tostring(o.sid), o.seen, o.first,
                                               o.last)
        end
    end
    R.leaks = (R.final_nodes or 0) + #R.orphan_list
    if not R.final_nodes then
        R:violation("leak check missing", "no final_nodes line in driver.log")
    elseif R.final_nodes > 0 then
        R.details[#R.details + 1] = "LEAK: " .. tostring(R.final_names)
    end
    if R.driver_error then
        R:violation("driver error", R.driver_error)
    end
end

return _M
