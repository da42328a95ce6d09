-- bench/soak.lua: a long run of the everyday work, watching memory.
--
--   luajit bench/soak.lua [--seconds S] [--interval S] [--servers HOSTS]
--                         [--report FILE] [--quiet]
--
-- One process, two clients on one namespace. The worker loops: lock
-- acquire / counter add / release; the other client sets a node the worker
-- watches (a zkcoord.watch recipe and a raw one-shot watch re-armed on every
-- event), and every 10th round it holds the lock while the worker tries it
-- once (acquire(0): "timeout", its node deleted). Every --interval seconds
-- (default 5) it samples the Lua heap after a full collection
-- (collectgarbage("count")) and VmRSS from /proc/self/status.
--
-- After a warm-up (the first third of the run) it fits a least-squares line
-- through the samples and reports start / end / max and the slope per
-- minute for both; growth = slope x the measured span. Flat means heap
-- growth < 1 MiB and RSS growth < 5 MiB over the measured span (the
-- reasons for these bounds are in docs/RELIABILITY.md). Under AddressSanitizer
-- (LD_PRELOAD holds "asan") RSS is dominated by the sanitizer's quarantine,
-- so only the heap counts towards the verdict.
--
-- Servers: --servers, else $ZK_HOSTS, else a private standalone server
-- (spec/helpers/zkserver) that is stopped at the end. Exit status: 0 when
-- flat and no operation failed, 1 otherwise. --report FILE writes every
-- figure as a Lua table (`return { ... }`) for spec/soak_spec.lua.
local root = (arg and arg[0] or ""):match("^(.*)/bench/[^/]*$") or "."
local cpath = os.getenv("ZKCOORD_CPATH") or "lua/?.so"
if cpath:sub(1, 1) ~= "/" then
    cpath = root .. "/" .. cpath
end
package.path = root .. "/spec/?.lua;" .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;"
    .. package.path
package.cpath = cpath .. ";" .. package.cpath

local zkcoord = require "zkcoord"

local now = zkcoord.now

local function usage(msg)
    if msg then
        io.stderr:write("soak.lua: ", msg, "\n")
    end
    io.stderr:write("usage: luajit bench/soak.lua [--seconds S] [--interval S] [--servers HOSTS]\n"
        .. "                             [--report FILE] [--quiet]\n")
    os.exit(2)
end

local opts = { seconds = 600, interval = 5, quiet = false }
do
    local i = 1
    while arg and i <= #arg do
        local a = arg[i]
        local function val()
            i = i + 1
            if arg[i] == nil then
                usage(a .. " needs a value")
            end
            return arg[i]
        end
        if a == "--seconds" then
            opts.seconds = tonumber(val()) or usage("--seconds needs a number")
        elseif a == "--interval" then
            opts.interval = tonumber(val()) or usage("--interval needs a number")
        elseif a == "--servers" then
            opts.servers = val()
        elseif a == "--report" then
            opts.report = val()
        elseif a == "--quiet" then
            opts.quiet = true
        elseif a == "-h" or a == "--help" then
            usage()
        else
            usage("unknown argument " .. a)
        end
        i = i + 1
    end
    if not (opts.seconds > 0 and opts.interval > 0) then
        usage("--seconds and --interval must be positive")
    end
end

local function say(...)
    if not opts.quiet then
        io.stdout:write(...)
        io.stdout:write("\n")
        io.stdout:flush()
    end
end

local function rss_kb()
    local f = io.open("/proc/self/status")
    local text = f and f:read("*a") or ""
    if f then f:close() end
    return tonumber(text:match("VmRSS:%s*(%d+)")) or 0
end

local asan = (os.getenv("LD_PRELOAD") or ""):find("asan", 1, true) ~= nil

-- ---------------------------------------------------------------------------
-- Server and namespace.

local server
local hosts = opts.servers or os.getenv("ZK_HOSTS")
if not hosts or hosts == "" then
    local zkserver = require "helpers.zkserver"
    local err
    server, err = zkserver.start({ tick_time = 500 })
    if not server then
        io.stderr:write("soak.lua: could not start ZooKeeper: ", tostring(err), "\n")
        os.exit(2)
    end
    hosts = server.hosts
end

local errors = {}          -- code -> count: every operation that failed
local nerrors = 0
local function failed(what, err)
    local k = what .. ":" .. tostring(err)
    errors[k] = (errors[k] or 0) + 1
    nerrors = nerrors + 1
end

