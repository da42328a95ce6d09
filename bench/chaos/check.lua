-- bench/chaos/check.lua: proves (or refutes) from the logs of a chaos run
-- that nothing unsafe happened.
--
--   luajit bench/chaos/check.lua DIR        (exit 0: no violation, hang or leak)
--
-- Reads DIR/driver.log (faults with their monotonic start and end, spawns,
-- the final node listing and counter value), DIR/c<ID>.<INC>.log (one per
-- contender process: try / enter / write / leave / release / fail / ack /
-- lost / heldfalse / fenced / state / raise / exit events), and the two
-- resources' decision logs DIR/lock.res and DIR/rw.res.
--
-- Definitions:
--   grant      an acquire that returned true: the interval [enter, leave]
--              as logged by its holder (a subset of the time its node
--              existed); a holder SIGKILLed inside ends at the kill.
--   overlap    two grants of different processes whose intervals intersect,
--              on the lock, or on the rwlock when one of them is a writer.
--              It is a violation unless the OLDER grant (lower token: it is
--              the one the lock passed over) had lost its lock, shown by one
--              of: the holder itself saw it (on_lost, held() false, its
--              token refused, release() "lost"); the driver SIGSTOPped,
--              killed, expired, cut, black-holed or delayed that process
--              from one session timeout before its enter to its leave; or
--              its client reported the connection suspended/lost meanwhile
--              (a suspended holder keeps its lock by design: the session may
--              live, and only the fencing token protects the resource then).
--              Even then, no write of the older grant may be accepted after
--              a write of the newer one.
--   stale write  an accepted write whose token is lower than an earlier
--              accepted one, or equal to it but from another grant: the
--              accept log must be strictly increasing across grants.
--   hang       a try with no outcome (unless its process was SIGKILLed
--              during it), an outcome later than its timeout plus 120 s
--              (time the process spent SIGSTOPped not counted), a grant
--              without leave or release, a process that did not exit when
--              told to stop.
--   leak       a lock or rwlock node left once every contender closed and
--              the sessions of killed ones expired; or, during the run, a
--              node owned by a contender's live session while it held
--              nothing (an "orphan" event: contenders check every 5 s and
--              before they close, after a sync that orders the check behind
--              their pending deletes). Such a ghost blocks everyone.
--   counter    acknowledged add() results all distinct, within 1..final,
--              and final <= acknowledged + ambiguous (errors that said the
--              write may have happened, and adds cut short by SIGKILL).
do
    local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
    package.path = here .. "/../?.lua;" .. package.path
end
local util = require "chaos.util"
local resource = require "chaos.resource"

local tonumber, ipairs, pairs, format, concat, sort = tonumber, ipairs, pairs, string.format,
    table.concat, table.sort

local _M = {}

local FAULT_LABELS = {
    { "kill_contender", "SIGKILL of a contender, restarted 0.5-2 s later" },
    { "pause_contender", "SIGSTOP of a contender for longer than the session timeout, then SIGCONT" },
    { "kill_follower", "SIGKILL of a follower, restarted 2-6 s later" },
    { "kill_leader", "SIGKILL of the leader, restarted 2-6 s later" },
    { "expire_session", "expiry of a contender's session (second handle closes it)" },
    { "cut", "cut of a contender's connections (proxy closes them)" },
    { "blackhole", "black hole of a contender's connections (proxy drops all bytes)" },
    { "delay", "delay of a contender's connections (proxy holds each chunk)" },
}

