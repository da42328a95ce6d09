-- chaos.check.summary: the checker's result table and its markdown text
-- (faults injected, operations, violations, hangs, leaked nodes), from the
-- record R the rules filled.
local rules = require "chaos.check.rules"

local tonumber, tostring, ipairs, pairs, format, concat, sort = tonumber, tostring, ipairs, pairs,
    string.format, table.concat, table.sort
local num = tonumber

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

-- The violation kinds the table has a row of its own for; the rest is "other".
local COUNTER_KINDS = { "counter: duplicate value", "counter: value out of range",
                        "counter: lost adds", "counter: adds applied that reported failure",
                        "counter: no final value" }
local NAMED_KINDS = { "lock: two live holders", "rwlock: two live holders",
                      "lock: stale write accepted", "rwlock: stale write accepted",
                      "holder did not find its lock lost", "fenced holder still believes it holds" }
for _, k in ipairs(COUNTER_KINDS) do NAMED_KINDS[#NAMED_KINDS + 1] = k end

local function sum(t)
    local n = 0
    for _, v in pairs(t) do n = n + v end
    return n
end

local function sorted_keys(t)
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = k end
    sort(keys)
    return keys
end

local function errs(s)
    local parts = {}
    for _, k in ipairs(sorted_keys(s.fail)) do parts[#parts + 1] = format('"%s" %d', k, s.fail[k]) end
    return concat(parts, ", ")
end

local function excused_text(R, which)
    local e = R.excused[which]
    if not e then return "" end
    local parts = {}
    for _, k in ipairs(sorted_keys(e)) do parts[#parts + 1] = k .. " " .. e[k] end
    return "; older holder had lost its lock: " .. concat(parts, ", ")
        .. format(" (the older holder itself saw it lost or its token refused: %d)",
                  R.excused_noticed[which] or 0)
end

-- Faults by kind, their total, and the notes on expiries and black holes.
local function count_faults(R)
    local counts, total = {}, 0
    local extra = { expire_ok = 0, blackhole_long = 0 }
    for _, f in ipairs(R.faults) do
        counts[f.kind] = (counts[f.kind] or 0) + 1
        total = total + 1
        if f.kind == "expire_session" and f.kv.ok == "1" then extra.expire_ok = extra.expire_ok + 1 end
        if f.kind == "blackhole" and (num(f.kv.secs) or 0) > R.st then
            extra.blackhole_long = extra.blackhole_long + 1
        end
    end
    return counts, total, extra
end

local function fault_rows(R, row, counts, total, extra)
    local cfg = R.cfg
    row("**Faults injected**", "**" .. total .. "**",
        format("over %s s, seed %s, %s contenders, session timeout %s s; recipes %s",
               tostring(cfg.duration), tostring(cfg.seed), tostring(cfg.contenders),
               tostring(cfg.st), cfg.recipes or "lock,rwlock,counter"))
    for _, kl in ipairs(FAULT_LABELS) do
        local notes = {}
        if kl[1] == "expire_session" then
            notes[#notes + 1] = format("%d confirmed (a new session followed)", extra.expire_ok)
        elseif kl[1] == "blackhole" then
            notes[#notes + 1] = format("%d longer than the session timeout", extra.blackhole_long)
        end
        local hc = R.held_cases[kl[1]]
        if hc then
            notes[#notes + 1] = format("%d hit a lock holder, which found its lock lost in %d "
                                       .. "(another holder had come in meanwhile in %d; a later "
                                       .. "write of the old holder refused in %d)", hc.holding,
                                       hc.noticed, hc.passed_on, hc.refused)
        end
        row(kl[2], counts[kl[1]] or 0, concat(notes, "; "))
    end
end

local function op_rows(R, row, total_ops)
    local l, rr, rw, ct = rules.opstat(R, "lock"), rules.opstat(R, "rwread"),
        rules.opstat(R, "rwwrite"), rules.opstat(R, "counter")
    row("**Operations**", "**" .. total_ops .. "**", format("%d contender processes", R.spawns))
    local function row_of(recipe, ...)
        if R.recipes[recipe] then row(...) end
    end
    row_of("lock", "lock acquire", l.tries,
           format("granted %d; %s; cut short by SIGKILL %d", l.granted, errs(l), l.killed_mid))
    row_of("lock", "lock writes to the fenced resource", l.accepted + l.refused,
           format("accepted %d, refused (stale token) %d", l.accepted, l.refused))
    row_of("rwlock", "rwlock read acquire", rr.tries,
           format("granted %d; %s; cut short by SIGKILL %d", rr.granted, errs(rr), rr.killed_mid))
    row_of("rwlock", "rwlock write acquire", rw.tries,
           format("granted %d; %s; cut short by SIGKILL %d; writes accepted %d, refused %d",
                  rw.granted, errs(rw), rw.killed_mid, rw.accepted, rw.refused))
    row_of("counter", "counter add(1)", ct.tries,
           format("acknowledged %d, ambiguous errors %d, cut short by SIGKILL %d, failed (not "
                  .. "applied) %d; final value %s", ct.acked, ct.ambiguous, ct.killed_mid,
                  ct.failed, tostring(R.final_counter)))
    return l, rr, rw, ct
end

local function violation_rows(R, row, nviol)
    local V = R.V
    row("**Violations**", "**" .. nviol .. "**", "")
    local function vrow(recipe, label, kinds, note)
        local n = 0
        for _, k in ipairs(kinds) do n = n + (V[k] or 0) end
        if R.recipes[recipe] or n > 0 then row(label, n, note) end
    end
    vrow("lock", "two live lock holders at once", { "lock: two live holders" },
         format("overlapping grants %d%s", R.overlaps.lock, excused_text(R, "lock")))
    vrow("rwlock", "rwlock writer overlapping a live holder", { "rwlock: two live holders" },
         format("overlapping grants %d%s", R.overlaps.rw, excused_text(R, "rwlock")))
    local fenced = R.recipes.lock and "lock" or "rwlock"
    vrow(fenced, "write accepted with a stale token", { "lock: stale write accepted",
                                                "rwlock: stale write accepted" },
         format("writes accepted from a holder already passed over, before the new holder's first "
                .. "write (the fencing gap, allowed): %d", R.gap_writes))
    vrow("lock", "holder passed over (paused, expired, cut off, or fenced) did not find its lock lost",
         { "holder did not find its lock lost", "fenced holder still believes it holds" })
    vrow("counter", "counter: duplicate, lost or phantom add", COUNTER_KINDS,
         format("final %s = %d acknowledged + %d of %d ambiguous", tostring(R.final_counter),
                #R.acks, (R.final_counter or 0) - #R.acks, R.ambiguous))
    local other = nviol
    for _, k in ipairs(NAMED_KINDS) do
        other = other - (V[k] or 0)
    end
    for _, rr in ipairs(R.recipe_rows) do
        local n = 0
        for k, v in pairs(V) do
            if k:sub(1, #rr.prefix) == rr.prefix then n = n + v end
        end
        other = other - n
        row(rr.label, n, rr.details)
    end
    row("other (errors raised, crashes, resource log, writes outside a hold)", other, "")
end

--- The result table: { ok, violations, hangs, leaks, faults = { kind = n },
--- fault_total, ops, details, text = markdown table, ... }.
function _M.result(R)
    local nviol, nhang = sum(R.V), sum(R.H)
    local figures = {}
    for _, rr in ipairs(R.recipe_rows) do
        if rr.name then figures[rr.name] = rr.figures end
    end
    local fault_counts, fault_total, extra = count_faults(R)
    local rows = {}
    local function row(a, b, c)
        rows[#rows + 1] = format("| %s | %s | %s |", a, tostring(b), c or "")
    end
    rows[#rows + 1] = "| | count | details |"
    rows[#rows + 1] = "|---|---:|---|"
    fault_rows(R, row, fault_counts, fault_total, extra)
    local total_ops = 0
    for _, s in pairs(R.ops) do total_ops = total_ops + s.tries end
    local l, rr, rw, ct = op_rows(R, row, total_ops)
    violation_rows(R, row, nviol)
    row("**Hangs**", "**" .. nhang .. "**",
        format("every try ended; longest wait beyond its timeout: lock %.1f s, rwlock %.1f s, "
               .. "counter %.1f s", l.max_over, math.max(rr.max_over, rw.max_over), ct.max_over))
    row("**Leaked nodes**", "**" .. R.leaks .. "**",
        format("paths of held nodes listed after the end: %s left; during the run, %d checks by "
               .. "contenders holding nothing for a node of their own session: %d found",
               tostring(R.final_nodes), R.orphan_checks, #R.orphan_list))

    return {
        ok = nviol == 0 and nhang == 0 and R.leaks == 0,
        violations = nviol, hangs = nhang, leaks = R.leaks,
        violation_kinds = R.V, hang_kinds = R.H,
        faults = fault_counts, fault_total = fault_total,
        ops = R.ops, total_ops = total_ops,
        held_cases = R.held_cases, overlaps = R.overlaps, excused = R.excused,
        orphans = R.orphan_list,
        counter = { final = R.final_counter, acked = #R.acks, ambiguous = R.ambiguous,
                    duplicates = R.dup },
        gap_writes = R.gap_writes, resources = R.res_stats,
        figures = figures,      -- recipe name -> what its checker counted
        details = R.details,
        text = concat(rows, "\n"),
    }
end

return _M