local logged = 0
local function logger(level, msg)
    if level == "error" or level == "warn" then
        logged = logged + 1
        if logged <= 20 then
            io.stderr:write("soak: zkcoord [", level, "] ", msg, "\n")
        end
    end
end

local admin = assert(zkcoord.connect { servers = hosts, session_timeout = 10, logger = logger })
local ns = ("/soak-%d-%d"):format(os.time(), math.floor(now() * 1000) % 100000)
assert(admin:create(ns))

local worker = assert(zkcoord.connect { servers = hosts, chroot = ns, session_timeout = 10,
                                        logger = logger })
local setter = assert(zkcoord.connect { servers = hosts, chroot = ns, session_timeout = 10,
                                        logger = logger })

local lock = worker:lock("/lock")
local other_lock = setter:lock("/lock")
local counter = worker:counter("/counter")
assert(setter:create("/watched", "0"))

local deliveries = 0
local watch = assert(worker:watch("/watched", function() deliveries = deliveries + 1 end))

-- A raw one-shot watch, set again from its own callback.
local raw_fired = 0
local function rearm(ev)
    if ev then
        raw_fired = raw_fired + 1
    end
    local f = worker:send("get", "/watched", rearm)
    f:on_done(function(data, err)
        if data == nil then
            failed("raw watch get", err)
        end
    end)
end
rearm(nil)

-- ---------------------------------------------------------------------------
-- The loop.

local rounds, adds, contended, sets = 0, 0, 0, 0
local samples = {}
local t0 = now()
local deadline = t0 + opts.seconds
local next_sample = t0