local function list_dir(dir)
    local p = io.popen("ls -1 '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
    local out = {}
    if p then
        for l in p:lines() do out[#out + 1] = l end
        p:close()
    end
    return out
end

local function read_lines(path)
    local f = io.open(path, "r")
    if not f then
        return {}
    end
    local out = {}
    for l in f:lines() do out[#out + 1] = l end
    f:close()
    return out
end

local function num(v)
    return tonumber(v)
end


--- Checks the run in `dir`. Returns a result table:
--- { ok, violations, hangs, leaks, faults = { kind = n }, fault_total,
---   ops = {...}, details = { "..." }, text = markdown table }.
function _M.run(dir)
    local details = {}
    local V = {}          -- violation kind -> count
    local H = {}          -- hang kind -> count
    local function violation(kind, msg)
        V[kind] = (V[kind] or 0) + 1
        if #details < 200 then details[#details + 1] = "VIOLATION " .. kind .. ": " .. msg end
    end
    local function hang(kind, msg)
        H[kind] = (H[kind] or 0) + 1
        if #details < 200 then details[#details + 1] = "HANG " .. kind .. ": " .. msg end
    end

    -- The driver's log -----------------------------------------------------
    local cfg = {}
    local faults = {}            -- all fault lines (completed faults)
    local by_target = {}         -- contender id -> { faults }
    local killed = {}            -- "id.inc" -> time (SIGKILL by the driver)
    local stuck = {}             -- "id.inc" -> time (killed at the end: did not stop)
    local paused = {}            -- "id.inc" -> { {from, to} }
    local died = {}
    local final_nodes, final_names, final_counter, driver_error
    local spawns = 0
    for _, line in ipairs(read_lines(dir .. "/driver.log")) do
        local t, ev, kv = util.parse_line(line)
        if ev == "config" then
            cfg = kv
        elseif ev == "fault" then
            local f = { kind = kv.kind, target = num(kv.target), inc = num(kv.inc),
                        from = num(kv.from), to = num(kv.to), kv = kv }
            faults[#faults + 1] = f
            if f.target then
                by_target[f.target] = by_target[f.target] or {}
                local l = by_target[f.target]
                l[#l + 1] = f
                local key = f.target .. "." .. tostring(f.inc)
                if f.kind == "kill_contender" then
                    killed[key] = f.from
                elseif f.kind == "pause_contender" then
                    paused[key] = paused[key] or {}
                    local p = paused[key]
                    p[#p + 1] = { f.from, f.to }
                end
            end
        elseif ev == "stuck" then
            stuck[kv.target .. "." .. kv.inc] = t
        elseif ev == "died" then
            died[#died + 1] = kv.target .. "." .. kv.inc
        elseif ev == "final_nodes" then
            final_nodes, final_names = num(kv.count), kv.names
        elseif ev == "final_counter" then
            final_counter = num(kv.value)
        elseif ev == "driver_error" then
            driver_error = kv.msg
        elseif ev == "spawn" then
            spawns = spawns + 1
        end
    end
    local st = num(cfg.st) or 4

    -- Contender logs -------------------------------------------------------
    local procs = {}             -- key -> process record
    local orphan_checks = 0
    local orphans, orphan_list = {}, {}    -- node -> { node, key, sid, first, last, seen }
    local all_ops = {}
    for _, name in ipairs(list_dir(dir)) do
        local id, inc = name:match("^c(%d+)%.(%d+)%.log$")
        if id then
            id, inc = tonumber(id), tonumber(inc)
            local key = id .. "." .. inc
            local P = { key = key, id = id, inc = inc, ops = {}, order = {}, states = {},
                        raises = {}, exited = false, last_t = 0 }
            procs[key] = P
            local last_grant = {}    -- op -> op record of the latest grant
            for _, line in ipairs(read_lines(dir .. "/" .. name)) do
                local t, ev, kv = util.parse_line(line)
                if t then
                    P.last_t = t
                    local n = num(kv.n)
                    local o = n and P.ops[n]
                    if ev == "start" then
                        P.pid = num(kv.pid)
                    elseif ev == "try" then
                        o = { key = key, id = id, inc = inc, n = n, op = kv.op, try_t = t,
                              timeout = num(kv.timeout), writes = {} }
                        P.ops[n] = o
                        P.order[#P.order + 1] = o
                        all_ops[#all_ops + 1] = o
                    elseif o and ev == "enter" then
                        o.out, o.out_t, o.enter_t, o.token = "enter", t, t, num(kv.token)
                        last_grant[o.op] = o
                    elseif o and ev == "fail" then
                        o.out, o.out_t, o.err = "fail", t, kv.err
                        o.ambiguous = kv.ambiguous == "1"
                    elseif o and ev == "ack" then
                        o.out, o.out_t, o.value = "ack", t, num(kv.value)
                    elseif o and ev == "write" then
                        o.writes[#o.writes + 1] = { t = num(kv.rt) or t, res = kv.res,
                                                    token = num(kv.token) }
                    elseif o and ev == "heldfalse" then
                        o.noticed = o.noticed or t
                        o.notice = o.notice or ev
                    elseif o and ev == "fenced" then
                        o.fenced = o.fenced or t
                    elseif o and ev == "still_held" then
                        o.still_held = t
                    elseif ev == "lost" then
                        local g = last_grant[kv.op]
                        if g and (num(kv.token) == nil or num(kv.token) == g.token) then
                            g.noticed = g.noticed or t
                            g.notice = g.notice or ("on_lost:" .. tostring(kv.reason))
                        end
                    elseif o and ev == "leave" then
                        o.leave_t = t
                    elseif o and ev == "release" then
                        o.released, o.release_err = true, kv.err
                        if kv.err == "lost" then
                            o.noticed = o.noticed or t
                            o.notice = o.notice or "release:lost"
                        end
                    elseif ev == "state" then
                        P.states[#P.states + 1] = { t = t, new = kv.new }
                    elseif ev == "orphan" then
                        local node = tostring(kv.path) .. "/" .. tostring(kv.node)
                        local orph = orphans[node]
                        if not orph then
                            orph = { node = node, key = key, sid = kv.sid, first = t, seen = 0 }
                            orphans[node] = orph
                            orphan_list[#orphan_list + 1] = orph
                        end
                        orph.seen, orph.last = orph.seen + 1, t
                    elseif ev == "orphan_check" then
                        orphan_checks = orphan_checks + 1
                    elseif ev == "raise" then
                        P.raises[#P.raises + 1] = kv.msg
                    elseif ev == "exit" then
                        P.exited = true
                    end
                end
            end
        end
    end

    -- Time a process spent SIGSTOPped within [a, b].
    local function paused_within(key, a, b)
        local s = 0
        for _, p in ipairs(paused[key] or {}) do
            local x, y = math.max(a, p[1]), math.min(b, p[2])
            if y > x then s = s + (y - x) end
        end
        return s
    end

    -- Outcomes, hangs, grant intervals ---------------------------------------
    local ops = {}               -- op -> { tries, granted, fail = { err = n }, ... }
    local function opstat(op)
        ops[op] = ops[op] or { tries = 0, granted = 0, acked = 0, fail = {}, failed = 0,
                               ambiguous = 0, killed_mid = 0, accepted = 0, refused = 0,
                               max_over = 0 }
        return ops[op]
    end
    local grants = { lock = {}, rw = {} }
    local acks, ambiguous = {}, 0
    for _, P in pairs(procs) do
        local kill_t = killed[P.key] or stuck[P.key]
        local last_op = P.order[#P.order]
        for _, o in ipairs(P.order) do
            local s = opstat(o.op)
            s.tries = s.tries + 1
            if not o.out then
                if kill_t and o == last_op and not stuck[P.key] then
                    s.killed_mid = s.killed_mid + 1
                    if o.op == "counter" then ambiguous = ambiguous + 1 end
                else
                    hang("no outcome", format("%s op %d (%s) tried at %.3f never ended", P.key, o.n,
                                              o.op, o.try_t))
                end
            else
                local took = o.out_t - o.try_t - paused_within(P.key, o.try_t, o.out_t)
                local over = took - (o.timeout or 0)
                if over > s.max_over then s.max_over = over end
                if over > 120 then
                    hang("slow outcome", format("%s op %d (%s, timeout %s) took %.1f s", P.key,
                                                o.n, o.op, tostring(o.timeout), took))
                end
                if o.out == "enter" then
                    s.granted = s.granted + 1
                elseif o.out == "ack" then
                    s.acked = s.acked + 1
                    acks[#acks + 1] = o
                elseif o.out == "fail" then
                    s.fail[o.err or "?"] = (s.fail[o.err or "?"] or 0) + 1
                    if o.ambiguous then
                        s.ambiguous = s.ambiguous + 1
                        ambiguous = ambiguous + 1
                    else
                        s.failed = s.failed + 1
                    end
                end
            end
            if o.out == "enter" then
                if o.leave_t then
                    o.end_t = o.leave_t
                    if not o.released and not (kill_t and o == last_op) then
                        hang("no release", format("%s op %d (%s) left but never released", P.key,
                                                  o.n, o.op))
                    end
                elseif kill_t and o == last_op then
                    o.end_t = kill_t
                else
                    o.end_t = P.last_t
                    hang("no leave", format("%s op %d (%s) entered at %.3f never left", P.key, o.n,
                                            o.op, o.enter_t))
                end
                for _, w in ipairs(o.writes) do
                    if w.res == "A" then s.accepted = s.accepted + 1
                    elseif w.res == "R" then s.refused = s.refused + 1 end
                end
                local list = o.op == "lock" and grants.lock or grants.rw
                list[#list + 1] = o
            end
        end
        if #P.raises > 0 then
            for _, m in ipairs(P.raises) do
                violation("error raised", P.key .. ": " .. m)
            end
        end
        if not P.exited and not killed[P.key] then
            if stuck[P.key] then
                hang("did not stop", P.key .. " had to be killed at the end")
            else
                local err = util.read_file(dir .. "/c" .. P.id .. "." .. P.inc .. ".err") or ""
                violation("crash", P.key .. " exited without its exit line: " .. err:sub(1, 300))
            end
        end
    end
    for _, key in ipairs(died) do
        if procs[key] and procs[key].exited then
            violation("crash", key .. " died (driver saw it gone) after logging its exit")
        end
    end

    -- Overlaps ----------------------------------------------------------------
    local function excuse(g)
        for _, f in ipairs(by_target[g.id] or {}) do
            if f.inc == g.inc and f.from <= g.end_t + 1 and f.to >= g.enter_t - st - 1 then
                return f.kind
            end
        end
        if g.noticed or g.fenced then
            return "noticed (" .. (g.notice or "fenced") .. ")"
        end
        for _, s in ipairs(procs[g.key].states) do
            if s.new ~= "connected" and s.t >= g.enter_t - 1 and s.t <= g.end_t + 1 then
                return "connection " .. s.new
            end
        end
        return nil
    end

    local excused, excused_noticed = {}, {}
    local function first_accept(g)
        for _, w in ipairs(g.writes) do
            if w.res == "A" then return w.t end
        end
        return nil
    end
    local function desc(g)
        return format("%s op %d %s token %s [%.3f, %.3f]", g.key, g.n, g.op, tostring(g.token),
                      g.enter_t, g.end_t)
    end
    local overlaps = { lock = 0, rw = 0 }
    local function check_overlaps(list, which, conflict)
        sort(list, function(a, b) return a.enter_t < b.enter_t end)
        local active = {}
        for _, g in ipairs(list) do
            local still = {}
            for _, a in ipairs(active) do
                if a.end_t > g.enter_t then still[#still + 1] = a end
            end
            active = still
            for _, a in ipairs(active) do
                if a.key ~= g.key and conflict(a, g) then
                    overlaps[which] = overlaps[which] + 1
                    local old, new = a, g
                    if (g.token or 0) < (a.token or 0) then old, new = g, a end
                    local why = excuse(old)
                    if not why then
                        violation(which .. ": two live holders",
                                  desc(old) .. " overlaps " .. desc(new))
                    else
                        local k = why:match("^(%S+)")
                        excused[which] = excused[which] or {}
                        excused[which][k] = (excused[which][k] or 0) + 1
                        if old.noticed or old.fenced then
                            excused_noticed[which] = (excused_noticed[which] or 0) + 1
                        end
                        local fa = first_accept(new)
                        if fa then
                            for _, w in ipairs(old.writes) do
                                if w.res == "A" and w.t > fa then
                                    violation(which .. ": stale write accepted",
                                              format("%s wrote at %.3f after %s", desc(old), w.t,
                                                     desc(new)))
                                end
                            end
                        end
                    end
                end
            end
            active[#active + 1] = g
        end
    end
    check_overlaps(grants.lock, "lock", function() return true end)
    check_overlaps(grants.rw, "rwlock", function(a, b)
        return a.op == "rwwrite" or b.op == "rwwrite"
    end)

    -- Resources -----------------------------------------------------------------
    local by_who = {}
    for _, o in ipairs(all_ops) do
        by_who["c" .. o.key .. ":" .. o.n] = o
    end
    local gap_writes = 0
    local res_stats = {}
    local function check_resource(file, which, glist)
        local entries = resource.read(dir .. "/" .. file)
        local rs = { accepted = 0, refused = 0 }
        res_stats[which] = rs
        -- Highest token granted (entered) before time t, for the fencing-gap count.
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
        local function max_granted_before(t)
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
        local last, last_who, last_t = -1, nil, 0
        for i, e in ipairs(entries) do
            if e.malformed then
                violation(which .. ": resource log", "malformed line " .. i .. ": " .. e.malformed)
            else
                if e.t < last_t then
                    violation(which .. ": resource log", "time went back at line " .. i)
                end
                last_t = e.t
                if e.ok then
                    rs.accepted = rs.accepted + 1
                    if e.token < last or (e.token == last and e.who ~= last_who) then
                        violation(which .. ": stale write accepted",
                                  format("line %d: %s accepted token %.0f after %.0f (%s)", i,
                                         e.who, e.token, last, tostring(last_who)))
                    end
                    if max_granted_before(e.t) > e.token then
                        gap_writes = gap_writes + 1
                    end
                    last, last_who = math.max(last, e.token), e.who
                else
                    rs.refused = rs.refused + 1
                    if e.token >= last then
                        violation(which .. ": resource log",
                                  format("line %d: refused %.0f though the last accepted was %.0f",
                                         i, e.token, last))
                    end
                end
                local o = by_who[e.who]
                if not o or o.token ~= e.token or not o.enter_t
                        or e.t < o.enter_t or e.t > (o.end_t or math.huge) + 0.001 then
                    violation(which .. ": write outside a hold",
                              format("line %d: %s token %.0f at %.3f", i, e.who, e.token, e.t))
                end
            end
        end
    end
    check_resource("lock.res", "lock", grants.lock)
    check_resource("rw.res", "rwlock", grants.rw)

    -- Paused holders ---------------------------------------------------------------
    -- A holder whose token was refused has been passed over: its client
    -- must see the lock lost.
    for _, g in ipairs(grants.lock) do
        if g.still_held then
            violation("fenced holder still believes it holds",
                      desc(g) .. ": token refused, held() still true 10 s later")
        end
    end
    for _, g in ipairs(grants.rw) do
        if g.still_held then
            violation("fenced holder still believes it holds",
                      desc(g) .. ": token refused, held() still true 10 s later")
        end
    end

    -- Holder-targeted faults (pause, expiry, black hole of a contender that
    -- was asked to hold the lock long): when the lock passed on meanwhile,
    -- the holder must have found it lost before it let go.
    local held_cases = {}
    for _, f in ipairs(faults) do
        local tok = f.kv.holding and num(f.kv.holding)
        local P = f.target and procs[f.target .. "." .. tostring(f.inc)]
        local g
        if tok and P then
            for _, o in ipairs(P.order) do
                if o.op == "lock" and o.token == tok and o.enter_t then g = o end
            end
        end
        if g and g.end_t >= f.from then
            local hc = held_cases[f.kind] or { holding = 0, passed_on = 0, noticed = 0, refused = 0,
                                               survived = 0 }
            held_cases[f.kind] = hc
            hc.holding = hc.holding + 1
            local passed = false
            for _, h in ipairs(grants.lock) do
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
                violation("holder did not find its lock lost",
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

    -- Counter -----------------------------------------------------------------------
    local seen, dup = {}, 0
    for _, o in ipairs(acks) do
        if seen[o.value] then
            dup = dup + 1
            violation("counter: duplicate value",
                      format("%s op %d and %s op %d both got %s", seen[o.value].key, seen[o.value].n,
                             o.key, o.n, tostring(o.value)))
        else
            seen[o.value] = o
        end
        if final_counter and (o.value < 1 or o.value > final_counter) then
            violation("counter: value out of range",
                      format("%s op %d got %s, final %s", o.key, o.n, tostring(o.value),
                             tostring(final_counter)))
        end
    end
    if not final_counter or final_counter < 0 then
        violation("counter: no final value", "the driver could not read the counter")
    else
        if final_counter < #acks then
            violation("counter: lost adds", format("final %d < %d acknowledged", final_counter, #acks))
        end
        if final_counter > #acks + ambiguous then
            violation("counter: adds applied that reported failure",
                      format("final %d > %d acknowledged + %d ambiguous", final_counter, #acks,
                             ambiguous))
        end
    end

    -- Leaks, driver -----------------------------------------------------------------
    for _, o in ipairs(orphan_list) do
        if #details < 200 then
            details[#details + 1] = format("LEAK (orphan): %s, owned by %s (session %s) which held "
                                           .. "nothing, seen by %d checks from %.3f to %.3f",
                                           o.node, o.key, tostring(o.sid), o.seen, o.first, o.last)
        end
    end
    local leaks = (final_nodes or 0) + #orphan_list
    if not final_nodes then
        violation("leak check missing", "no final_nodes line in driver.log")
    elseif final_nodes > 0 then
        details[#details + 1] = "LEAK: " .. tostring(final_names)
    end
    if driver_error then
        violation("driver error", driver_error)
    end

    -- Summary -----------------------------------------------------------------------
    local nviol, nhang = 0, 0
    for _, n in pairs(V) do nviol = nviol + n end
    for _, n in pairs(H) do nhang = nhang + n end
    local fault_counts, fault_total = {}, 0
    local extra = { pause_contender = 0, expire_ok = 0, blackhole_long = 0 }
    for _, f in ipairs(faults) do
        fault_counts[f.kind] = (fault_counts[f.kind] or 0) + 1
        fault_total = fault_total + 1
        if f.kind == "expire_session" and f.kv.ok == "1" then extra.expire_ok = extra.expire_ok + 1 end
        if f.kind == "blackhole" and (num(f.kv.secs) or 0) > st then
            extra.blackhole_long = extra.blackhole_long + 1
        end
    end

    local rows = {}
    local function row(a, b, c)
        rows[#rows + 1] = format("| %s | %s | %s |", a, tostring(b), c or "")
    end
    local function errs(s)
        local keys, parts = {}, {}
        for k in pairs(s.fail) do keys[#keys + 1] = k end
        sort(keys)
        for _, k in ipairs(keys) do parts[#parts + 1] = format('"%s" %d', k, s.fail[k]) end
        return concat(parts, ", ")
    end
    local function excused_text(which)
        local e = excused[which]
        if not e then return "" end
        local keys, parts = {}, {}
        for k in pairs(e) do keys[#keys + 1] = k end
        sort(keys)
        for _, k in ipairs(keys) do parts[#parts + 1] = k .. " " .. e[k] end
        return "; older holder had lost its lock: " .. concat(parts, ", ")
            .. format(" (the older holder itself saw it lost or its token refused: %d)",
                      excused_noticed[which] or 0)
    end

    rows[#rows + 1] = "| | count | details |"
    rows[#rows + 1] = "|---|---:|---|"
    row("**Faults injected**", "**" .. fault_total .. "**",
        format("over %s s, seed %s, %s contenders, session timeout %s s", tostring(cfg.duration),
               tostring(cfg.seed), tostring(cfg.contenders), tostring(cfg.st)))
    for _, kl in ipairs(FAULT_LABELS) do
        local notes = {}
        if kl[1] == "expire_session" then
            notes[#notes + 1] = format("%d confirmed (a new session followed)", extra.expire_ok)
        elseif kl[1] == "blackhole" then
            notes[#notes + 1] = format("%d longer than the session timeout", extra.blackhole_long)
        end
        local hc = held_cases[kl[1]]
        if hc then
            notes[#notes + 1] = format("%d hit a lock holder, which found its lock lost in %d "
                                       .. "(another holder had come in meanwhile in %d; a later "
                                       .. "write of the old holder refused in %d)", hc.holding,
                                       hc.noticed, hc.passed_on, hc.refused)
        end
        row(kl[2], fault_counts[kl[1]] or 0, concat(notes, "; "))
    end
    local total_ops = 0
    for _, s in pairs(ops) do total_ops = total_ops + s.tries end
    row("**Operations**", "**" .. total_ops .. "**", format("%d contender processes", spawns))
    local l, rr, rw, ct = opstat("lock"), opstat("rwread"), opstat("rwwrite"), opstat("counter")
    row("lock acquire", l.tries, format("granted %d; %s; cut short by SIGKILL %d", l.granted,
                                         errs(l), l.killed_mid))
    row("lock writes to the fenced resource", l.accepted + l.refused,
        format("accepted %d, refused (stale token) %d", l.accepted, l.refused))
    row("rwlock read acquire", rr.tries, format("granted %d; %s; cut short by SIGKILL %d",
                                                 rr.granted, errs(rr), rr.killed_mid))
    row("rwlock write acquire", rw.tries, format("granted %d; %s; cut short by SIGKILL %d; "
                                                  .. "writes accepted %d, refused %d", rw.granted,
                                                  errs(rw), rw.killed_mid, rw.accepted, rw.refused))
    row("counter add(1)", ct.tries, format("acknowledged %d, ambiguous errors %d, cut short by "
                                           .. "SIGKILL %d, failed (not applied) %d; final value %s",
                                           ct.acked, ct.ambiguous, ct.killed_mid, ct.failed,
                                           tostring(final_counter)))
    row("**Violations**", "**" .. nviol .. "**", "")
    local function vrow(label, kinds, note)
        local n = 0
        for _, k in ipairs(kinds) do n = n + (V[k] or 0) end
        row(label, n, note)
    end
    vrow("two live lock holders at once", { "lock: two live holders" },
         format("overlapping grants %d%s", overlaps.lock, excused_text("lock")))
    vrow("rwlock writer overlapping a live holder", { "rwlock: two live holders" },
         format("overlapping grants %d%s", overlaps.rw, excused_text("rwlock")))
    vrow("write accepted with a stale token", { "lock: stale write accepted",
                                                "rwlock: stale write accepted" },
         format("writes accepted from a holder already passed over, before the new holder's first "
                .. "write (the fencing gap, allowed): %d", gap_writes))
    vrow("holder passed over (paused, expired, cut off, or fenced) did not find its lock lost",
         { "holder did not find its lock lost", "fenced holder still believes it holds" })
    vrow("counter: duplicate, lost or phantom add",
         { "counter: duplicate value", "counter: value out of range", "counter: lost adds",
           "counter: adds applied that reported failure", "counter: no final value" },
         format("final %s = %d acknowledged + %d of %d ambiguous", tostring(final_counter), #acks,
                (final_counter or 0) - #acks, ambiguous))
    local other = nviol
    for _, k in ipairs({ "lock: two live holders", "rwlock: two live holders",
                         "lock: stale write accepted", "rwlock: stale write accepted",
                         "holder did not find its lock lost",
                         "fenced holder still believes it holds", "counter: duplicate value",
                         "counter: value out of range", "counter: lost adds",
                         "counter: adds applied that reported failure", "counter: no final value" }) do
        other = other - (V[k] or 0)
    end
    row("other (errors raised, crashes, resource log, writes outside a hold)", other, "")
    row("**Hangs**", "**" .. nhang .. "**",
        format("every try ended; longest wait beyond its timeout: lock %.1f s, rwlock %.1f s, "
               .. "counter %.1f s", l.max_over, math.max(rr.max_over, rw.max_over), ct.max_over))
    row("**Leaked nodes**", "**" .. leaks .. "**",
        format("lock and rwlock paths listed after the end: %s left; during the run, %d checks by "
               .. "contenders holding nothing for a node of their own session: %d found",
               tostring(final_nodes), orphan_checks, #orphan_list))

    local result = {
        ok = nviol == 0 and nhang == 0 and leaks == 0,
        violations = nviol, hangs = nhang, leaks = leaks,
        violation_kinds = V, hang_kinds = H,
        faults = fault_counts, fault_total = fault_total,
        ops = ops, total_ops = total_ops,
        held_cases = held_cases, overlaps = overlaps, excused = excused,
        orphans = orphan_list,
        counter = { final = final_counter, acked = #acks, ambiguous = ambiguous, duplicates = dup },
        gap_writes = gap_writes, resources = res_stats,
        details = details,
        text = concat(rows, "\n"),
    }
    return result
end


local function this_is_the_script()
    local src = debug.getinfo(1, "S").source:match("^@(.*)$")
    return arg and arg[0] and src and arg[0]:match("chaos/check%.lua$")
        and not package.loaded["busted"]
end

if this_is_the_script() then
    local dir = arg[1]
    if not dir then
        io.stderr:write("usage: luajit bench/chaos/check.lua DIR\n")
        os.exit(64)
    end
    local r = _M.run(dir)
    print(r.text)
    for _, d in ipairs(r.details) do print(d) end
    os.exit(r.ok and 0 or 1)
end

return _M
