-- bench/run.lua: zkcoord side by side with raw libzookeeper_mt (C), kazoo
-- (Python) and Curator (Java), in one run, on one local ZooKeeper.
--
--   luajit bench/run.lua [--quick] [--doc] [--only zkcoord,raw,kazoo,curator]
--                        [--rows key,key] [--rounds N] [--duration S] [--warmup S]
--                        [--json FILE]
--
-- Starts its own standalone ZooKeeper (spec/helpers/zkserver: 127.0.0.1,
-- forceSync=no), builds the peers (bench/peers/: raw_bench.c with cc,
-- CuratorBench.java with javac against Debian's jars), then for each round,
-- for each row, runs every library in turn (the order rotates per round),
-- each on a fresh path, for DURATION seconds; prints the medians over the
-- rounds as a markdown table with the ratio zkcoord/peer, writes
-- bench/results/latest.json, and with --doc the peers section of
-- docs/PERFORMANCE.md (between <!-- peers:begin --> and <!-- peers:end -->)
-- and docs/performance.png (gnuplot).
--
-- Defaults: 3 rounds of 5 s, 2 s warmup per process. --quick: 1 round of
-- 1 s, no warmup (a smoke test; its numbers mean little).
--
-- The peer contract (every program in bench/peers/):
--   <program> SCENARIO HOSTS PATH DURATION_S [EXTRA]
-- prints one line of key=value pairs: ops= secs= rate= p50_ms= p99_ms=
-- rss_kb= hwm_kb= (VmRSS, VmHWM), and failed_cas= for counters, reads=
-- writes= for rwlock; "error=..." on failure. Scenarios: lock_uncontended,
-- lock_contended (one contender among N copies), rwlock (EXTRA = percent of
-- reads, default 90), counter, hold (connect, acquire one lock, settle
-- 0.5 s, report rss_kb and hwm_kb only), for zkcoord counter_coroutines
-- (EXTRA = coroutines in the process), counter_fast and
-- counter_coroutines_fast (the counter with fair = false), and for kazoo
-- and Curator counter_threads (EXTRA = threads in the one process; the
-- line adds threads= and thread_min=, the fewest increments of a thread).
-- Environment:
--   BENCH_SYNC    a directory: after connecting and warming up, create
--                 ready.$BENCH_ID there, wait for the file "go", which holds
--                 the wall-clock start time (epoch seconds), start then;
--   BENCH_ID      this copy's number (1..N);
--   BENCH_WARMUP  seconds of the same work on a private path first.
-- A cycle counts if it completed within DURATION_S of the start.
local root = (arg[0]:match("^(.*)/bench/[^/]*$") or ".")
if root:sub(1, 1) ~= "/" then
    local pwd = os.getenv("PWD") or io.popen("pwd"):read("*l")
    root = root == "." and pwd or (pwd .. "/" .. root)
end
package.path = root .. "/spec/?.lua;" .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;"
    .. root .. "/bench/?.lua;" .. package.path
package.cpath = root .. "/lua/?.so;" .. package.cpath

local ffi = require "ffi"
local proc = require "helpers.proc"
local zkserver = require "helpers.zkserver"
local peerlib = require "peerlib"

local LUAJIT = arg[-1] or "luajit"

-- ---------------------------------------------------------------------------
-- Options.

-- --rounds, --duration and --warmup land in *_set keys: --quick sets the
-- defaults below, and an explicit value wins over --quick in either order.
local options = require "helpers.options"
local SPEC = {
    name = "run.lua",
    usage = "usage: luajit bench/run.lua [--quick] [--doc] [--only zkcoord,raw,kazoo,curator]\n"
        .. "                            [--rows key,key] [--rounds N] [--duration S] [--warmup S]\n"
        .. "                            [--json FILE]",
    defaults = { rounds = 3, duration = 5, warmup = 2, doc = false, quick = false },
    options = {
        ["--quick"] = "flag",
        ["--doc"] = "flag",
        ["--only"] = "string",
        ["--json"] = "string",
        ["--rows"] = "string",
        ["--rounds"] = { "number", key = "rounds_set" },
        ["--duration"] = { "number", key = "duration_set" },
        ["--warmup"] = { "number", key = "warmup_set" },
    },
}
local opts = options.parse(arg, SPEC)
if opts.quick then
    opts.rounds, opts.duration, opts.warmup = 1, 1, 0
end
opts.rounds = opts.rounds_set or opts.rounds
opts.duration = opts.duration_set or opts.duration
opts.warmup = opts.warmup_set or opts.warmup

-- ---------------------------------------------------------------------------
-- Small helpers.

if not pcall(ffi.typeof, "struct zkb_timespec") then
    ffi.cdef [[
    struct zkb_timespec { long tv_sec; long tv_nsec; };
    int zkb_clock_gettime(int, struct zkb_timespec *) __asm__("clock_gettime");
    ]]
end
local tsbuf = ffi.new("struct zkb_timespec")
local function wall()
    ffi.C.zkb_clock_gettime(0, tsbuf)   -- CLOCK_REALTIME: the peers' barrier clock
    return tonumber(tsbuf.tv_sec) + tonumber(tsbuf.tv_nsec) * 1e-9
end

local sh, shquote, file_exists, trim = peerlib.sh, peerlib.shquote, peerlib.file_exists,
    peerlib.trim
local python, loadavg = peerlib.python, peerlib.loadavg

local function median(t)
    local s = {}
    for _, v in ipairs(t) do
        if v == v then
            s[#s + 1] = v
        end
    end
    if #s == 0 then
        return nil
    end
    table.sort(s)
    local n = #s
    if n % 2 == 1 then
        return s[(n + 1) / 2]
    end
    return (s[n / 2] + s[n / 2 + 1]) / 2
end

local function log(fmt, ...)
    io.stderr:write(("[bench %s] "):format(os.date("%H:%M:%S")), fmt:format(...), "\n")
end

-- JSON (enough for the results file: tables, strings, numbers, booleans).
local function json(v, indent)
    indent = indent or ""
    local t = type(v)
    if t == "nil" then
        return "null"
    elseif t == "boolean" then
        return tostring(v)
    elseif t == "number" then
        if v ~= v or v == math.huge or v == -math.huge then
            return "null"
        end
        if v % 1 == 0 and math.abs(v) < 2 ^ 53 then
            return ("%d"):format(v)
        end
        return ("%.6g"):format(v)
    elseif t == "string" then
        return '"' .. v:gsub('[%c"\\]', function(c)
            local map = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t" }
            return map[c] or ("\\u%04x"):format(c:byte())
        end) .. '"'
    end
    local inner = indent .. "  "
    local parts = {}
    if #v > 0 or next(v) == nil then
        for i = 1, #v do
            parts[i] = inner .. json(v[i], inner)
        end
        if #parts == 0 then
            return "[]"
        end
        return "[\n" .. table.concat(parts, ",\n") .. "\n" .. indent .. "]"
    end
    local keys = {}
    for k in pairs(v) do
        keys[#keys + 1] = tostring(k)
    end
    table.sort(keys)
    for _, k in ipairs(keys) do
        parts[#parts + 1] = inner .. json(k) .. ": " .. json(v[k], inner)
    end
    return "{\n" .. table.concat(parts, ",\n") .. "\n" .. indent .. "}"
end

-- ---------------------------------------------------------------------------
-- Libraries: how to build and run each peer (bench/peerlib.lua).

local LIBS = peerlib.libs(root, LUAJIT)
-- Does `row` run for library `key`? (row.only: a key, or a set of keys)
local function row_has(row, key)
    if type(row.only) == "table" then
        return row.only[key] == true
    end
    return not row.only or row.only == key
end

local LIB_BY_KEY = {}
for _, l in ipairs(LIBS) do
    LIB_BY_KEY[l.key] = l
end

-- ---------------------------------------------------------------------------
-- Rows. `metrics` are the table lines a row yields.

local ROWS = {
    -- best = true: a row of the best-form table (one process: the same form
    -- for every library, or N contenders in one process); the others form
    -- the process-form table (a process per contender).
    { key = "lock_uncontended", scenario = "lock_uncontended", procs = 1, best = true,
      metrics = {
          { key = "rate", label = "uncontended lock, acquire+release cycles/s", better = "higher",
            plot = "lock\\nuncontended" },
          { key = "p50_ms", label = "uncontended lock, p50 of a cycle (ms)", better = "lower" },
          { key = "p99_ms", label = "uncontended lock, p99 of a cycle (ms)", better = "lower" },
      } },
    -- The same with cohort = true (one owner per process: what the cohort
    -- costs when there is no one to hand over to); same run, compare.
    { key = "lock_uncontended_cohort", scenario = "lock_uncontended_cohort", procs = 1,
      only = "zkcoord", compare_with = "lock_uncontended", best = true,
      metrics = {
          { key = "rate", label = "uncontended lock, cycles/s, cohort = true (zkcoord)",
            better = "higher" },
          { key = "p50_ms", label = "uncontended lock, p50 of a cycle (ms), cohort = true (zkcoord)",
            better = "lower" },
      } },
    { key = "lock_contended_4", scenario = "lock_contended", procs = 4,
      metrics = { { key = "rate", label = "contended lock, handoffs/s, 4 processes", better = "higher",
                    plot = "lock\\n4 procs" } } },
    { key = "lock_contended_16", scenario = "lock_contended", procs = 16,
      metrics = { { key = "rate", label = "contended lock, handoffs/s, 16 processes",
                    better = "higher", plot = "lock\\n16 procs" } } },
    { key = "lock_contended_16_cohort", scenario = "lock_contended_cohort", procs = 16,
      only = "zkcoord", compare_with = "lock_contended_16",
      metrics = { { key = "rate", label = "contended lock, handoffs/s, 16 processes,"
                                          .. " cohort = true (zkcoord)", better = "higher" } } },
    { key = "rwlock_8", scenario = "rwlock", procs = 8, extra = "90",
      metrics = { { key = "rate", label = "rwlock, cycles/s, 8 processes at 90% reads",
                    better = "higher", plot = "rwlock\\n8 procs" } } },
    -- Best form, N contenders in one process, a session each: the peers'
    -- as threads of one JVM (one Python process), zkcoord's as coroutines
    -- of one LuaJIT process, each its own zkcoord.connect, all driven by
    -- one poll(2) over the sessions' fds (bench/pollwait.lua).
    { key = "lock_16_threads", scenario = "lock_threads", procs = 1, extra = "16",
      scenarios = { zkcoord = "lock_sessions" }, best = true,
      only = { zkcoord = true, kazoo = true, curator = true },
      metrics = { { key = "rate", label = "contended lock, handoffs/s, 16 contenders in 1 process,"
                                          .. " a session each", better = "higher",
                    plot = "lock\\n16 in 1 proc" } } },
    -- zkcoord's 16 contenders as coroutines of ONE session (a lock's owner
    -- is the coroutine: 16 nodes in line); ratio against the peers' row above.
    { key = "lock_16_one_session", scenario = "lock_one_session", procs = 1, extra = "16",
      only = "zkcoord", compare_with = "lock_16_threads", best = true,
      metrics = { { key = "rate", label = "contended lock, handoffs/s, 16 coroutines on 1 session"
                                          .. " (zkcoord)", better = "higher" } } },
    -- The same with the lock's cohort = true (zkcoord.cohort): one node for
    -- the 16 owners, local handoffs; compare with the row above, same run.
    { key = "lock_16_coroutines_cohort", scenario = "lock_one_session_cohort", procs = 1,
      extra = "16", only = "zkcoord", compare_with = "lock_16_threads", best = true,
      metrics = { { key = "rate", label = "contended lock, handoffs/s, 16 coroutines on 1 session,"
                                          .. " cohort = true (zkcoord)", better = "higher" } } },
    -- 2 such processes on one lock: the cohort's bound (16 handoffs or
    -- 0.01 s) is what lets the other process in; without the cohort, and with.
    { key = "lock_2x16_coroutines", scenario = "lock_one_session", procs = 2, extra = "16",
      only = "zkcoord",
      metrics = { { key = "rate", label = "contended lock, handoffs/s, 2 processes x 16 coroutines"
                                          .. " (zkcoord)", better = "higher" },
                  { key = "max_ms", label = "the same, longest acquire+release of a coroutine (ms)",
                    better = "lower" } } },
    { key = "lock_2x16_coroutines_cohort", scenario = "lock_one_session_cohort", procs = 2,
      extra = "16", only = "zkcoord",
      metrics = { { key = "rate", label = "contended lock, handoffs/s, 2 processes x 16 coroutines,"
                                          .. " cohort = true (zkcoord)", better = "higher" },
                  -- a process's wait for a node of its own (the other
                  -- process's cohort held meanwhile): a remote waiter's wait
                  { key = "node_wait_max_ms", label = "the same, longest wait of a remote waiter"
                                          .. " (ms; bound: 16 handoffs or 10 ms)", better = "lower" },
                  { key = "node_wait_p99_ms", label = "the same, p99 of a remote waiter's wait (ms;"
                                          .. " the worse process)", better = "lower" },
                  { key = "max_ms", label = "the same, longest acquire+release of a coroutine (ms)",
                    better = "lower" } } },
    -- 16 coroutines of one session at 90 % reads, without and with the
    -- rwlock's cohort (its readers share one read node); against Curator's
    -- 16 threads of one JVM, a session each.
    { key = "rwlock_16_threads", scenario = "rwlock_threads", procs = 1, extra = "16",
      scenarios = { zkcoord = "rwlock_sessions" }, best = true,
      only = { zkcoord = true, kazoo = true, curator = true },
      metrics = { { key = "rate", label = "rwlock, cycles/s, 16 contenders in 1 process at 90% reads,"
                                          .. " a session each", better = "higher" } } },
    { key = "rwlock_16_coroutines", scenario = "rwlock_one_session", procs = 1, extra = "16",
      only = "zkcoord", compare_with = "rwlock_16_threads", best = true,
      metrics = { { key = "rate", label = "rwlock, cycles/s, 16 coroutines on 1 session at 90% reads"
                                          .. " (zkcoord)", better = "higher" } } },
    { key = "rwlock_16_coroutines_cohort", scenario = "rwlock_one_session_cohort", procs = 1,
      extra = "16", only = "zkcoord", compare_with = "rwlock_16_threads", best = true,
      metrics = { { key = "rate", label = "rwlock, cycles/s, 16 coroutines on 1 session at 90% reads,"
                                          .. " cohort = true (zkcoord)", better = "higher" } } },
    { key = "rwlock_8_threads", scenario = "rwlock_threads", procs = 1, extra = "8",
      scenarios = { zkcoord = "rwlock_sessions" }, best = true,
      only = { zkcoord = true, kazoo = true, curator = true },
      metrics = { { key = "rate", label = "rwlock, cycles/s, 8 contenders in 1 process at 90% reads,"
                                          .. " a session each", better = "higher",
                    plot = "rwlock\\n8 in 1 proc" } } },
    { key = "counter_1", scenario = "counter", procs = 1, best = true,
      metrics = {
          { key = "rate", label = "counter, increments/s, 1 process", better = "higher",
            plot = "counter\\n1 proc" },
          { key = "cas_per_inc", label = "counter, 1 process: failed CAS per increment",
            better = "lower" },
      } },
    { key = "counter_4", scenario = "counter", procs = 4,
      metrics = {
          { key = "rate", label = "counter, increments/s, 4 processes", better = "higher",
            plot = "counter\\n4 procs" },
          { key = "cas_per_inc", label = "counter, 4 processes: failed CAS per increment",
            better = "lower" },
          { key = "fairness", label = "counter, 4 processes: slowest process / mean (1 = fair)",
            better = "higher" },
      } },
    { key = "counter_16", scenario = "counter", procs = 16,
      metrics = {
          { key = "rate", label = "counter, increments/s, 16 processes", better = "higher",
            plot = "counter\\n16 procs" },
          { key = "cas_per_inc", label = "counter, 16 processes: failed CAS per increment",
            better = "lower" },
          { key = "fairness", label = "counter, 16 processes: slowest process / mean (1 = fair)",
            better = "higher" },
      } },
    -- zkcoord's counter with fair = false (the last winner writes again at
    -- once): the ratio is taken against the peers' 16-process row.
    { key = "counter_16_fast", scenario = "counter_fast", procs = 16,
      only = "zkcoord", compare_with = "counter_16",
      metrics = {
          { key = "rate", label = "counter fair = false, increments/s, 16 processes",
            better = "higher" },
          { key = "cas_per_inc", label = "counter fair = false, 16 processes: failed CAS per increment",
            better = "lower" },
          { key = "fairness", label = "counter fair = false, 16 processes: slowest process / mean",
            better = "higher" },
      } },
    -- Best form of the counter, 16 contenders in one process on ONE
    -- session, a recipe object each: the peers' threads, zkcoord's
    -- coroutines (no combining: an object per coroutine). Fairness is the
    -- slowest contender over the mean.
    { key = "counter_16_threads", scenario = "counter_threads", procs = 1, extra = "16",
      scenarios = { zkcoord = "counter_one_session" }, best = true,
      only = { zkcoord = true, kazoo = true, curator = true },
      metrics = {
          { key = "rate", label = "counter, increments/s, 16 contenders in 1 process, 1 session",
            better = "higher", plot = "counter\\n16 in 1 proc" },
          { key = "cas_per_inc", label = "counter, 16 in 1 process: failed CAS per increment",
            better = "lower" },
          { key = "fairness", label = "counter, 16 in 1 process: slowest contender / mean",
            better = "higher" },
      } },
    -- zkcoord's 16 counter contenders as 16 sessions of one process (one
    -- coroutine each, polled together); ratio against the peers' row above.
    { key = "counter_16_sessions", scenario = "counter_sessions", procs = 1, extra = "16",
      only = "zkcoord", compare_with = "counter_16_threads", best = true,
      metrics = {
          { key = "rate", label = "counter, increments/s, 16 sessions in 1 process (zkcoord)",
            better = "higher" },
          { key = "cas_per_inc", label = "counter, 16 sessions in 1 process: failed CAS per increment",
            better = "lower" },
          { key = "fairness", label = "counter, 16 sessions in 1 process: slowest session / mean",
            better = "higher" },
      } },
    -- Peers have no coroutines: the ratio is taken against their 16-process row.
    { key = "counter_coroutines", scenario = "counter_coroutines", procs = 4, extra = "32",
      only = "zkcoord", compare_with = "counter_16",
      metrics = {
          { key = "rate", label = "counter, increments/s, 4 processes x 32 coroutines",
            better = "higher" },
          { key = "cas_per_inc", label = "counter, 4 x 32 coroutines: failed CAS per increment",
            better = "lower" },
          { key = "fairness", label = "counter, 4 x 32 coroutines: slowest process / mean",
            better = "higher" },
      } },
    { key = "counter_coroutines_fast", scenario = "counter_coroutines_fast", procs = 4,
      extra = "32", only = "zkcoord", compare_with = "counter_16",
      metrics = {
          { key = "rate", label = "counter fair = false, increments/s, 4 processes x 32 coroutines",
            better = "higher" },
          { key = "cas_per_inc", label = "counter fair = false, 4 x 32 coroutines: failed CAS per increment",
            better = "lower" },
          { key = "fairness", label = "counter fair = false, 4 x 32 coroutines: slowest process / mean",
            better = "higher" },
      } },
    { key = "hold_rss", scenario = "hold", procs = 1, best = true,
      metrics = { { key = "hwm_mb", label = "peak RSS, one session holding one lock (MB)",
                    better = "lower" } } },
}