local function sample()
    collectgarbage("collect")
    collectgarbage("collect")
    local s = { t = now() - t0, heap_kb = collectgarbage("count"), rss_kb = rss_kb(),
                rounds = rounds }
    samples[#samples + 1] = s
    say(("t=%7.1fs rounds=%-8d heap=%9.1f KiB rss=%7d KiB deliveries=%d raw=%d"):format(
        s.t, rounds, s.heap_kb, s.rss_kb, deliveries, raw_fired))
end

-- Bounded: the deadline, and a cap far above what the fastest machine does.
local MAX_ROUNDS = 1e8
while rounds < MAX_ROUNDS do
    local t = now()
    if t >= next_sample then
        sample()
        next_sample = next_sample + opts.interval
        if next_sample < t then
            next_sample = t + opts.interval
        end
    end
    if t >= deadline then
        break
    end
    rounds = rounds + 1

    if rounds % 10 == 0 then
        -- Contention: the other client holds the lock, the worker tries once.
        local ok, err = other_lock:acquire(5)
        if not ok then
            failed("other acquire", err)
        else
            local wok, werr = lock:acquire(0)
            if wok then
                failed("acquire(0) on a held lock", "granted")
                lock:release()
            elseif werr ~= "timeout" then
                failed("acquire(0)", werr)
            else
                contended = contended + 1
            end
            local rok, rerr = other_lock:release()
            if not rok then
                failed("other release", rerr)
            end
        end
    end

    local ok, err = lock:acquire(5)
    if not ok then
        failed("acquire", err)
    else
        local v, cerr = counter:add(1)
        if v then
            adds = adds + 1
            if v ~= adds then
                failed("counter value", ("%s, expected %d"):format(tostring(v), adds))
            end
        else
            failed("counter add", cerr)
        end
        local rok, rerr = lock:release()
        if not rok then
            failed("release", rerr)
        end
    end

    local st, serr = setter:set("/watched", tostring(rounds))
    if st then
        sets = sets + 1
    else
        failed("set", serr)
    end
    worker:dispatch(0)
end
local elapsed = now() - t0

-- Let the last events arrive, then check the end state.
worker:dispatch(0.2)
local final, ferr = counter:get()
if final ~= adds then
    failed("final counter", tostring(final) .. " " .. tostring(ferr) .. ", expected " .. adds)
end
-- No lock node may be left ("/lock" is a container: the server may have
-- removed it already, which says the same).
local left, lerr = worker:children("/lock")
if (left == nil and lerr ~= "nonode") or (left and #left ~= 0) then
    failed("lock nodes left", left and #left or lerr)
end
watch:cancel()
worker:remove_watches("/watched")

-- ---------------------------------------------------------------------------
-- Fit: least squares over the samples after the warm-up third.

local function fit(points, key)
    local n, sx, sy, sxx, sxy = 0, 0, 0, 0, 0
    for _, p in ipairs(points) do
        local x, y = p.t / 60, p[key]
        n = n + 1
        sx, sy, sxx, sxy = sx + x, sy + y, sxx + x * x, sxy + x * y
    end
    if n < 2 then
        return 0
    end
    local den = n * sxx - sx * sx
    if den == 0 then
        return 0
    end
    return (n * sxy - sx * sy) / den
end

local warm_until = elapsed / 3
local measured = {}
for _, s in ipairs(samples) do
    if s.t >= warm_until then
        measured[#measured + 1] = s
    end
end

local function figures(key)
    local first, last = measured[1], measured[#measured]
    local maxv, max_all = -math.huge, -math.huge
    for _, s in ipairs(measured) do maxv = math.max(maxv, s[key]) end
    for _, s in ipairs(samples) do max_all = math.max(max_all, s[key]) end
    local slope = fit(measured, key)
    local span = last and (last.t - first.t) / 60 or 0
    return {
        start = first and first[key], ["end"] = last and last[key],
        max = maxv, max_run = max_all, first_sample = samples[1] and samples[1][key],
        slope_per_min = slope, growth = slope * span,
    }
end

local HEAP_BOUND_KB, RSS_BOUND_KB = 1024, 5120
local heap = figures("heap_kb")
local rss = figures("rss_kb")
local enough = #measured >= 3
local heap_flat = enough and heap.growth < HEAP_BOUND_KB
local rss_flat = enough and rss.growth < RSS_BOUND_KB
local flat = heap_flat and (rss_flat or asan)

worker:close()
setter:close()
local ok_del = true
for _, p in ipairs({ ns .. "/watched", ns .. "/counter", ns .. "/lock", ns }) do
    local dok, derr = admin:delete(p)
    if not dok and derr ~= "nonode" then
        ok_del = false
    end
end
admin:close()
if server then
    server:destroy()
end

local result = {
    seconds = elapsed, warmup = warm_until, interval = opts.interval,
    rounds = rounds, adds = adds, final_counter = final, contended = contended,
    sets = sets, deliveries = deliveries, raw_fired = raw_fired,
    errors = nerrors, error_kinds = errors, logged = logged,
    samples = #samples, measured = #measured,
    heap = heap, rss = rss, asan = asan,
    heap_bound_kb = HEAP_BOUND_KB, rss_bound_kb = RSS_BOUND_KB,
    heap_flat = heap_flat, rss_flat = rss_flat, flat = flat, cleaned = ok_del,
}

local function fmt(f)
    return ("start %.1f, end %.1f, max %.1f (whole run %.1f) KiB; slope %+.2f KiB/min, "
            .. "growth %+.1f KiB"):format(f.start or 0, f["end"] or 0, f.max, f.max_run,
                                          f.slope_per_min, f.growth)
end

say(("soak: %.0f s, %d rounds (%.0f/s), %d adds, %d contended tries, %d sets, "
     .. "%d watch deliveries, %d raw watch events, %d errors"):format(
    elapsed, rounds, rounds / elapsed, adds, contended, sets, deliveries, raw_fired, nerrors))
for k, v in pairs(errors) do
    say("  error ", k, " x", tostring(v))
end
say(("heap (after full GC), from t=%.0f s: %s"):format(warm_until, fmt(heap)))
say(("rss, from t=%.0f s: %s%s"):format(warm_until, fmt(rss),
                                        asan and " (ASan: not judged)" or ""))
say(("flat: %s (heap growth < %d KiB: %s, RSS growth < %d KiB: %s)"):format(
    flat and "yes" or "NO", HEAP_BOUND_KB, tostring(heap_flat), RSS_BOUND_KB, tostring(rss_flat)))

-- A Lua literal of `result` (numbers, strings, booleans and tables).
local function serialize(v, indent)
    indent = indent or ""
    local t = type(v)
    if t == "table" then
        local keys = {}
        for k in pairs(v) do keys[#keys + 1] = k end
        table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
        local out = { "{\n" }
        for _, k in ipairs(keys) do
            out[#out + 1] = ("%s  [%q] = %s,\n"):format(indent, tostring(k),
                                                       serialize(v[k], indent .. "  "))
        end
        out[#out + 1] = indent .. "}"
        return table.concat(out)
    elseif t == "number" then
        if v ~= v or v == math.huge or v == -math.huge then
            return "0/0"
        end
        return ("%.17g"):format(v)
    elseif t == "string" then
        return ("%q"):format(v)
    end
    return tostring(v)
end

if opts.report then
    local f = assert(io.open(opts.report, "w"))
    f:write("return ", serialize(result), "\n")
    f:close()
end

collectgarbage()
collectgarbage()
io.stdout:write("done\n")
os.exit((flat and nerrors == 0) and 0 or 1)
