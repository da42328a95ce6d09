-- bench/scale.lua: how each library's costs grow with the size of the
-- problem: zkcoord, kazoo and Curator, measured in one run on one server.
--
--   luajit bench/scale.lua all|lock|locks|watches [--doc] [--libs zkcoord,kazoo,curator]
--       [--waiters 1,16,64,256,1000] [--sessions 16] [--seconds 5] [--rounds 1]
--       [--locks 10000] [--watches 1000,10000,100000] [--bound 180]
--
-- Starts its own standalone ZooKeeper (spec/helpers/zkserver: 127.0.0.1,
-- forceSync=no, maxClientCnxns=0, full JIT), builds the peers, and runs
-- every curve for every library on that server, the libraries in turn
-- (the order rotates from one size to the next):
--
-- lock: W waiters on one lock, in one process, spread over
-- S = min(W, --sessions) sessions (zkcoord: coroutines on sessions polled
-- together, bench/pollwait.lua; kazoo and Curator: threads); every one
-- re-queues at once, so the line stays W long. Once the line has formed
-- (W nodes under the lock) and 0.5 s more, --seconds are measured: handoffs/s and the handoff latency (the
-- holder's release call to the next grant) p50/p99. Beside it, the time
-- of one listing of W children (what every wake-up of the lock costs the
-- server and the client), measured with zkcoord.
-- locks: one session holds --locks locks (zkcoord with on_lost): client
-- memory per held lock, and how long after the session's expiry the
-- library reports the loss (zkcoord: every lock's on_lost; Curator: the
-- ConnectionState LOST listener; kazoo: the LOST state listener).
-- watches: N watches on one client (zkcoord `client:watch`, kazoo
-- `DataWatch`, Curator a `CuratorCache` per node): memory per watch,
-- delivery latency p50/p99 of one change (200 changes on random nodes, set
-- by a second session), and the time after an expiry until the server
-- holds as many watches as before.
--
-- Every peer run is bounded (--bound seconds for each of its waits, plus a
-- setup allowance); one that does not finish is recorded as such. --doc
-- rewrites the Scale section of docs/PERFORMANCE.md (between
-- <!-- scale:begin --> and <!-- scale:end -->; with one curve, the section
-- holds that curve only) and docs/scale-lock.png,
-- docs/scale-watches.png; the results go to bench/results/scale.json.
local root = (arg[0]:match("^(.*)/bench/[^/]*$") or ".")
if root:sub(1, 1) ~= "/" then
    local pwd = os.getenv("PWD") or io.popen("pwd"):read("*l")
    root = root == "." and pwd or (pwd .. "/" .. root)
end
package.path = root .. "/spec/?.lua;" .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;"
    .. root .. "/bench/?.lua;" .. package.path
package.cpath = root .. "/" .. (os.getenv("ZKCOORD_CPATH") or "lua/?.so") .. ";" .. package.cpath

local zkcoord = require "zkcoord"
local proc = require "helpers.proc"
local zkserver = require "helpers.zkserver"
local peerlib = require "peerlib"

local now = zkcoord.now
local sh, shquote, trim = peerlib.sh, peerlib.shquote, peerlib.trim

local options = require "helpers.options"
local CURVES = { all = { "lock", "locks", "watches" }, lock = { "lock" }, locks = { "locks" },
                 watches = { "watches" } }
local SPEC = {
    name = "scale.lua",
    usage = "usage: luajit bench/scale.lua all|lock|locks|watches [--doc] [--libs zkcoord,kazoo,curator]\n"
        .. "    [--waiters 1,16,64,256,1000] [--sessions 16] [--seconds 5] [--rounds 1]\n"
        .. "    [--locks 10000] [--watches 1000,10000,100000] [--bound 180]",
    status = 64,
    positional = 1,
    defaults = { waiters = { 1, 16, 64, 256, 1000 }, sessions = 16, seconds = 5, rounds = 1,
                 locks = 10000, watches = { 1000, 10000, 100000 }, bound = 180,
                 libs = "zkcoord,kazoo,curator", doc = false },
    options = {
        ["--doc"] = "flag",
        ["--libs"] = "string",
        ["--waiters"] = options.numbers,
        ["--watches"] = options.numbers,
        ["--sessions"] = "number",
        ["--seconds"] = "number",
        ["--rounds"] = "number",
        ["--locks"] = "number",
        ["--bound"] = "number",
    },
}
local opts, rest = options.parse(arg, SPEC)
local what = rest[1]
if not CURVES[what] then
    options.fail(SPEC, what and ("unknown curve " .. what) or "which curve: all, lock, locks or watches?")
end

local function log(fmt, ...)
    io.stderr:write(("[scale %s] "):format(os.date("%H:%M:%S")), fmt:format(...), "\n")
end

local function median(t)
    local s = {}
    for _, v in ipairs(t) do s[#s + 1] = v end
    if #s == 0 then return nil end
    table.sort(s)
    local n = #s
    return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end

-- ---------------------------------------------------------------------------
-- Libraries and the server.

local libs = {}
do
    local want = {}
    for k in opts.libs:gmatch("[^,%s]+") do want[k] = true end
    for _, l in ipairs(peerlib.libs(root, arg[-1] or "luajit")) do
        if want[l.key] and l.key ~= "raw" then
            local ok, err = l.build()
            if ok then
                libs[#libs + 1] = l
            else
                log("skipping %s: %s", l.key, err)
            end
        end
    end
end
if #libs == 0 then
    io.stderr:write("scale.lua: no library to run\n")
    os.exit(1)
end

local load_before = peerlib.loadavg()
local started_at = os.date("!%Y-%m-%d %H:%M")
local t_start = now()
local srv = assert(zkserver.start { log_level = "WARN",
                                    jvm_flags = { "-XX:TieredStopAtLevel=4", "-Xmx2g" } })
local hosts = srv.hosts
log("ZooKeeper at %s; libraries: %s", hosts, opts.libs)

local function quiet(level, msg)
    if level == "error" then io.stderr:write("zkcoord [error] ", msg, "\n") end
end
local admin = assert(zkcoord.connect { servers = hosts, logger = quiet, session_timeout = 30 })

local started = {}

--- Runs one peer; returns its key=value line as a table, or nil and why.
--- `limit`: seconds before the run is killed and recorded as not finished.
local function run_peer(lib, scen, path, secs, extra, limit)
    local dir = assert(proc.mktemp_dir("zkcoord-scale-"))
    local argv = lib.argv(scen, hosts, path, ("%g"):format(secs), tostring(extra), "scale")
    local pid = assert(proc.spawn(argv, { stdout = dir .. "/out", stderr = dir .. "/err",
                                          owner = true, cwd = root }))
    started[pid] = true
    local t0 = now()
    local finished = proc.wait_exit(pid, limit)
    if not finished then
        proc.kill(pid, "KILL")
        proc.wait_exit(pid, 5)
    end
    started[pid] = nil
    local out = proc.read_file(dir .. "/out") or ""
    local err = trim(proc.read_file(dir .. "/err") or ""):sub(-400)
    proc.rm_rf(dir)
    if not finished then
        return nil, ("did not finish in %.0f s"):format(now() - t0)
    end
    local line
    for l in out:gmatch("[^\n]+") do
        if l:find("=") then line = l end
    end
    if not line then
        return nil, "no result" .. (err ~= "" and (": " .. err:gsub("%s+", " ")) or "")
    end
    local r = {}
    for k, v in line:gmatch("([%w_]+)=(%S+)") do r[k] = tonumber(v) or v end
    if r.error then
        return nil, "error " .. tostring(r.error)
    end
    return r
end

local function rotated(round)
    local order = {}
    for i = 1, #libs do order[i] = libs[(i + round - 2) % #libs + 1] end
    return order
end

local results = { lock = {}, locks = {}, watches = {}, listing = {} }
local SETUP = 120      -- seconds a peer may take to connect and start its contenders

-- ---------------------------------------------------------------------------
-- Curves.

local function pct(sorted, p)
    if #sorted == 0 then return 0 end
    return sorted[math.floor(p * (#sorted - 1) + 0.5) + 1]
end

-- One listing of w children, p50 over 50 calls: what each wake-up costs.
local function listing(w)
    local path = ("/scale/list-%d"):format(w)
    assert(admin:create(path, nil, { parents = true }))
    local fs = {}
    for k = 1, w do
        fs[#fs + 1] = admin:send("create", path .. "/_c_00000000-0000-0000-0000-000000000000-lock-",
                                 nil, { sequential = true })
        if #fs == 1000 or k == w then
            for _, f in ipairs(fs) do assert(f:wait(30)) end
            fs = {}
        end
    end
    local lat = {}
    for _ = 1, 50 do
        local t = now()
        assert(admin:children(path))
        lat[#lat + 1] = now() - t
    end
    table.sort(lat)
    return pct(lat, 0.5) * 1000
end

local function curve_lock()
    local sizes = opts.waiters
    for round = 1, opts.rounds do
        for i, w in ipairs(sizes) do
            local s = math.min(w, opts.sessions)
            for _, lib in ipairs(rotated(round + i - 1)) do
                local path = ("/scale/lock-%d-%s-r%d"):format(w, lib.key, round)
                local r, err = run_peer(lib, "scale_lock", path, opts.seconds, w .. "," .. s,
                                        SETUP + opts.seconds + 30)
                results.lock[w] = results.lock[w] or {}
                local rl = results.lock[w][lib.key] or { runs = {}, sessions = s }
                results.lock[w][lib.key] = rl
                if r then
                    rl.runs[#rl.runs + 1] = r
                    log("lock %4d waiters %-8s %6.0f/s p50 %.2f ms p99 %.2f ms (setup %.1f s)", w,
                        lib.key, r.rate, r.p50_ms, r.p99_ms, r.setup_s or 0)
                else
                    rl.err = err
                    log("lock %4d waiters %-8s %s", w, lib.key, err)
                end
            end
        end
    end
    for _, w in ipairs(sizes) do
        results.listing[w] = listing(w)
        for _, rl in pairs(results.lock[w] or {}) do
            local rates, p50, p99 = {}, {}, {}
            for _, r in ipairs(rl.runs) do
                rates[#rates + 1], p50[#p50 + 1], p99[#p99 + 1] = r.rate, r.p50_ms, r.p99_ms
            end
            rl.rate, rl.p50_ms, rl.p99_ms = median(rates), median(p50), median(p99)
        end
    end
end

local function curve_locks()
    local n = opts.locks
    for i, lib in ipairs(rotated(1)) do
        local path = ("/scale/locks-%s-%d"):format(lib.key, i)
        local r, err = run_peer(lib, "scale_locks", path, opts.bound, n, 2 * opts.bound + SETUP)
        results.locks[lib.key] = r or { err = err }
        if r then
            log("locks %d %-8s held %d in %.1f s, %.0f B/lock heap, loss reported %.3f s after",
                n, lib.key, r.held, r.acquire_s, r.heap_per_lock, r.lost_s)
        else
            log("locks %d %-8s %s", n, lib.key, err)
        end
    end
end

local function curve_watches()
    for i, n in ipairs(opts.watches) do
        local dir = ("/scale/watch-%d"):format(n)
        assert(admin:create(dir, nil, { parents = true }))
        local fs = {}
        local t0 = now()
        for k = 1, n do
            fs[#fs + 1] = admin:send("create", ("%s/n%d"):format(dir, k), "0")
            if #fs == 1000 or k == n then
                for _, f in ipairs(fs) do assert(f:wait(60)) end
                fs = {}
            end
        end
        log("watches: %d nodes made in %.1f s", n, now() - t0)
        results.watches[n] = {}
        for _, lib in ipairs(rotated(i)) do
            local r, err = run_peer(lib, "scale_watches", dir, opts.bound, n, 3 * opts.bound + SETUP)
            results.watches[n][lib.key] = r or { err = err }
            -- A re-arm counted within 50 ms of the expiry is the server not
            -- having dropped the old session's watches yet when first asked
            -- (seen with Curator), not a re-arm: not measured.
            if r and not r.dnf and r.rearm_s and r.rearm_s >= 0 and r.rearm_s < 0.05 then
                r.rearm_s = -2
            end
            if r and r.dnf then
                results.watches[n][lib.key] = { err = ("armed %d of %d watches in %.0f s (the bound)")
                                                      :format(r.armed, n, r.secs) }
                log("watches %d %-8s %s", n, lib.key, results.watches[n][lib.key].err)
            elseif r then
                log("watches %d %-8s armed %.1f s, %.0f B/watch, p50 %.2f p99 %.2f ms, re-armed %.2f s",
                    n, lib.key, r.arm_s, r.heap_per_watch, r.p50_ms, r.p99_ms, r.rearm_s)
            else
                log("watches %d %-8s %s", n, lib.key, err)
            end
        end
    end
end

local ok, err = xpcall(function()
    for _, c in ipairs(CURVES[what]) do
        if c == "lock" then curve_lock()
        elseif c == "locks" then curve_locks()
        else curve_watches() end
    end
end, debug.traceback)
for pid in pairs(started) do
    proc.kill(pid, "KILL")
end
admin:close()
srv:destroy()
if not ok then
    io.stderr:write("scale.lua: ", tostring(err), "\n")
    os.exit(1)
end
local secs = now() - t_start
local load_after = peerlib.loadavg()

-- ---------------------------------------------------------------------------
-- Tables.

local TOPOLOGY = {
    zkcoord = "coroutines of one LuaJIT process, on sessions polled together (bench/pollwait.lua)",
    kazoo = "threads of one Python process, a `Lock` each",
    curator = "threads of one JVM, an `InterProcessMutex` each",
}

local function fmt(v, f)
    if v == nil or v == -1 then return "—" end
    return (f or "%.0f"):format(v)
end

local function lock_table()
    local sizes = opts.waiters
    local head = { "waiters", "sessions" }
    for _, l in ipairs(libs) do head[#head + 1] = l.name .. " handoffs/s" end
    for _, l in ipairs(libs) do head[#head + 1] = l.name .. " p50 / p99 (ms)" end
    for _, l in ipairs(libs) do head[#head + 1] = l.name .. " line formed (s)" end
    head[#head + 1] = "one listing of W children, p50 (ms)"
    local lines = { "| " .. table.concat(head, " | ") .. " |", "|" .. ("---|"):rep(#head) }
    for _, w in ipairs(sizes) do
        local cells = { tostring(w), tostring(math.min(w, opts.sessions)) }
        for _, l in ipairs(libs) do
            local rl = results.lock[w] and results.lock[w][l.key]
            cells[#cells + 1] = rl and rl.rate and fmt(rl.rate) or (rl and rl.err or "—")
        end
        for _, l in ipairs(libs) do
            local rl = results.lock[w] and results.lock[w][l.key]
            cells[#cells + 1] = rl and rl.p50_ms and (fmt(rl.p50_ms, "%.2f") .. " / "
                                                      .. fmt(rl.p99_ms, "%.2f")) or "—"
        end
        for _, l in ipairs(libs) do
            local rl = results.lock[w] and results.lock[w][l.key]
            local r1 = rl and rl.runs[1]
            cells[#cells + 1] = r1 and (r1.line_s >= 0 and ("%.1f"):format(r1.line_s)
                                        or "not in 90") or "—"
        end
        cells[#cells + 1] = fmt(results.listing[w], "%.2f")
        lines[#lines + 1] = "| " .. table.concat(cells, " | ") .. " |"
    end
    return table.concat(lines, "\n")
end

local LOSS = { zkcoord = "every lock's `on_lost` ran", kazoo = "state listener: LOST",
               curator = "ConnectionState LOST listener" }
local HEAP = { zkcoord = "Lua heap", kazoo = "tracemalloc", curator = "JVM heap after GC" }

local function locks_table()
    local lines = { "| library | held | acquired in | memory per held lock | RSS per held lock"
                    .. " | loss reported after the expiry | how |", "|---|---|---|---|---|---|---|" }
    for _, l in ipairs(libs) do
        local r = results.locks[l.key]
        if r and not r.err then
            lines[#lines + 1] = ("| %s | %d of %d | %.1f s (%d workers) | %s B (%s) | %s B | %s | %s |")
                :format(l.name, r.held, r["of"], r.acquire_s, r.workers, fmt(r.heap_per_lock),
                        HEAP[l.key], fmt(r.rss_per_lock), r.lost_s >= 0
                        and ("%.3f s"):format(r.lost_s) or ("not within %d s"):format(opts.bound),
                        LOSS[l.key])
        elseif r then
            lines[#lines + 1] = ("| %s | %s | | | | | |"):format(l.name, r.err)
        end
    end
    return table.concat(lines, "\n")
end

local WATCH = { zkcoord = "`client:watch` (kind data)", kazoo = "`DataWatch`",
                curator = "`CuratorCache` (SINGLE_NODE_CACHE) per node" }

local function watches_table()
    local lines = { "| watches | library | armed in | memory per watch | RSS per watch | change p50"
                    .. " | change p99 | re-armed after an expiry |",
                    "|---|---|---|---|---|---|---|---|" }
    for _, n in ipairs(opts.watches) do
        for _, l in ipairs(libs) do
            local r = results.watches[n] and results.watches[n][l.key]
            if r and not r.err then
                local rearm = r.rearm_s >= 0 and ("%.2f s"):format(r.rearm_s)
                    or r.rearm_s == -2 and "not measured (the count had not dropped)"
                    or ("not within %d s"):format(opts.bound)
                if r.redelivered_s and r.redelivered_s >= 0 then
                    rearm = rearm .. (" (every function ran again: %.2f s)"):format(r.redelivered_s)
                end
                lines[#lines + 1] = ("| %d | %s | %.2f s | %s B (%s) | %s B | %.2f ms | %.2f ms | %s |")
                    :format(n, l.name, r.arm_s, fmt(r.heap_per_watch), HEAP[l.key],
                            fmt(r.rss_per_watch), r.p50_ms, r.p99_ms, rearm)
            elseif r then
                lines[#lines + 1] = ("| %d | %s | %s | | | | | |"):format(n, l.name, r.err)
            end
        end
    end
    return table.concat(lines, "\n")
end

-- Where a cost stops being flat: the first size whose cost is more than
-- 1.5x the cost at the first size `from` on (nil: flat throughout).
local function knee(sizes, cost, from)
    local base
    for _, n in ipairs(sizes) do
        local c = cost(n)
        if n >= from and c then
            if not base then
                base = c
            elseif c > 1.5 * base then
                return n, base, c
            end
        end
    end
    return nil, base
end

local function knees()
    local out = {}
    local sizes = opts.waiters
    for _, l in ipairs(libs) do
        local n, a, b = knee(sizes, function(w)
            local rl = results.lock[w] and results.lock[w][l.key]
            return rl and rl.rate and rl.rate > 0 and 1000 / rl.rate or nil
        end, 16)
        out[#out + 1] = n and ("- lock, %s: time per handoff flat from 16 waiters until %d, where"
                               .. " it is %.1fx (%.2f ms against %.2f ms)."):format(l.name, n, b / a, b, a)
            or ("- lock, %s: time per handoff within 1.5x of the 16-waiter figure at every size"
                .. " measured."):format(l.name)
    end
    local ws = opts.watches
    for _, l in ipairs(libs) do
        for _, m in ipairs({ { "heap_per_watch", "memory per watch", "%.0f B" },
                             { "p50_ms", "change p50", "%.2f ms" },
                             { "rearm_per", "re-arm time per watch", "%.3f ms" } }) do
            local n, a, b = knee(ws, function(x)
                local r = results.watches[x] and results.watches[x][l.key]
                if not r or r.err then return nil end
                if m[1] == "rearm_per" then
                    return r.rearm_s and r.rearm_s >= 0 and 1000 * r.rearm_s / x or nil
                end
                return r[m[1]]
            end, 0)
            if a then
                out[#out + 1] = n and ("- watches, %s: %s flat until %d, where it is %.1fx ("
                                       .. m[3] .. " against " .. m[3] .. ")."):format(
                                           l.name, m[2], n, b / a, b, a)
                    or ("- watches, %s: %s within 1.5x at every size measured."):format(l.name, m[2])
            end
        end
    end
    return table.concat(out, "\n")
end

-- ---------------------------------------------------------------------------
-- Plots.

local COLORS = { zkcoord = "#1b7837", kazoo = "#2166ac", curator = "#b2182b" }

local function gnuplot(name, script)
    local gp = root .. "/bench/results/" .. name .. ".gp"
    assert(proc.write_file(gp, script))
    local out, okp = sh("gnuplot " .. shquote(gp))
    if not okp then
        log("gnuplot failed for %s: %s", name, out)
    end
    return okp
end

local function plot_lock()
    local dat = root .. "/bench/results/scale-lock.dat"
    local rows = {}
    for _, w in ipairs(opts.waiters) do
        local cells = { tostring(w) }
        for _, l in ipairs(libs) do
            local rl = results.lock[w] and results.lock[w][l.key]
            for _, k in ipairs({ "rate", "p50_ms", "p99_ms" }) do
                cells[#cells + 1] = rl and rl[k] and ("%.4f"):format(rl[k]) or "NaN"
            end
        end
        rows[#rows + 1] = table.concat(cells, " ")
    end
    assert(proc.write_file(dat, table.concat(rows, "\n") .. "\n"))
    local p1, p2 = {}, {}
    for i, l in ipairs(libs) do
        local base = 1 + (i - 1) * 3
        p1[#p1 + 1] = ("'%s' using 1:%d with linespoints lw 2 pt 7 lc rgb '%s' title '%s'")
            :format(dat, base + 1, COLORS[l.key], l.name)
        p2[#p2 + 1] = ("'%s' using 1:%d with linespoints lw 2 pt 7 lc rgb '%s' title '%s p50'")
            :format(dat, base + 2, COLORS[l.key], l.name)
        p2[#p2 + 1] = ("'%s' using 1:%d with linespoints lw 1 dt 2 pt 6 lc rgb '%s' title '%s p99'")
            :format(dat, base + 3, COLORS[l.key], l.name)
    end
    return gnuplot("scale-lock", table.concat({
        "set terminal pngcairo size 1100,440 font 'sans,10'",
        "set output '" .. root .. "/docs/scale-lock.png'",
        "set multiplot layout 1,2",
        "set logscale x",
        "set grid",
        "set xlabel 'waiters on one lock'",
        "set key top right",
        "set title 'handoffs per second'",
        "set yrange [0:*]",
        "plot " .. table.concat(p1, ", "),
        "set title 'handoff latency (ms, log scale)'",
        "set logscale y",
        "set yrange [*:*]",
        "set key top left",
        "plot " .. table.concat(p2, ", "),
        "unset multiplot", "" }, "\n"))
end

local function plot_watches()
    local dat = root .. "/bench/results/scale-watches.dat"
    local rows = {}
    for _, n in ipairs(opts.watches) do
        local cells = { tostring(n) }
        for _, l in ipairs(libs) do
            local r = results.watches[n] and results.watches[n][l.key]
            local ok_r = r and not r.err
            cells[#cells + 1] = ok_r and ("%.1f"):format(r.heap_per_watch) or "NaN"
            cells[#cells + 1] = ok_r and ("%.4f"):format(r.p50_ms) or "NaN"
            cells[#cells + 1] = ok_r and ("%.4f"):format(r.p99_ms) or "NaN"
            cells[#cells + 1] = ok_r and r.rearm_s >= 0 and ("%.4f"):format(1000 * r.rearm_s / n) or "NaN"
        end
        rows[#rows + 1] = table.concat(cells, " ")
    end
    assert(proc.write_file(dat, table.concat(rows, "\n") .. "\n"))
    local pm, pl, pr = {}, {}, {}
    for i, l in ipairs(libs) do
        local b = 1 + (i - 1) * 4
        local style = "with linespoints lw 2 pt 7 lc rgb '" .. COLORS[l.key] .. "'"
        pm[#pm + 1] = ("'%s' using 1:%d %s title '%s'"):format(dat, b + 1, style, l.name)
        pl[#pl + 1] = ("'%s' using 1:%d %s title '%s p50'"):format(dat, b + 2, style, l.name)
        pl[#pl + 1] = ("'%s' using 1:%d with linespoints lw 1 dt 2 pt 6 lc rgb '%s' title '%s p99'")
            :format(dat, b + 3, COLORS[l.key], l.name)
        pr[#pr + 1] = ("'%s' using 1:%d %s title '%s'"):format(dat, b + 4, style, l.name)
    end
    return gnuplot("scale-watches", table.concat({
        "set terminal pngcairo size 1300,420 font 'sans,10'",
        "set output '" .. root .. "/docs/scale-watches.png'",
        "set multiplot layout 1,3",
        "set logscale x",
        "set grid",
        "set xlabel 'watches on one client'",
        "set key top left",
        "set title 'memory per watch (bytes; Lua heap, tracemalloc, JVM heap)'",
        "set yrange [0:*]",
        "plot " .. table.concat(pm, ", "),
        "set title 'one change delivered (ms, log scale)'",
        "set logscale y",
        "set yrange [*:*]",
        "plot " .. table.concat(pl, ", "),
        "set title 're-arm after an expiry, per watch (ms, log scale)'",
        "plot " .. table.concat(pr, ", "),
        "unset multiplot", "" }, "\n"))
end

-- ---------------------------------------------------------------------------
-- Output.

local function version_facts()
    local kz = trim(sh(shquote(peerlib.python()) .. " -c 'import kazoo.version, sys; "
        .. "print(kazoo.version.__version__, sys.version.split()[0])'"))
    local java = trim((sh("java -version"):match("[^\n]*version[^\n]*") or "?"))
    local cpu = trim((proc.read_file("/proc/cpuinfo") or ""):match("model name%s*:%s*([^\n]+)") or "?")
    return kz, java, cpu
end

local sections = {}
local has = {}
for _, c in ipairs(CURVES[what]) do has[c] = true end
if has.lock then
    sections[#sections + 1] = table.concat({
        ("**One lock, W waiters** (one process per library, W contenders on S = min(W, %d)"
         .. " sessions, contender k on session k mod S: zkcoord %s; kazoo %s; Curator %s."
         .. " Every one re-queues at once, so the line stays W long. %g s measured from 0.5 s after"
         .. " the line formed (W nodes under the lock); handoff = the holder's release call to the"
         .. " next grant. \"line formed\": seconds from the start until then.)")
            :format(opts.sessions, TOPOLOGY.zkcoord, TOPOLOGY.kazoo, TOPOLOGY.curator, opts.seconds),
        "", lock_table() }, "\n")
end
if has.locks then
    sections[#sections + 1] = table.concat({
        ("**%d locks held by one session** (each lock on its own path; acquired by workers"
         .. " of the one session in turn: zkcoord coroutines with `on_lost` registered, kazoo and"
         .. " Curator threads; then the session is expired by a second handle that joins it and"
         .. " closes it, and the time runs from the moment the close is sent):"):format(opts.locks),
        "", locks_table() }, "\n")
end
if has.watches then
    sections[#sections + 1] = table.concat({
        "**Watches on one client** (zkcoord " .. WATCH.zkcoord .. ", kazoo " .. WATCH.kazoo
            .. ", Curator " .. WATCH.curator .. ": the form a Curator 5 user would pick to follow a"
            .. " node's data; it holds a persistent watch, so it is never re-armed per change. One"
            .. " change = `set` on a second session of the same process until the callback saw"
            .. " the value, 200 changes on random nodes. Re-armed: from the expiry until the"
            .. " server's watch count (four-letter word `wchs`) is back where it was before it;"
            .. " zkcoord's watches also call their functions again, kazoo's `DataWatch` does not"
            .. " when the data did not change, Curator's listener does not.)",
        "", watches_table() }, "\n")
end
local knee_text = knees()
local kz, java, cpu = version_facts()
local body = table.concat({
    "<!-- scale:begin -->",
    "## Scale: how the costs grow, zkcoord, kazoo and Curator",
    "",
    ("Command: `luajit bench/scale.lua %s --doc` (starts its own standalone ZooKeeper on 127.0.0.1,"
     .. " forceSync=no, maxClientCnxns=0, full JIT; every curve for every library on that one"
     .. " server, the libraries in turn, their order rotating from one size to the next; %d"
     .. " round(s), each wait of a peer bounded by %d s)."):format(what, opts.rounds, opts.bound),
    ("Measured %s on %s, 2 cores shared with other work. Load average before: %s; after: %s."
     .. " The run took %.0f s. kazoo %s (Python %s); Curator 5.4.0 on %s.")
        :format(started_at .. "-" .. os.date("!%H:%M UTC"), cpu, load_before, load_after, secs,
                kz:match("^(%S+)") or "?", kz:match("%S+%s+(%S+)") or "?", java),
    "",
    has.lock and "![Lock handoffs and latency against the number of waiters](scale-lock.png)\n" or "",
    table.concat(sections, "\n\n"),
    "",
    has.watches and "\n![Watches: memory, delivery, re-arm](scale-watches.png)\n" or "",
    "Where each cost stops being flat (computed: the first size whose cost is more than 1.5x"
        .. " the first size's; for the lock, from 16 waiters on, the 1-waiter row being one"
        .. " contender re-acquiring its own lock):",
    "",
    knee_text,
    "<!-- scale:end -->",
}, "\n")

print(body)
assert(proc.mkdir_p(root .. "/bench/results"))
local function flat(t)
    local o = {}
    for k, v in pairs(t) do
        o[tostring(k)] = type(v) == "table" and flat(v) or v
    end
    return o
end
do
    local parts = {}
    local function enc(v, ind)
        if type(v) == "table" then
            local keys = {}
            for k in pairs(v) do keys[#keys + 1] = k end
            table.sort(keys)
            local items = {}
            for _, k in ipairs(keys) do
                items[#items + 1] = ind .. "  " .. ("%q"):format(k) .. ": " .. enc(v[k], ind .. "  ")
            end
            return "{\n" .. table.concat(items, ",\n") .. "\n" .. ind .. "}"
        elseif type(v) == "number" then
            return ("%.6g"):format(v)
        end
        return ("%q"):format(tostring(v))
    end
    parts[1] = enc(flat({ results = results, load_before = load_before, load_after = load_after,
                          seconds = secs, options = opts }), "")
    assert(proc.write_file(root .. "/bench/results/scale.json", parts[1] .. "\n"))
end

if opts.doc then
    local plotted_lock = has.lock and plot_lock()
    local plotted_watch = has.watches and plot_watches()
    log("plots: lock %s, watches %s", tostring(plotted_lock), tostring(plotted_watch))
    local doc = root .. "/docs/PERFORMANCE.md"
    local text = assert(proc.read_file(doc))
    if text:find("<!%-%- scale:begin %-%->") then
        text = text:gsub("<!%-%- scale:begin %-%->.-<!%-%- scale:end %-%->", function() return body end)
    elseif text:find("\n## Scale: how zkcoord's costs grow", 1, true) then
        local a = text:find("\n## Scale: how zkcoord's costs grow", 1, true)
        text = text:sub(1, a) .. body .. "\n"
    else
        text = text:gsub("\n*$", "\n") .. "\n" .. body .. "\n"
    end
    assert(proc.write_file(doc, text))
    log("wrote docs/PERFORMANCE.md")
end
