-- tools/soak.lua: a long run of the everyday work, watching memory.
--
--   luajit tools/soak.lua [--seconds S] [--interval S] [--servers HOSTS]
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
--
-- The work is tools/soak/work.lua, the memory verdict tools/soak/fit.lua.
local root = (arg and arg[0] or ""):match("^(.*)/tools/[^/]*$") or "."
package.path = root .. "/spec/?.lua;" .. package.path
local tool = require "helpers.tool"
tool.paths(root)

local zkcoord = require "zkcoord"
local options = require "helpers.options"
local luadata = require "helpers.luadata"
local proc = require "helpers.proc"
local work = require "soak.work"
local fit = require "soak.fit"

local now = zkcoord.now

local USAGE = "usage: luajit tools/soak.lua [--seconds S] [--interval S] [--servers HOSTS]\n"
    .. "                             [--report FILE] [--quiet]"
local opts = options.parse(arg, {
    name = "soak.lua", usage = USAGE,
    defaults = { seconds = 600, interval = 5, quiet = false },
    options = { ["--seconds"] = "number", ["--interval"] = "number", ["--servers"] = "string",
                ["--report"] = "string", ["--quiet"] = "flag" },
})
if not (opts.seconds > 0 and opts.interval > 0) then
    io.stderr:write("soak.lua: --seconds and --interval must be positive\n", USAGE, "\n")
    os.exit(2)
end

local function say(...)
    if not opts.quiet then
        io.stdout:write(...)
        io.stdout:write("\n")
        io.stdout:flush()
    end
end

local asan = (os.getenv("LD_PRELOAD") or ""):find("asan", 1, true) ~= nil

local hosts, server = tool.servers(opts.servers, "soak.lua")

local logged = 0
local function logger(level, msg)
    if level == "error" or level == "warn" then
        logged = logged + 1
        if logged <= 20 then
            io.stderr:write("soak: zkcoord [", level, "] ", msg, "\n")
        end
    end
end

local w = work.start(hosts, logger)

-- ---------------------------------------------------------------------------
-- The loop: a round of work, and every --interval seconds a sample.

local samples = {}
local t0 = now()
local deadline = t0 + opts.seconds
local next_sample = t0

local function sample()
    collectgarbage("collect")
    collectgarbage("collect")
    local s = { t = now() - t0, heap_kb = collectgarbage("count"), rss_kb = proc.rss_kb(),
                rounds = w.rounds }
    samples[#samples + 1] = s
    say(("t=%7.1fs rounds=%-8d heap=%9.1f KiB rss=%7d KiB deliveries=%d raw=%d"):format(
        s.t, w.rounds, s.heap_kb, s.rss_kb, w.deliveries, w.raw_fired))
end

-- Bounded: the deadline, and a cap far above what the fastest machine does.
local MAX_ROUNDS = 1e8
while w.rounds < MAX_ROUNDS do
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
    work.round(w)
end
local elapsed = now() - t0

local final = work.finish(w)
local v = fit.judge(samples, elapsed, asan)
local cleaned = work.close(w)
if server then
    server:destroy()
end

-- ---------------------------------------------------------------------------
-- The report.

local result = {
    seconds = elapsed, warmup = v.warmup, interval = opts.interval,
    rounds = w.rounds, adds = w.adds, final_counter = final, contended = w.contended,
    sets = w.sets, deliveries = w.deliveries, raw_fired = w.raw_fired,
    errors = w.nerrors, error_kinds = w.errors, logged = logged,
    samples = #samples, measured = v.measured,
    heap = v.heap, rss = v.rss, asan = asan,
    heap_bound_kb = fit.HEAP_BOUND_KB, rss_bound_kb = fit.RSS_BOUND_KB,
    heap_flat = v.heap_flat, rss_flat = v.rss_flat, flat = v.flat, cleaned = cleaned,
}

say(("soak: %.0f s, %d rounds (%.0f/s), %d adds, %d contended tries, %d sets, "
     .. "%d watch deliveries, %d raw watch events, %d errors"):format(
    elapsed, w.rounds, w.rounds / elapsed, w.adds, w.contended, w.sets, w.deliveries, w.raw_fired,
    w.nerrors))
for k, n in pairs(w.errors) do
    say("  error ", k, " x", tostring(n))
end
say(("heap (after full GC), from t=%.0f s: %s"):format(v.warmup, fit.format(v.heap)))
say(("rss, from t=%.0f s: %s%s"):format(v.warmup, fit.format(v.rss),
                                        asan and " (ASan: not judged)" or ""))
say(("flat: %s (heap growth < %d KiB: %s, RSS growth < %d KiB: %s)"):format(
    v.flat and "yes" or "NO", fit.HEAP_BOUND_KB, tostring(v.heap_flat), fit.RSS_BOUND_KB,
    tostring(v.rss_flat)))

if opts.report then
    luadata.write(opts.report, result)
end

collectgarbage()
collectgarbage()
io.stdout:write("done\n")
os.exit((v.flat and w.nerrors == 0) and 0 or 1)
