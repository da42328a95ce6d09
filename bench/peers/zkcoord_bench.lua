-- zkcoord_bench.lua: the zkcoord peer for bench/run.lua, on zkcoord's public
-- API only (connect, client:lock, client:rwlock, client:counter).
--
--   luajit bench/peers/zkcoord_bench.lua SCENARIO HOSTS PATH DURATION_S [EXTRA]
--
-- Prints one line of key=value pairs. Scenarios and the BENCH_SYNC /
-- BENCH_ID / BENCH_WARMUP environment contract: see bench/run.lua.
--
-- counter_coroutines (zkcoord only): EXTRA coroutines (default 32) of this
-- one process, started with client:spawn and driven by client:run, share one
-- counter object and loop add(1). A wait inside a spawned coroutine yields
-- to the others, so while one compare-and-set is in flight the other adds
-- queue and the next write carries their sum (the counter's combining).
-- counter_fast and counter_coroutines_fast: the same with the counter's
-- fair = false (the last winner writes again at once).
--
-- zkcoord's best form for N contenders in one process:
-- lock_sessions, rwlock_sessions, counter_sessions: EXTRA (default 16)
-- sessions in this one process, each its own zkcoord.connect with one
-- coroutine looping on its own recipe object (the process rows'
-- topology, with coroutines for processes). The default waiter serves one
-- client per thread, so these clients share bench/pollwait.lua: a custom
-- waiter that polls every client's fd in one poll(2).
-- lock_one_session, rwlock_one_session, counter_one_session: EXTRA
-- coroutines on ONE session (client:spawn, client:run), a recipe object
-- each (the peers' thread rows with one session). A lock's owner is the
-- running coroutine, so each coroutine has its own node and they contend
-- as separate owners would; a counter object per coroutine means no
-- combining of adds (that is counter_coroutines).
-- lock_one_session_cohort, rwlock_one_session_cohort: the same with the
-- recipe's cohort = true (zkcoord.cohort: the coroutines share one node;
-- lock handoffs and read joins are local); the lock's print node_waits=,
-- node_wait_p50_ms=, node_wait_p99_ms= and node_wait_max_ms= (node_wait). lock_uncontended_cohort and
-- lock_contended_cohort: lock_uncontended and lock_contended with
-- cohort = true (one owner per process: the cohort's cost alone).
-- These print threads= (sessions or coroutines) and thread_min= (the
-- fewest cycles of one of them).
local root = (arg[0]:match("^(.*)/bench/peers/[^/]*$") or ".")
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/bench/?.lua;"
    .. package.path
package.cpath = root .. "/lua/?.so;" .. package.cpath

local ffi = require "ffi"
local zkcoord = require "zkcoord"

local now = zkcoord.now

if not pcall(ffi.typeof, "struct zkb_timespec") then
    ffi.cdef [[
    struct zkb_timespec { long tv_sec; long tv_nsec; };
    int zkb_clock_gettime(int, struct zkb_timespec *) __asm__("clock_gettime");
    ]]
end
local ts = ffi.new("struct zkb_timespec")
local function wall()
    ffi.C.zkb_clock_gettime(0, ts)   -- CLOCK_REALTIME
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local SCENARIOS = { lock_uncontended = true, lock_contended = true, rwlock = true,
                    counter = true, counter_coroutines = true, hold = true,
                    counter_fast = true, counter_coroutines_fast = true,
                    lock_sessions = true, rwlock_sessions = true, counter_sessions = true,
                    lock_one_session = true, rwlock_one_session = true,
                    counter_one_session = true, lock_one_session_cohort = true,
                    rwlock_one_session_cohort = true, lock_uncontended_cohort = true,
                    lock_contended_cohort = true }

local scen, hosts, path, duration, extra = arg[1], arg[2], arg[3], tonumber(arg[4]), arg[5]
if not (scen and hosts and path and duration) then
    io.stderr:write("usage: zkcoord_bench.lua SCENARIO HOSTS PATH DURATION_S [EXTRA]\n")
    os.exit(2)
end
if not SCENARIOS[scen] then
    print("error=unsupported_scenario")
    os.exit(3)
end
local recipe = scen:match("^(%a+)")          -- lock, rwlock, counter
local read_pct = scen == "rwlock" and tonumber(extra) or 90
local coroutines = scen:match("^counter_coroutines") ~= nil
local ncoroutines = coroutines and tonumber(extra) or 32
-- in-process forms: sessions x coroutines per session
local nsessions, per_session = 1, 1
if scen:match("_sessions$") then
    nsessions = tonumber(extra) or 16
elseif scen:match("_one_session") then
    per_session = tonumber(extra) or 16
end
local inproc = nsessions > 1 or per_session > 1
-- counter_fast, counter_coroutines_fast: the counter with fair = false
local counter_opts = { fair = scen:match("_fast$") == nil }
local warmup = tonumber(os.getenv("BENCH_WARMUP") or "0.5")
local id = os.getenv("BENCH_ID") or "0"


local function rss()
    local f = assert(io.open("/proc/self/status"))
    local text = f:read("*a")
    f:close()
    return tonumber(text:match("VmRSS:%s*(%d+)")) or 0, tonumber(text:match("VmHWM:%s*(%d+)")) or 0
end


local function die(what, err)
    print(("error=%s:%s"):format(what, tostring(err)))
    io.stdout:flush()
    os.exit(1)
end


-- Acquires pass a long timeout only so that a stuck run ends; acquire()
-- without one waits the same way (spec/regress/acquire_forever_spec.lua).
local ACQUIRE_TIMEOUT = 600

local c, cerr = zkcoord.connect { servers = hosts, session_timeout = 10, connect_timeout = 30 }
if not c then
    die("connect", cerr)
end
local waiter = c:waiter()


--- The driver's start barrier; returns the monotonic start time.
local function barrier()
    local dir = os.getenv("BENCH_SYNC")
    if not dir or dir == "" then
        return now()
    end
    local f = assert(io.open(dir .. "/ready." .. id, "w"))
    f:close()
    local deadline, start = now() + 300, nil
    while now() < deadline do
        f = io.open(dir .. "/go")
        if f then
            start = tonumber(f:read("*a"))
            f:close()
            if start then
                break
            end
        end
        waiter:sleep(0.002)
    end
    if start and start > wall() then
        waiter:sleep(start - wall())
    end
    return now()
end


if scen == "hold" then
    local lock = c:lock(path)
    local ok, err = lock:acquire(30)
    if not ok then
        die("acquire", err)
    end
    waiter:sleep(0.5)
    print(("rss_kb=%d hwm_kb=%d"):format(rss()))
    io.stdout:flush()
    c:close()
    os.exit(0)
end


local lat, nlat = {}, 0
local reads, writes = 0, 0

-- With cohort = true: the waits of this process's cohort for a node of
-- its own (the first grant of a node, n = 0), each from the release that
-- let the previous node go; with another process on the lock, the wait of
-- a remote waiter (the other cohort held meanwhile, within its bound).
local last_release, node_waits = nil, {}
local function node_wait(lock)
    local _, n = lock:token()
    if n == 0 and last_release then
        node_waits[#node_waits + 1] = now() - last_release
    end
end
local counter_objs = {}
-- math.random is seeded from /dev/urandom by zkcoord.queue (node names need it).


-- One cycle of the scenario on the given objects; returns true when done.
local function make_cycle(p, cl)
    cl = cl or c
    if recipe == "counter" then
        local ctr = cl:counter(p, counter_opts)
        counter_objs[#counter_objs + 1] = ctr
        return function()
            local v, err, detail = ctr:add(1)
            if v == nil then
                die("add", tostring(err) .. (detail and (":" .. tostring(detail):gsub("%s", "_")) or ""))
            end
        end
    elseif recipe == "rwlock" then
        local rw = cl:rwlock(p, scen:match("_cohort$") and { cohort = true } or nil)
        local r, w = rw:read_lock(), rw:write_lock()
        return function()
            local l
            if math.random(100) <= read_pct then
                l, reads = r, reads + 1
            else
                l, writes = w, writes + 1
            end
            local ok, err = l:acquire(ACQUIRE_TIMEOUT)
            if not ok then
                die("acquire", err)
            end
            l:release()        -- the critical section is empty
        end
    else
        local cohort = scen:match("_cohort$") ~= nil
        local lock = cl:lock(p, cohort and { cohort = true } or nil)
        return function()
            local ok, err = lock:acquire(ACQUIRE_TIMEOUT)
            if not ok then
                die("acquire", err)
            end
            if cohort then
                node_wait(lock)
            end
            lock:release()     -- the critical section is empty
            last_release = now()
        end
    end
end


-- A measured round in which no cycle of this process ended (a loaded
-- machine, round trips of a second: "0/s" would say no progress) goes on
-- until one does: that cycle counts, and the round ends there (late_end;
-- secs says so).
local ended, late_end = 0, nil

-- Loops `cycle` until `end_t`; counts (and times) cycles done by then.
local function loop(cycle, end_t, measure)
    local ops = 0
    while now() < end_t or (measure and ended == 0 and not late_end) do
        local t0 = now()
        cycle()
        local t1 = now()
        if t1 <= end_t or (measure and ended == 0 and not late_end) then
            if t1 > end_t then
                late_end = t1
            end
            ended = ended + 1
            ops = ops + 1
            if measure then
                nlat = nlat + 1
                lat[nlat] = t1 - t0
            end
        end
    end
    return ops
end


-- counter_coroutines: n spawned coroutines, each looping `cycle` on one
-- shared counter.
local function loop_coroutines(cycle, end_t, measure, n)
    local ops = 0
    for _ = 1, n do
        c:spawn(function()
            local mine = loop(cycle, end_t, measure)   -- it yields: add after, not around it
            ops = ops + mine
        end)
    end
    if not c:run(end_t - now() + 60) then
        die("coroutines", "still running 60 s after the end")
    end
    return ops
end


-- The in-process forms: nsessions sessions (on one poll scheduler) or one
-- session with per_session coroutines; each contender counts its own cycles.
local sessions, sched = { c }, nil
local contender_ops = {}
if nsessions > 1 then
    sched = require("pollwait").new()
    sessions = {}
    for k = 1, nsessions do
        local ck, kerr = zkcoord.connect { servers = hosts, session_timeout = 10,
                                           connect_timeout = 30, wait = sched:wait_option() }
        if not ck then
            die("connect", kerr)
        end
        sessions[k] = ck
    end
end

local function run_inproc(p, end_t, measure)
    local ops, k = 0, 0
    contender_ops = {}
    for _, cl in ipairs(sessions) do
        for _ = 1, per_session do
            local cycle = make_cycle(p, cl)     -- a recipe object per contender
            k = k + 1
            local me = k
            contender_ops[me] = 0
            local function body()
                local mine = loop(cycle, end_t, measure)
                contender_ops[me] = mine
                ops = ops + mine
            end
            if sched then
                sched:spawn(body)
            else
                cl:spawn(body)
            end
        end
    end
    local done = (sched or c):run(end_t - now() + 60)
    if sched and #sched.errors > 0 then
        die("coroutine", sched.errors[1]:gsub("%s+", "_"))
    end
    if not done then
        die("contenders", "still running 60 s after the end")
    end
    return ops
end


local function run(p, end_t, measure)
    if inproc then
        return run_inproc(p, end_t, measure)
    end
    local cycle = make_cycle(p)
    if coroutines then
        return loop_coroutines(cycle, end_t, measure, ncoroutines)
    end
    return loop(cycle, end_t, measure)
end


local ok, err = c:create(path, recipe == "counter" and "0" or nil)
if not ok and err ~= "nodeexists" then
    die("create", err)
end
if warmup > 0 then
    local wp = path .. "-warm-" .. id
    run(wp, now() + warmup, false)
    reads, writes = 0, 0
    counter_objs = {}
    last_release, node_waits = nil, {}
end

ended = 0
local t0 = barrier()
local ops = run(path, t0 + duration, true)
local t1 = late_end or math.min(now(), t0 + duration)
table.sort(lat)
local function pct(p)
    if nlat == 0 then
        return 0
    end
    return lat[math.floor(p * (nlat - 1) + 0.5) + 1] * 1000
end
local parts = { ("ops=%d secs=%.3f rate=%.1f p50_ms=%.3f p99_ms=%.3f"):format(
    ops, t1 - t0, ops / (t1 - t0), pct(0.5), pct(0.99)) }
if recipe == "counter" then
    local failed = 0
    for _, ctr in ipairs(counter_objs) do
        failed = failed + ctr:stats().cas_failures
    end
    parts[#parts + 1] = ("failed_cas=%d"):format(failed)
end
if coroutines then
    parts[#parts + 1] = ("coroutines=%d waiter=%s"):format(ncoroutines, waiter.name or "?")
end
if recipe == "rwlock" then
    parts[#parts + 1] = ("reads=%d writes=%d"):format(reads, writes)
end
parts[#parts + 1] = ("max_ms=%.3f"):format(nlat > 0 and lat[nlat] * 1000 or 0)
if #node_waits > 0 then
    table.sort(node_waits)
    local function wp(q)
        return node_waits[math.floor(q * (#node_waits - 1) + 0.5) + 1] * 1000
    end
    parts[#parts + 1] = ("node_waits=%d node_wait_p50_ms=%.3f node_wait_p99_ms=%.3f"
                         .. " node_wait_max_ms=%.3f"):format(#node_waits, wp(0.5), wp(0.99), wp(1))
end
if inproc then
    local fewest = math.huge
    for _, n in ipairs(contender_ops) do
        fewest = math.min(fewest, n)
    end
    parts[#parts + 1] = ("threads=%d thread_min=%d sessions=%d"):format(#contender_ops, fewest,
                                                                       #sessions)
end
parts[#parts + 1] = ("rss_kb=%d hwm_kb=%d"):format(rss())
print(table.concat(parts, " "))
io.stdout:flush()
for _, cl in ipairs(sessions) do
    cl:close()
end
c:close()
os.exit(0)