-- ---------------------------------------------------------------------------
-- Selection.

local libs = {}
do
    local want
    if opts.only then
        want = {}
        for k in opts.only:gmatch("[^,%s]+") do
            if not LIB_BY_KEY[k] then
                options.fail(SPEC, "--only: unknown library " .. k .. " (zkcoord, raw, kazoo, curator)")
            end
            want[k] = true
        end
    end
    for _, l in ipairs(LIBS) do
        if not want or want[l.key] then
            libs[#libs + 1] = l
        end
    end
end

local rows = ROWS
if opts.rows then
    local want = {}
    for k in opts.rows:gmatch("[^,%s]+") do
        want[k] = true
    end
    rows = {}
    for _, r in ipairs(ROWS) do
        if want[r.key] then
            rows[#rows + 1] = r
            want[r.key] = nil
        end
    end
    if next(want) then
        options.fail(SPEC, "--rows: unknown row " .. next(want))
    end
end

-- ---------------------------------------------------------------------------
-- Running one case: N copies of a peer, started together.

local started = {}   -- pid -> true while running (ours only)

local function parse_line(text)
    local line
    for l in (text or ""):gmatch("[^\n]+") do
        if l:find("=") then
            line = l
        end
    end
    if not line then
        return nil
    end
    local r = {}
    for k, v in line:gmatch("([%w_]+)=(%S+)") do
        r[k] = tonumber(v) or v
    end
    return r
end

local function kill_ours(pids)
    for _, pid in ipairs(pids) do
        if started[pid] and proc.alive(pid) then
            proc.kill(pid, "KILL")
            proc.wait_exit(pid, 5)
        end
        started[pid] = nil
    end
end

local case_no = 0

--- Runs `row` for `lib`: returns { metrics..., procs = { parsed lines } } or nil, err.
local function run_case(srv, lib, row, round)
    case_no = case_no + 1
    local path = ("/bench-%s-%s-r%d-%d"):format(row.key, lib.key, round, case_no)
    local dir = assert(proc.mktemp_dir("zkcoord-bench-"))
    local n = row.procs
    local pids = {}
    local dur = ("%g"):format(opts.duration)
    local warmup = row.scenario == "hold" and 0 or opts.warmup
    for i = 1, n do
        local argv = lib.argv(row.scenarios and row.scenarios[lib.key] or row.scenario, srv.hosts,
                              path, dur, row.extra)
        local pid, err = proc.spawn(argv, {
            stdout = dir .. "/out." .. i, stderr = dir .. "/err." .. i, owner = true, cwd = root,
            env = { BENCH_SYNC = dir, BENCH_ID = tostring(i), BENCH_WARMUP = ("%g"):format(warmup) },
        })
        if not pid then
            kill_ours(pids)
            proc.rm_rf(dir)
            return nil, "spawn failed: " .. tostring(err)
        end
        started[pid] = true
        pids[i] = pid
    end

    local function fail(msg)
        kill_ours(pids)
        local tail = trim(proc.read_file(dir .. "/err.1") or ""):sub(-600)
        local out = trim(proc.read_file(dir .. "/out.1") or ""):sub(-200)
        proc.rm_rf(dir)
        return nil, msg .. (out ~= "" and ("; stdout: " .. out) or "")
            .. (tail ~= "" and ("; stderr: " .. tail) or "")
    end

    -- Barrier: everyone connected and warmed up, then a common start time.
    if row.scenario ~= "hold" then
        local deadline = proc.now() + 60 + 5 * n + warmup
        local ready = 0
        while ready < n do
            ready = 0
            for i = 1, n do
                if file_exists(dir .. "/ready." .. i) then
                    ready = ready + 1
                elseif not proc.alive(pids[i]) then
                    return fail(("process %d of %d exited before the start"):format(i, n))
                end
            end
            if ready < n then
                if proc.now() > deadline then
                    return fail(("only %d of %d processes ready in time"):format(ready, n))
                end
                proc.sleep(0.01)
            end
        end
        assert(proc.write_file_atomic(dir .. "/go", ("%.6f\n"):format(wall() + 0.1)))
    end

    local deadline = proc.now() + opts.duration + 20 + 2 * n
    for i = 1, n do
        if not proc.wait_exit(pids[i], math.max(0.1, deadline - proc.now())) then
            return fail(("process %d of %d did not finish in time"):format(i, n))
        end
        started[pids[i]] = nil
    end

    local results = {}
    for i = 1, n do
        local r = parse_line(proc.read_file(dir .. "/out." .. i))
        if not r or r.error then
            return fail(("process %d of %d: %s"):format(i, n, r and r.error or "no result line"))
        end
        results[i] = r
    end
    proc.rm_rf(dir)

    -- Aggregate the copies.
    local m = { procs = results }
    if row.scenario == "hold" then
        m.hwm_mb = results[1].hwm_kb / 1024
        m.rss_mb = results[1].rss_kb / 1024
        return m
    end
    local ops, failed, minops, maxops, p50, p99 = 0, 0, math.huge, 0, {}, {}
    for _, r in ipairs(results) do
        ops = ops + (r.ops or 0)
        failed = failed + (tonumber(r.failed_cas) or 0)
        minops = math.min(minops, r.ops or 0)
        maxops = math.max(maxops, r.ops or 0)
        if (r.ops or 0) > 0 then     -- a starved process has no latency to report
            p50[#p50 + 1], p99[#p99 + 1] = r.p50_ms, r.p99_ms
        end
    end
    -- Longest over the processes (zkcoord prints them; others may not).
    for _, k in ipairs({ "max_ms", "node_wait_max_ms", "node_wait_p99_ms" }) do
        for _, r in ipairs(results) do
            local v = tonumber(r[k])
            if v then m[k] = math.max(m[k] or 0, v) end
        end
    end
    m.ops = ops
    -- over the longest run: a zkcoord process none of whose cycles ended
    -- within the duration ran until its first one did (secs)
    local secs = opts.duration
    for _, r in ipairs(results) do
        secs = math.max(secs, tonumber(r.secs) or 0)
    end
    m.rate = ops / secs
    m.p50_ms = median(p50)
    m.p99_ms = median(p99)
    m.min_ops, m.max_ops = minops, maxops
    -- How evenly the work was shared: the slowest process against the mean.
    m.fairness = ops > 0 and minops / (ops / n) or 0
    if results[1].threads and results[1].thread_min and n == 1 then
        -- one process of threads: the slowest thread against the mean thread
        m.fairness = ops > 0 and results[1].thread_min / (ops / results[1].threads) or 0
    end
    if row.scenario:match("^counter") then
        m.failed_cas = failed
        m.cas_per_inc = ops > 0 and failed / ops or nil
    end
    return m
end

-- ---------------------------------------------------------------------------
-- Main.

local started_at = os.date("!%Y-%m-%d %H:%M")

local function main()
    local t_start = proc.now()
    local load_before = loadavg()

    -- Build or check every selected library; drop the unavailable ones
    -- unless asked for by name.
    local active = {}
    for _, l in ipairs(libs) do
        local ok, err = l.build()
        if ok then
            active[#active + 1] = l
        elseif opts.only then
            io.stderr:write("run.lua: ", l.key, ": ", err, "\n")
            os.exit(1)
        else
            log("skipping %s: %s", l.key, err)
        end
    end
    if #active == 0 then
        io.stderr:write("run.lua: no library to run\n")
        os.exit(1)
    end

    -- Full JIT for the server (the test helper's default stops at C1 for a
    -- fast start; a production server does not).
    local srv, serr = zkserver.start { log_level = "WARN",
                                       jvm_flags = { "-XX:TieredStopAtLevel=4", "-Xmx512m" } }
    if not srv then
        io.stderr:write("run.lua: cannot start ZooKeeper: ", tostring(serr), "\n")
        os.exit(1)
    end
    log("ZooKeeper at %s; libraries: %s; %d round(s) of %gs", srv.hosts,
        (function()
            local k = {}
            for i, l in ipairs(active) do k[i] = l.key end
            return table.concat(k, ",")
        end)(), opts.rounds, opts.duration)

    local results = {}       -- row key -> lib key -> { runs = {...} }
    local errors = {}
    local ok, err = xpcall(function()
        -- Warm the server's JIT (not measured).
        if not opts.quick then
            local warm_lib = LIB_BY_KEY.raw
            local saved = opts.duration
            opts.duration = 2
            for _, r in ipairs({ ROWS[1], ROWS[5] }) do
                run_case(srv, warm_lib, r, 0)
            end
            opts.duration = saved
        end
        for round = 1, opts.rounds do
            for _, row in ipairs(rows) do
                local order = {}
                for i = 1, #active do
                    order[i] = active[(i + round - 2) % #active + 1]
                end
                for _, lib in ipairs(order) do
                    if row_has(row, lib.key) then
                        results[row.key] = results[row.key] or {}
                        local rl = results[row.key][lib.key] or { runs = {} }
                        results[row.key][lib.key] = rl
                        local m, cerr = run_case(srv, lib, row, round)
                        if m then
                            m.load = loadavg()
                            rl.runs[#rl.runs + 1] = m
                            log("round %d %-18s %-8s %s", round, row.key, lib.key,
                                m.rate and ("%.0f/s p50 %.2f ms%s"):format(m.rate, m.p50_ms or 0,
                                    m.cas_per_inc and (" cas/inc %.2f"):format(m.cas_per_inc) or "")
                                or ("%.1f MB"):format(m.hwm_mb))
                        else
                            errors[#errors + 1] = ("round %d %s %s: %s"):format(round, row.key,
                                                                                 lib.key, cerr)
                            log("FAILED %s", errors[#errors])
                        end
                    end
                end
            end
        end
    end, debug.traceback)

    -- Whatever happened: stop everything we started.
    local left = {}
    for pid in pairs(started) do
        left[#left + 1] = pid
    end
    kill_ours(left)
    srv:destroy()
    if not ok then
        io.stderr:write("run.lua: ", tostring(err), "\n")
        os.exit(1)
    end

    -- Medians over the rounds.
    for _, row in ipairs(rows) do
        for _, lib in ipairs(active) do
            local rl = results[row.key] and results[row.key][lib.key]
            if rl then
                rl.median = {}
                for _, mk in ipairs({ "rate", "p50_ms", "p99_ms", "cas_per_inc", "fairness", "hwm_mb",
                                     "rss_mb", "node_wait_p99_ms" }) do
                    local vals = {}
                    for _, m in ipairs(rl.runs) do
                        if m[mk] then
                            vals[#vals + 1] = m[mk]
                        end
                    end
                    rl.median[mk] = median(vals)
                end
                -- the longest waits: over all rounds, not a median
                for _, mk in ipairs({ "max_ms", "node_wait_max_ms" }) do
                    for _, m in ipairs(rl.runs) do
                        if m[mk] then
                            rl.median[mk] = math.max(rl.median[mk] or 0, m[mk])
                        end
                    end
                end
            end
        end
    end
    return active, results, errors, load_before, proc.now() - t_start
end

-- ---------------------------------------------------------------------------
-- Output: table, JSON, doc, plot.

local function fmt_value(mk, v)
    if v == nil then
        return "n/a"
    end
    if mk == "rate" then
        return ("%.0f"):format(v)
    elseif mk == "cas_per_inc" or mk == "fairness" then
        return ("%.2f"):format(v)
    elseif mk == "hwm_mb" or mk == "rss_mb" then
        return ("%.1f"):format(v)
    end
    return ("%.2f"):format(v)
end

local function value(results, row_key, lib_key, mk)
    local rl = results[row_key] and results[row_key][lib_key]
    return rl and rl.median and rl.median[mk]
end

--- The markdown table of the rows of one form: best (row.best) or process.
local function make_table(active, results, best)
    local peers = {}
    for _, l in ipairs(active) do
        if l.key ~= "zkcoord" then
            peers[#peers + 1] = l
        end
    end
    local head = { "measure", "better" }
    for _, l in ipairs(active) do
        head[#head + 1] = l.name
    end
    for _, p in ipairs(peers) do
        head[#head + 1] = "zkcoord / " .. p.name
    end
    local lines = { "| " .. table.concat(head, " | ") .. " |",
                    "|" .. ("---|"):rep(#head) }
    local footnote = false
    local any = false
    for _, row in ipairs(rows) do
        local runs = (row.best == true) == best   -- a row none of the selected libraries runs is left out
        local has = false
        for _, l in ipairs(active) do
            has = has or row_has(row, l.key)
        end
        runs = runs and has
        any = any or runs
        for _, m in ipairs(runs and row.metrics or {}) do
            local cells = { m.label, m.better }
            for _, l in ipairs(active) do
                if not row_has(row, l.key) then
                    cells[#cells + 1] = "—"
                else
                    cells[#cells + 1] = fmt_value(m.key, value(results, row.key, l.key, m.key))
                end
            end
            local z = value(results, row.key, "zkcoord", m.key)
            for _, p in ipairs(peers) do
                local base_row = row.compare_with or row.key
                local pv = value(results, base_row, p.key, m.key)
                local mark = row.compare_with and "†" or ""
                if row.compare_with then
                    footnote = true
                end
                if z and pv and pv > 0 then
                    cells[#cells + 1] = ("%.2fx%s"):format(z / pv, mark)
                else
                    cells[#cells + 1] = "—"
                end
            end
            lines[#lines + 1] = "| " .. table.concat(cells, " | ") .. " |"
        end
    end
    if not any then
        return nil
    end
    local text = table.concat(lines, "\n")
    if footnote then
        text = text .. "\n\n† A ratio across rows: " .. (best
            and "zkcoord's row against the peers' row above it (same contenders in one process)."
            or "zkcoord's coroutine and fair = false rows against the peer's 16-process counter row.")
    end
    return text
end

local function machine_facts()
    local cpu = trim((proc.read_file("/proc/cpuinfo") or ""):match("model name%s*:%s*([^\n]+)") or "?")
    local nproc = trim(sh("nproc"))
    local kernel = trim(sh("uname -r"))
    local java = trim((sh("java -version"):match("[^\n]*version[^\n]*") or "?"))
    local py = python()
    local kz = trim(sh(shquote(py) .. " -c 'import kazoo.version, sys; "
        .. "print(kazoo.version.__version__, sys.version.split()[0])'"))
    local function pkg_version(pkg)
        local out, okv = sh("dpkg-query -W -f '${Version}' " .. pkg)
        return okv and trim(out):match("^[%d.]+") or "?"
    end
    local lj = trim(sh(shquote(LUAJIT) .. " -v")):match("^(LuaJIT %S+)") or "LuaJIT ?"
    local zkv = "?"
    do
        local okz, core = pcall(require, "zkcoord.core")
        if okz and core.zookeeper_version then
            zkv = tostring(core.zookeeper_version)
        end
    end
    return {
        cpu = cpu, nproc = tonumber(nproc) or nproc, kernel = kernel,
        date = started_at .. "-" .. os.date("!%H:%M UTC"),
        java = java, kazoo = kz, luajit = lj,
        curator = pkg_version("libcurator-framework-java"),
        zookeeper_server = pkg_version("libzookeeper-java"),
        libzookeeper = zkv,
    }
end

local PLOT_LIBS = { zkcoord = 1, raw = 2, kazoo = 3, curator = 4 }

local results_all     -- every run's figures, for load_range()

local function make_plot(active, results, png)
    local _, have = sh("command -v gnuplot")
    if not have then
        return nil, "gnuplot not found (gnuplot-nox)"
    end
    local dat = root .. "/bench/results/plot.dat"
    local lines = {}
    local lo, hi = 0.5, 2
    local cols = {}
    for _, l in ipairs(active) do
        cols[#cols + 1] = l
    end
    table.sort(cols, function(a, b) return PLOT_LIBS[a.key] < PLOT_LIBS[b.key] end)
    for _, row in ipairs(rows) do
        for _, m in ipairs(row.metrics) do
            if m.plot then
                local z = value(results, row.key, "zkcoord", "rate")
                local cells = { '"' .. m.plot .. '"' }
                for _, l in ipairs(cols) do
                    local v = value(results, row.key, l.key, "rate")
                    local ratio = (z and v and z > 0) and v / z
                    cells[#cells + 1] = ratio and ("%.4f"):format(ratio) or "NaN"
                    if ratio and ratio > 0 then
                        lo, hi = math.min(lo, ratio), math.max(hi, ratio)
                    end
                end
                lines[#lines + 1] = table.concat(cells, " ")
            end
        end
    end
    if #lines == 0 then
        return nil, "no throughput rows"
    end
    assert(proc.write_file(dat, table.concat(lines, "\n") .. "\n"))
    local plots = {}
    local colors = { zkcoord = "#1b7837", raw = "#4d4d4d", kazoo = "#2166ac", curator = "#b2182b" }
    for i, l in ipairs(cols) do
        plots[#plots + 1] = ("'%s' using %d%s title '%s' lc rgb '%s'"):format(
            i == 1 and dat or "", i + 1, i == 1 and ":xtic(1)" or "", l.name, colors[l.key])
    end
    local gp = table.concat({
        "set terminal pngcairo size 1100,520 font 'sans,10'",
        "set output '" .. png .. "'",
        "set title 'Throughput relative to zkcoord (zkcoord = 1; higher bar = faster library; log scale)'",
        "set style data histogram",
        "set style histogram clustered gap 1",
        "set style fill solid 0.85 border -1",
        "set boxwidth 0.9",
        "set logscale y 2",
        ("set yrange [%g:%g]"):format(2 ^ math.floor(math.log(lo) / math.log(2)),
                                      2 ^ (math.ceil(math.log(hi) / math.log(2)) + 1)),
        "set ytics ('1/64' 0.015625, '1/32' 0.03125, '1/16' 0.0625, '1/8' 0.125, '1/4' 0.25,"
            .. " '1/2' 0.5, '1' 1, '2' 2, '4' 4, '8' 8, '16' 16, '32' 32, '64' 64)",
        "set bmargin 4",
        "set grid ytics",
        "set key top left horizontal",
        "set arrow from graph 0, first 1 to graph 1, first 1 nohead lw 1.5 dt 2",
        "plot " .. table.concat(plots, ", "),
        "",
    }, "\n")
    local gpfile = root .. "/bench/results/plot.gp"
    assert(proc.write_file(gpfile, gp))
    local out, ok = sh("gnuplot " .. shquote(gpfile))
    if not ok then
        return nil, "gnuplot failed: " .. out
    end
    return true
end

-- The lowest and highest 1-minute load average seen after a run (the
-- machine may be shared: what the rounds ran beside).
local function load_range()
    local lo, hi = math.huge, -math.huge
    for _, byrow in pairs(results_all or {}) do
        for _, rl in pairs(byrow) do
            for _, m in ipairs(rl.runs or {}) do
                local l = tonumber(tostring(m.load or ""):match("^(%S+)"))
                if l then
                    lo, hi = math.min(lo, l), math.max(hi, l)
                end
            end
        end
    end
    return lo <= hi and ("%.1f to %.1f"):format(lo, hi) or "?"
end

local function write_doc(table_md, facts, load_before, load_after, secs, errors, plotted)
    local doc = root .. "/docs/PERFORMANCE.md"
    local text = proc.read_file(doc) or "# Performance\n"
    local cmd = "luajit bench/run.lua --doc"
    if opts.only then cmd = cmd .. " --only " .. opts.only end
    if opts.rows then cmd = cmd .. " --rows " .. opts.rows end
    if opts.quick then cmd = cmd .. " --quick" end
    if opts.rounds_set then cmd = cmd .. " --rounds " .. opts.rounds_set end
    if opts.duration_set then cmd = cmd .. " --duration " .. opts.duration_set end
    if opts.warmup_set then cmd = cmd .. " --warmup " .. opts.warmup_set end
    local section = {
        "<!-- peers:begin -->",
        "## Side by side: zkcoord, raw C, kazoo, Curator",
        "",
        "Command: `" .. cmd .. "` (one command: starts its own standalone ZooKeeper on",
        "127.0.0.1 with forceSync=no, builds the peers in `bench/peers/`, runs every row for every",
        "library on that one server, and writes this section, `docs/performance.png` and",
        "`bench/results/latest.json`).",
        "",
        ("Measured %s on %s, %s cores (nproc), Linux %s. Load average (1, 5, 15 min) before the"
         .. " run: %s; after: %s; the 1-minute figure after each run ranged %s. The run took %.0f s.")
            :format(facts.date, facts.cpu, tostring(facts.nproc), facts.kernel, load_before,
                    load_after, load_range(), secs),
        ("Software: ZooKeeper server %s (Debian, full JIT); zkcoord on libzookeeper_mt %s and %s;"
         .. " raw C on the same libzookeeper_mt; kazoo %s (Python %s); Curator %s on %s.")
            :format(facts.zookeeper_server, facts.libzookeeper, facts.luajit,
                    (facts.kazoo:match("^(%S+)") or "?"), (facts.kazoo:match("%S+%s+(%S+)") or "?"),
                    facts.curator, facts.java),
        "",
    }
    if plotted then
        section[#section + 1] = "![Throughput of each library relative to zkcoord](performance.png)"
        section[#section + 1] = ""
    end
    section[#section + 1] = table_md
    section[#section + 1] = ""
    for _, l in ipairs({
        ("Medians of %d interleaved round(s): each round runs every row for every library in"
         .. " turn (the order of the libraries rotates from round to round), %g s per run after %g s"
         .. " of warm-up on a private path, each run on a fresh path. Multi-process rows start all"
         .. " processes at one instant after every one has connected and warmed up; a row's"
         .. " figure is the sum of the processes' completed cycles over the duration (a zkcoord"
         .. " process none of whose cycles ended within it runs until its first one does, and the"
         .. " figure is over that longer time). The ratio"
         .. " columns are zkcoord's figure over the peer's, whichever way is better for that row.")
            :format(opts.rounds, opts.duration, opts.warmup),
        "",
        "What each program does per cycle (round trips to the server, uncontended):",
        "",
        "- zkcoord: `client:lock(path):acquire()` / `release()` (create and get_children"
            .. " pipelined, the one wait; the delete on release sent without waiting, ordered"
            .. " before the session's next request: 3 requests per cycle; an exists() watch on"
            .. " its own node only when `on_lost` is registered); `client:rwlock(path)`;"
            .. " `client:counter(path):add(1)` (versioned set from the version of its last reply,"
            .. " a read only after a lost race; fair by default: under contention the adds"
            .. " queue as child nodes and the head of the line writes for itself and everyone"
            .. " queued behind it in one multi; `fair = false`: jittered exponential backoff"
            .. " from 5 ms instead, the last winner writes again at once); the"
            .. " coroutine rows: 32 coroutines per process started with `client:spawn` and driven"
            .. " by `client:run`, sharing one counter object, so the adds that arrive while a"
            .. " compare-and-set is in flight go together in the next one (each still gets its"
            .. " own value).",
        "- raw C (`bench/peers/raw_bench.c`): libzookeeper_mt's async API; lock = create"
            .. " ephemeral-sequential and get_children sent back to back (1 round trip), delete on"
            .. " release, waiting for its reply (1); predecessor watched with get(); counter = get"
            .. " then versioned set (2 round trips), no backoff. It turns off libzookeeper's host"
            .. " re-resolution on every I/O poll (`zoo_set_servers_resolution_delay(zh, -1)`),"
            .. " worth 20-40% on this machine; zkcoord's core re-resolves at most every 60 s"
            .. " (`resolve_interval`).",
        "- kazoo (`bench/peers/kazoo_bench.py`): `Lock`, `ReadLock`/`WriteLock`, `Counter`"
            .. " (`+= 1`: get then versioned set; after a lost race the client's default command"
            .. " retry sleeps 0.1 s ± 40%, doubling). Lock = create, get_children, delete (3). kazoo 2.8's"
            .. " `ReadLock` deadlocks against a later writer (python-zk/kazoo#649): the peer"
            .. " applies upstream's fix (#650) in a subclass, same round trips.",
        "- Curator (`bench/peers/CuratorBench.java`): `InterProcessMutex`,"
            .. " `InterProcessReadWriteLock`, `DistributedAtomicLong` with `RetryNTimes(100, 100)`"
            .. " (the retry sleep that served Curator best at 16 contenders: about 890/s against"
            .. " about 64/s with 1 ms; override: BENCH_CURATOR_RETRY=n,ms), get then versioned set"
            .. " (2 round trips); failed CAS = optimistic tries beyond the first."
            .. " Lock = create, get_children, delete (3). Default JVM options.",
        "- Peak RSS is VmHWM of a process that connected, acquired one lock and settled 0.5 s.",
        "- \"slowest process / mean\": the increments of the process that did fewest over the"
            .. " mean per process (0: some process made no increment in the whole run). A counter"
            .. " can buy throughput with starvation; every process's count is in latest.json."
            .. " zkcoord's counter with `fair = false`, like kazoo's, lets the last winner write"
            .. " again at once from the version of its reply while the losers back off, so in a"
            .. " saturating loop one process can do nearly all increments; an add that keeps"
            .. " losing gives up with \"timeout\" after `max_tries` (100, about 25 s of backoff)."
            .. " The default (`fair = true`) serves the adds in line order. Raw C reads before"
            .. " every write: fair, at about 7 failed compare-and-sets per increment.",
        "- Topology of the best-form rows (\"in 1 process\"): the lock and rwlock rows run N"
            .. " contenders in one process, each its own session: Curator as N threads of one JVM"
            .. " (an `InterProcessMutex` / `InterProcessReadWriteLock` per thread on its own"
            .. " `CuratorFramework`), kazoo as N threads of one Python process (a `KazooClient`"
            .. " each), zkcoord as N coroutines of one LuaJIT process, each its own"
            .. " `zkcoord.connect`. One thread drives all N zkcoord sessions: the default"
            .. " (blocking) waiter sleeps on one client's condition variable, so the bench gives"
            .. " the N clients a custom waiter (`bench/pollwait.lua`, `wait = ...` in connect)"
            .. " that waits on every client's `fd()` in one poll(2) and calls `process()` on the"
            .. " readable ones. The counter row runs 16 contenders on ONE session, a recipe object"
            .. " each (kazoo's and Curator's threads share their process's client; zkcoord's"
            .. " coroutines, `client:spawn`, a counter object each, so no combining); fairness is"
            .. " the slowest contender over the mean. zkcoord-only rows beside them: 16 lock"
            .. " contenders as coroutines of one session (a lock's owner is the coroutine, so 16"
            .. " nodes in line, as 16 sessions would have), and the counter on 16 sessions of one"
            .. " process. The process-form rows run a process per contender, one session each.",
    }) do
        section[#section + 1] = l
    end
    if #errors > 0 then
        section[#section + 1] = ""
        section[#section + 1] = "Runs that failed (left out of the medians):"
        section[#section + 1] = ""
        for _, e in ipairs(errors) do
            section[#section + 1] = "- " .. e:gsub("\n", " "):sub(1, 300)
        end
    end
    section[#section + 1] = "<!-- peers:end -->"
    local s = table.concat(section, "\n")
    if text:find("<!%-%- peers:begin %-%->") then
        text = text:gsub("<!%-%- peers:begin %-%->.-<!%-%- peers:end %-%->", function() return s end)
    else
        text = text:gsub("\n*$", "\n") .. "\n" .. s .. "\n"
    end
    assert(proc.mkdir_p(root .. "/docs"))
    assert(proc.write_file(doc, text))
    return doc
end


local active, results, errors, load_before, secs = main()
results_all = results
local load_after = loadavg()
local best_md, proc_md = make_table(active, results, true), make_table(active, results, false)
local tables = {}     -- either may be empty (--rows)
tables[#tables + 1] = best_md and ("Best form (one process):\n\n" .. best_md) or nil
tables[#tables + 1] = proc_md and ("Process form (a process per contender):\n\n" .. proc_md) or nil
local table_md = table.concat(tables, "\n\n")
print(table_md)
print(("\n(medians of %d round(s), %gs per run, %gs warm-up; load average before %s, after %s)")
      :format(opts.rounds, opts.duration, opts.warmup, load_before, load_after))
if #errors > 0 then
    print("\nFailed runs:")
    for _, e in ipairs(errors) do
        print("  " .. e)
    end
end

local facts = machine_facts()
local json_file = opts.json or (root .. "/bench/results/latest.json")
assert(proc.mkdir_p(root .. "/bench/results"))
local summary = {}
for _, row in ipairs(rows) do
    summary[row.key] = {}
    for _, l in ipairs(active) do
        local rl = results[row.key] and results[row.key][l.key]
        if rl then
            summary[row.key][l.key] = rl
        end
    end
end
assert(proc.write_file(json_file, json({
    command = "luajit bench/run.lua " .. table.concat(arg, " "),
    options = { rounds = opts.rounds, duration = opts.duration, warmup = opts.warmup,
                quick = opts.quick, only = opts.only, rows = opts.rows },
    machine = facts, load_before = load_before, load_after = load_after, seconds = secs,
    results = summary, errors = errors,
}) .. "\n"))
print("wrote " .. json_file:gsub("^" .. root:gsub("%p", "%%%0") .. "/", ""))

if opts.doc then
    local png = root .. "/docs/performance.png"
    assert(proc.mkdir_p(root .. "/docs"))
    local plotted, perr = make_plot(active, results, png)
    if not plotted then
        log("no plot: %s", perr)
    end
    write_doc(table_md, facts, load_before, load_after, secs, errors, plotted)
    print("wrote docs/PERFORMANCE.md" .. (plotted and " and docs/performance.png" or ""))
end

-- A row without a positive figure for a selected library is a failure.
local missing = 0
for _, row in ipairs(rows) do
    for _, l in ipairs(active) do
        if row_has(row, l.key) then
            local m = row.metrics[1]
            local v = value(results, row.key, l.key, m.key)
            if not (v and v > 0) then
                missing = missing + 1
            end
        end
    end
end
os.exit(missing == 0 and 0 or 1)
