-- bench/ngx.lua: the nginx waiter, doorbell pump vs polling fallback; and
-- how one worker holds up with thousands of waiting requests.
--   luajit bench/ngx.lua [--doc] [--idle SECONDS]
--   luajit bench/ngx.lua scale [--doc] [--counts 1000,10000] [--window SECONDS]
--                              [--only park,xlock,xlock_cohort,rlock] [--rss-cap MB]
-- Starts its own ZooKeeper and two private nginx instances (2 workers
-- each) with the same handlers: one with the doorbell pump (sock_dir
-- /tmp), one forced onto the polling fallback (sock_dir /nonexistent).
-- Measures, side by side: idle worker CPU (both idle over the same
-- window), lock handoff latency (two requests ping-ponging a lock),
-- get() round trip inside a worker, /ping latency idle and while 200
-- requests wait on a held lock, and the workers' CPU during that wait.
-- Prints a markdown table; --doc also writes it into docs/PERFORMANCE.md
-- between <!-- ngx:begin --> and <!-- ngx:end -->.
--
-- scale: one nginx with ONE worker (doorbell pump); N requests (each on
-- its own connection) wait in it, in three shapes: in ngx.sleep (nginx's
-- own cost of a waiting request, the baseline), on one exclusive lock held
-- by this process (each granted request releases at once: the release
-- starts N handoffs; xlock_cohort: the same lock with `cohort = true`, the
-- worker's requests share one node and hand it on locally), and on read
-- locks behind one write lock held by this process (the release admits
-- them all at once). For each: worker RSS and
-- Lua heap before and while they wait, worker CPU over a fixed window while
-- they wait, the cost of one tick of the waiter's ticker (the timer that
-- looks for ended requests), /ping p50/p99 meanwhile, and the time from the
-- release until every request answered. --doc writes the section between
-- <!-- ngx-scale:begin --> and <!-- ngx-scale:end -->. --only runs those
-- shapes (park, xlock, xlock_cohort, rlock); --rss-cap (default 1000 MB) stops the
-- queueing once the worker's RSS passes it.
package.path = "spec/?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("ZKCOORD_CPATH") or "lua/?.so") .. ";" .. package.cpath

local zkserver = require "helpers.zkserver"
local nginx = require "helpers.nginx"
local proc = require "helpers.proc"
local zkcoord = require "zkcoord"

local options = require "helpers.options"

-- "xlock,rlock" -> { xlock = true, rlock = true }: the shapes of scale to run.
local function shape_set(text)
    local set = {}
    for v in text:gmatch("[^,]+") do
        if v ~= "park" and v ~= "xlock" and v ~= "xlock_cohort" and v ~= "rlock" then
            return nil, "takes park, xlock, xlock_cohort, rlock"
        end
        set[v] = true
    end
    return set
end

-- The first argument picks the mode, and each mode takes its own options.
local scale_mode = arg[1] == "scale"
local opts = options.parse(scale_mode and { unpack(arg, 2) } or arg, {
    name = "ngx.lua",
    usage = "usage: luajit bench/ngx.lua [--doc] [--idle SECONDS]\n"
        .. "       luajit bench/ngx.lua scale [--doc] [--counts 1000,10000] [--window SECONDS]"
        .. " [--only park,xlock,xlock_cohort,rlock] [--rss-cap MB]",
    status = 64,
    defaults = { doc = false, idle = 10, counts = { 1000, 10000 }, window = 10, rss_cap = 1000 },
    options = scale_mode and {
        ["--doc"] = "flag",
        ["--counts"] = options.numbers,
        ["--window"] = "number",
        ["--only"] = shape_set,
        ["--rss-cap"] = "number",
    } or {
        ["--doc"] = "flag",
        ["--idle"] = "number",
    },
})
local write_doc, idle_secs = opts.doc, opts.idle
local counts, window, only = opts.counts, opts.window, opts.only
local RSS_CAP_MB = opts.rss_cap -- scale: the worker may grow to this while they queue (shared machine)

local ROUNDS = 2          -- interleaved rounds of the latency measurements
local HANDOFF_ROUNDS = 60 -- per request, two requests: ~120 handoffs per round
local PINGS = 300
local WAITERS = 200
local WAIT_CPU_SECS = 3   -- per round: workers' CPU with WAITERS requests waiting, no traffic

local APP = [==[
local zn = require "zkcoord.ngx"
local now = require("zkcoord").now
local ROOT = "@ROOT@"
local _M = {}

function _M.init_worker()
    zn.init_worker { servers = os.getenv("ZK_HOSTS"), session_timeout = 10,
                     sock_dir = "@SOCKDIR@" }
end

function _M.lock()
    local c = assert(zn.client())
    local lock = c:lock(ROOT .. "/" .. (ngx.var.arg_name or "l"))
    local ok, err = lock:acquire(60)
    if not ok then
        ngx.status = 500
        ngx.say("acquire: ", err)
        return
    end
    lock:release()
    ngx.say("ok")
end

function _M.pingpong()
    local rounds = tonumber(ngx.var.arg_rounds) or 50
    local me = ngx.var.request_id
    local c = assert(zn.client())
    local lock = c:lock(ROOT .. "/pp")
    local d = ngx.shared.hand
    for _ = 1, rounds do
        assert(lock:acquire(30))
        local t = now()
        local rel = d:get("rel")
        if rel and d:get("relby") ~= me then
            d:rpush("samples", t - rel)
        end
        ngx.sleep(0.001)
        d:set("relby", me)
        d:set("rel", now())
        lock:release()
    end
    ngx.say("ok")
end

function _M.samples()
    local d = ngx.shared.hand
    local out = {}
    while true do
        local v = d:lpop("samples")
        if not v then break end
        out[#out + 1] = ("%.6f"):format(v)
    end
    d:delete("rel")
    ngx.say(table.concat(out, " "))
end

function _M.rtt()
    local c = assert(zn.client())
    local out = {}
    for i = 1, tonumber(ngx.var.arg_n) or 50 do
        local t = now()
        assert(c:get(ROOT))
        out[i] = ("%.6f"):format(now() - t)
    end
    ngx.say(table.concat(out, " "))
end

return _M
]==]

local HTTP = [[
    lua_shared_dict hand 1m;
    init_worker_by_lua_block { require("app").init_worker() }
    exit_worker_by_lua_block { require("zkcoord.ngx").exit_worker() }
    server {
        listen 127.0.0.1:@PORT@ reuseport;
        location = /ping { content_by_lua_block { ngx.say("pong") } }
        location = /lock { content_by_lua_block { require("app").lock() } }
        location = /pingpong { content_by_lua_block { require("app").pingpong() } }
        location = /samples { content_by_lua_block { require("app").samples() } }
        location = /rtt { content_by_lua_block { require("app").rtt() } }
    }
]]

local sh = proc.output

local CLK_TCK = nginx.clk_tck()
local pct = nginx.percentile

local function numbers(body)
    local out = {}
    for v in (body or ""):gmatch("%S+") do out[#out + 1] = tonumber(v) end
    return out
end

local function append(dst, src)
    for _, v in ipairs(src) do dst[#dst + 1] = v end
end

local function cpu(n)
    local ticks, cs = 0, 0
    for _, pid in ipairs(n:worker_pids()) do
        ticks = ticks + (nginx.cpu_ticks(pid) or 0)
        cs = cs + nginx.ctx_switches(pid)
    end
    return ticks, cs
end

local function pings(n, count)
    local out = {}
    for i = 1, count do
        local t0 = proc.now()
        local status = n:get("/ping", 5)
        out[i] = proc.now() - t0
        assert(status == 200, "ping failed")
        proc.sleep(0.002)
    end
    return out
end

-- Scale: thousands of requests waiting in one worker -------------------------

local SCALE_APP = [==[
local zn = require "zkcoord.ngx"
local semaphore = require "ngx.semaphore"
local now = require("zkcoord").now
local ticker = require "zkcoord.wait.ngx.ticker"
local TIMEOUT = @TIMEOUT@
-- zkcoord refuses a finite timeout above 600 s (milliseconds by mistake):
-- a longer bound is no limit there (the run's own caps end it)
local LOCK_TIMEOUT = TIMEOUT > 600 and math.huge or TIMEOUT
local parked = semaphore.new(0)
local _M = {}

function _M.init_worker()
    zn.init_worker { servers = os.getenv("ZK_HOSTS"), session_timeout = 30 }
end

local function granted(lock, err)
    if not lock then
        ngx.status = 500
        ngx.say("acquire: ", tostring(err))
        return false
    end
    ngx.shared.scale:rpush("grants", now())
    return true
end

-- Baseline: a request parked on an ngx.semaphore, as a zkcoord wait is.
function _M.park()
    local ok, err = parked:wait(TIMEOUT)
    if granted(ok, err) then ngx.say("ok") end
end

function _M.unpark()
    parked:post(tonumber(ngx.var.arg_n))
    ngx.say("ok")
end

function _M.xlock()
    local lock = assert(zn.client()):lock(ngx.var.arg_node, { cohort = ngx.var.arg_cohort == "1" })
    local ok, err = lock:acquire(LOCK_TIMEOUT)
    if granted(ok, err) then
        lock:release()
        ngx.say("ok")
    end
end

function _M.rlock()
    local r = assert(zn.client()):rwlock(ngx.var.arg_node):read_lock()
    local ok, err = r:acquire(LOCK_TIMEOUT)
    if granted(ok, err) then
        r:release()
        ngx.say("ok")
    end
end

-- The worker's Lua heap (after a full collection with ?gc=1), and how
-- many requests wait.
function _M.heap()
    if ngx.var.arg_gc then
        collectgarbage()
        collectgarbage()
    end
    local w = assert(zn.client()):waiter()
    ngx.say(("%.1f %d %d"):format(collectgarbage("count"), -math.min(0, parked:count()),
                                  w.waiting))
end

-- One tick of the waiter's ticker, timed: its look for aborted waiters
-- (every waiting event; a peek at the client socket of each) and for
-- ended requests (every request that owns nodes).
function _M.tick()
    local w = assert(zn.client()):waiter()
    local t0 = now()
    ticker.reap(w)
    local t1 = now()
    ticker.end_scopes(w)
    local t2 = now()
    local scopes = 0
    for _ in pairs(w.scopes) do scopes = scopes + 1 end
    ngx.say(("%.6f %.6f %d"):format(t1 - t0, t2 - t1, scopes))
end

function _M.grants()
    local d, out = ngx.shared.scale, {}
    while true do
        local v = d:lpop("grants")
        if not v then break end
        out[#out + 1] = ("%.6f"):format(v)
    end
    ngx.say(table.concat(out, " "))
end

return _M
]==]

local SCALE_HTTP = [[
    lua_shared_dict scale 16m;
    init_worker_by_lua_block { require("app").init_worker() }
    exit_worker_by_lua_block { require("zkcoord.ngx").exit_worker() }
    server {
        listen 127.0.0.1:@PORT@ backlog=4096;
        location = /ping { content_by_lua_block { ngx.say("pong") } }
        location = /park { content_by_lua_block { require("app").park() } }
        location = /unpark { content_by_lua_block { require("app").unpark() } }
        location = /xlock { content_by_lua_block { require("app").xlock() } }
        location = /rlock { content_by_lua_block { require("app").rlock() } }
        location = /heap { content_by_lua_block { require("app").heap() } }
        location = /tick { content_by_lua_block { require("app").tick() } }
        location = /grants { content_by_lua_block { require("app").grants() } }
    }
]]

local SCALE_TIMEOUT = 1200  -- s: the longest a request may wait in acquire
local CHUNK = 500           -- requests connected per burst while they queue
local STALL = 120           -- s without one more request queued: stop
local DRAIN_CAP = 600       -- s for all to answer after the release

local raise_nofile, rss_kb = proc.raise_nofile, proc.rss_kb

local function heap_of(n, gc)
    local status, body = n:get(gc and "/heap?gc=1" or "/heap", 300)
    assert(status == 200, "heap: " .. tostring(body))
    local kb, parked, waiting = body:match("(%S+) (%d+) (%d+)")
    return tonumber(kb), tonumber(parked), tonumber(waiting)
end

-- Connects `count` requests to `shape.path` in bursts, each burst queued
-- (nodes on the server and events waiting in the worker) before the next.
-- Stops early if the worker's RSS passes the cap or nothing queues for a
-- while; r.broke says why.
local function queue_requests(n, admin, wpid, shape, count, r)
    local batches, t_q = {}, zkcoord.now()
    local queued = 0
    for first = 1, count, CHUNK do
        local paths = {}
        local want = math.min(count, first + CHUNK - 1)
        for i = first, want do paths[#paths + 1] = shape.path .. "&i=" .. i end
        batches[#batches + 1] = n:fire(paths, 60)
        local last_move, last_q = proc.now(), queued
        while true do
            if shape.cohort then
                queued = select(3, heap_of(n))   -- one node: count the worker's waits
            elseif shape.node then
                local st = admin:exists(shape.node)
                queued = st and st.num_children - 1 or 0
                if queued >= want then
                    queued = math.min(queued, select(3, heap_of(n)))
                end
            else
                queued = select(2, heap_of(n))
            end
            if queued >= want then break end
            if queued ~= last_q then last_move, last_q = proc.now(), queued end
            local rss = rss_kb(wpid)
            if rss > RSS_CAP_MB * 1024 then
                r.broke = ("worker RSS %d MB with %d of %d requests queued"):format(
                    math.floor(rss / 1024), queued, count)
            elseif proc.now() - last_move > STALL then
                r.broke = ("no progress for %d s with %d of %d requests queued"):format(
                    STALL, queued, count)
            end
            if r.broke then
                r.queued = queued
                return batches
            end
            for _, b in ipairs(batches) do b:poll(0) end
            proc.sleep(0.1)
        end
    end
    r.queued = queued
    r.queue_secs = zkcoord.now() - t_q
    return batches
end

-- Releases and collects every answer (at most DRAIN_CAP s); the grants'
-- times (monotonic, taken in the worker) give the pace of the handoffs.
local function drain(n, holder, batches, count, r)
    local t_rel = zkcoord.now()
    if holder then
        assert(holder:release())
    else
        assert(n:get("/unpark?n=" .. count) == 200)
    end
    local t_last, failed, first_err = t_rel, 0, nil
    for _, b in ipairs(batches) do
        for _, x in ipairs(b:collect(math.max(0.1, t_rel + DRAIN_CAP - zkcoord.now()))) do
            if x.status ~= 200 then
                failed = failed + 1
                first_err = first_err or (tostring(x.status) .. " " .. tostring(x.err)
                                          .. " " .. tostring(x.body))
            end
            if x.t1 and x.t1 > t_last then t_last = x.t1 end
        end
    end
    r.drain, r.failed, r.first_err = t_last - t_rel, failed, first_err
    local _, body = n:get("/grants", 60)
    local grants = numbers(body)
    table.sort(grants)
    r.grants = #grants
    r.first_grant = grants[1] and grants[1] - t_rel
    -- Mean interval between grants in each tenth of the drain: the first
    -- tenth is served while the line is longest.
    r.gaps = {}
    local tenth = math.max(1, math.floor(#grants / 10))
    for k = 0, 9 do
        local a, b = k * tenth + 1, math.min(#grants, (k + 1) * tenth)
        if b > a then r.gaps[k + 1] = (grants[b] - grants[a]) / (b - a) end
    end
end

-- One shape at one count, in a fresh nginx (one worker) and fresh paths.
local function scale_point(srv, admin, root, count, shape)
    local r = { count = count, shape = shape, key = shape.key }
    local n = assert(nginx.start {
        workers = 1,
        worker_connections = count * 2 + 1000,
        main = ("worker_rlimit_nofile %d;"):format(count * 2 + 2000),
        env = { ZK_HOSTS = srv.hosts },
        vars = { ROOT = root, TIMEOUT = SCALE_TIMEOUT },
        lua_modules = { app = SCALE_APP },
        http = SCALE_HTTP,
    })
    local ok, err = pcall(function()
        local wpid = assert(n:worker_pids()[1], "no worker")
        local node = shape.key ~= "park" and ("%s/%s-%d"):format(root, shape.key, count) or nil
        if node then assert(admin:create(node)) end
        local s = { path = shape.path .. "?node=" .. (node or "") .. (shape.query or ""), node = node,
                    cohort = shape.query ~= nil }
        -- Warm up: connected, every code path run once.
        for _ = 1, 20 do assert(n:get("/ping", 10) == 200, n:log_tail()) end
        for _, x in ipairs(n:fire({ shape.key == "park" and "/xlock?node=" .. root .. "/warm"
                                    or s.path }):collect(30)) do
            assert(x.status == 200, n:log_tail())
        end
        n:get("/grants")
        r.heap0, r.rss0 = heap_of(n, true), rss_kb(wpid)
        local holder
        if shape.key == "xlock" or shape.key == "xlock_cohort" then
            holder = admin:lock(node)
        elseif shape.key == "rlock" then
            holder = admin:rwlock(node):write_lock()
        end
        if holder then assert(holder:acquire(10)) end
        local batches = queue_requests(n, admin, wpid, s, count, r)
        if not r.broke then
            proc.sleep(1)
            r.heap1, r.rss1 = heap_of(n, true), rss_kb(wpid)
            r.tick_reap, r.tick_scopes = {}, {}
            for _ = 1, 5 do
                local _, body = n:get("/tick", 60)
                local a, b, sc = body:match("(%S+) (%S+) (%d+)")
                r.tick_reap[#r.tick_reap + 1] = tonumber(a)
                r.tick_scopes[#r.tick_scopes + 1] = tonumber(b)
                r.scopes = tonumber(sc)
            end
            proc.sleep(1)
            local c0, s0, t0 = nginx.cpu_ticks(wpid), nginx.ctx_switches(wpid), proc.now()
            proc.sleep(window)
            r.cpu_ticks = nginx.cpu_ticks(wpid) - c0
            r.cpu_cs = nginx.ctx_switches(wpid) - s0
            r.cpu_secs = proc.now() - t0
            r.pings = pings(n, PINGS)
        else
            r.rss1 = rss_kb(wpid)
            io.stderr:write("  stopped: ", r.broke, "\n")
            for _, b in ipairs(batches) do b:abort() end
            if holder then holder:release() end
            return
        end
        drain(n, holder, batches, count, r)
        if r.failed > 0 then
            io.stderr:write(("  %d of %d failed, first: %s\n"):format(r.failed, count,
                                                                      tostring(r.first_err)))
        end
    end)
    r.errlog = n:error_log()
    n:destroy()
    if not ok then
        r.broke = (r.broke and r.broke .. "; " or "") .. tostring(err)
        io.stderr:write("  error: ", tostring(err), "\n")
    end
    return r
end

local function run_scale()
    local maxn = math.max(unpack(counts))
    local nofile = raise_nofile(maxn * 2 + 1000)
    assert(nofile >= maxn + 200, ("open files limit %d: too low for %d requests"):format(nofile, maxn))
    local srv = assert(zkserver.start { extra = { "jute.maxbuffer=4194304" } })
    local root = "/bench-ngx-scale"
    local admin = assert(zkcoord.connect { servers = srv.hosts, session_timeout = 30 })
    admin:create(root)
    admin:create(root .. "/warm")
    local shapes = {
        { key = "park", path = "/park" },
        { key = "xlock", path = "/xlock" },
        { key = "xlock_cohort", path = "/xlock", query = "&cohort=1" },
        { key = "rlock", path = "/rlock" },
    }
    local results = {}
    local ok, err = pcall(function()
        for _, count in ipairs(counts) do
            for _, shape in ipairs(shapes) do
                if not only or only[shape.key] then
                    io.stderr:write(("%d requests: %s ...\n"):format(count, shape.key))
                    results[#results + 1] = scale_point(srv, admin, root, count, shape)
                end
            end
        end
    end)
    admin:close()
    srv:destroy()
    if not ok then error(err, 0) end
    return results
end

local SHAPE_TITLES = {
    park = "an `ngx.semaphore` (nginx alone, no zkcoord)",
    xlock = "one exclusive lock held outside (N handoffs)",
    xlock_cohort = "the same lock with `cohort = true` (one node, local handoffs)",
    rlock = "a read lock behind one write lock held outside",
}

local function fmt_ms(x)
    if not x then return "—" end
    return x < 0.001 and ("%.0f µs"):format(x * 1e6) or x < 10 and ("%.2f ms"):format(x * 1e3)
        or ("%.1f s"):format(x)
end

local function fmt_s(x)
    return x and (x < 1 and fmt_ms(x) or ("%.1f s"):format(x)) or "—"
end

local function scale_table(results)
    local out = {
        "| requests | waiting on | queued in | worker RSS before → waiting (per request) "
            .. "| Lua heap before → waiting (per request) | worker CPU while waiting "
            .. "| one ticker tick: reap / ended requests | `/ping` p50 / p99 meanwhile "
            .. "| all served after the release (per request) | grant interval, first → last tenth |",
        "|---|---|---|---|---|---|---|---|---|---|",
    }
    for _, r in ipairs(results) do
        local cells = { tostring(r.count), SHAPE_TITLES[r.key] }
        if r.broke then
            cells[#cells + 1] = "**stopped**: " .. r.broke
            for _ = 4, 10 do cells[#cells + 1] = "—" end
        else
            cells[#cells + 1] = fmt_s(r.queue_secs)
            cells[#cells + 1] = ("%.1f → %.1f MB (%.1f KB)"):format(r.rss0 / 1024, r.rss1 / 1024,
                (r.rss1 - r.rss0) / r.count)
            cells[#cells + 1] = ("%.1f → %.1f MB (%.1f KB)"):format(r.heap0 / 1024, r.heap1 / 1024,
                (r.heap1 - r.heap0) / r.count)
            cells[#cells + 1] = ("%d ticks in %.0f s (%.1f %% of a core)"):format(r.cpu_ticks,
                r.cpu_secs, 100 * r.cpu_ticks / CLK_TCK / r.cpu_secs)
            cells[#cells + 1] = ("%s / %s"):format(fmt_ms(pct(r.tick_reap, 50)),
                                                   fmt_ms(pct(r.tick_scopes, 50)))
            cells[#cells + 1] = ("%s / %s"):format(fmt_ms(pct(r.pings, 50)), fmt_ms(pct(r.pings, 99)))
            cells[#cells + 1] = ("%s (%s)%s"):format(fmt_s(r.drain), fmt_ms(r.drain / r.count),
                r.failed > 0 and (" **%d failed**"):format(r.failed) or "")
            cells[#cells + 1] = r.key ~= "park" and r.gaps[1] and r.gaps[#r.gaps]
                and ("%s → %s"):format(fmt_ms(r.gaps[1]), fmt_ms(r.gaps[#r.gaps])) or "—"
        end
        out[#out + 1] = "| " .. table.concat(cells, " | ") .. " |"
    end
    return table.concat(out, "\n")
end

local replace_section = dofile("bench/doc_section.lua")

local function machine()
    local cpuname = sh("grep -m1 'model name' /proc/cpuinfo"):gsub("model name%s*:%s*", "")
                                                           :gsub("\n", "")
    local nver = sh("nginx -v 2>&1"):gsub("\n", ""):gsub("^nginx version: ", "")
    return ("%s, %d cores, %s"):format(cpuname, tonumber(sh("nproc")) or 0, nver)
end

local function loadavg()
    return (sh("cut -d' ' -f1-3 /proc/loadavg"):gsub("\n", ""))
end

if scale_mode then
    local load0, started = loadavg(), os.date("!%Y-%m-%d %H:%M UTC")
    local results = run_scale()
    local load1 = loadavg()
    local table_md = scale_table(results)
    print(table_md)
    for _, r in ipairs(results) do
        if r.gaps and #r.gaps > 0 then
            local g = {}
            for i, v in ipairs(r.gaps) do g[i] = fmt_ms(v) end
            print(("%d %s: grant interval by tenth of the drain: %s"):format(r.count, r.key,
                                                                           table.concat(g, ", ")))
        end
    end
    if write_doc then
        replace_section("docs/PERFORMANCE.md", "ngx-scale", table.concat({
            "<!-- ngx-scale:begin -->",
            "## Inside nginx: thousands of requests waiting in one worker (issue 14 item 3)",
            "",
            ("Command: `luajit bench/ngx.lua scale --doc --counts %s --window %g` (its own"):format(
                table.concat(counts, ","), window),
            "standalone ZooKeeper 3.8 on 127.0.0.1, forceSync=no; for each point a fresh private",
            "nginx with **one worker** (doorbell pump), `worker_connections` 2N + 1000; this",
            "process holds the lock (or the write lock) on its own session and opens one",
            "connection per waiting request, 500 at a time, each burst queued before the next;",
            ("a point stops when the worker's RSS passes %d MB while they queue: `--rss-cap`)."):format(
                RSS_CAP_MB),
            ("Measured %s on %s, load average %s before, %s after: the machine"):format(
                started, machine(), load0, load1),
            "is shared with other test runs, so times are noisy; memory and the shape are not.",
            "",
            table_md,
            "",
            "RSS: VmRSS of the worker; Lua heap: `collectgarbage(\"count\")` in the worker after",
            "two full collections; both before the requests came and after all had queued (per",
            "request: the difference over N). CPU: utime+stime of the worker (every thread:",
            "libzookeeper's I/O and completion threads too) from /proc/<pid>/stat over " .. window
                .. " s while",
            "they wait and nothing else happens; a tick is 1/" .. CLK_TCK .. " s. One ticker tick: the",
            "work the waiter's ticker does every 50 ms while requests wait, timed in the worker:",
            "its look for aborted waiters (`ticker.reap`: every waiting event, a peek at each",
            "request's client socket) and for ended requests (`ticker.end_scopes`). `/ping`: "
                .. PINGS .. " sequential",
            "requests, a new connection each. Served: from the release to the last response;",
            "per request: that over N (for the exclusive lock: per handoff). Grant interval:",
            "mean time between grants in the first and the last tenth of the drain (the line",
            "is longest in the first).",
            "<!-- ngx-scale:end -->",
        }, "\n"))
    end
    os.exit(0)
end

-- Setup -------------------------------------------------------------------------

local srv = assert(zkserver.start {})
local root = "/bench-ngx"
local admin = assert(zkcoord.connect { servers = srv.hosts })
for _, p in ipairs({ root, root .. "/l", root .. "/pp", root .. "/held-doorbell",
                     root .. "/held-polling" }) do
    admin:create(p)
end

local modes = {
    { key = "doorbell", title = "doorbell pump", sock_dir = "/tmp" },
    { key = "polling", title = "polling fallback", sock_dir = "/nonexistent" },
}

local ok, err = pcall(function()
    for _, m in ipairs(modes) do
        m.n = assert(nginx.start {
            workers = 2,
            env = { ZK_HOSTS = srv.hosts },
            vars = { ROOT = root, SOCKDIR = m.sock_dir },
            lua_modules = { app = APP },
            http = HTTP,
        })
        -- Connected in both workers (reuseport spreads the requests).
        for _ = 1, 20 do
            local status = m.n:get("/rtt?n=1", 10)
            assert(status == 200, "nginx (" .. m.key .. ") not ready:\n" .. m.n:log_tail())
        end
        m.n:fire({ "/pingpong?rounds=20", "/pingpong?rounds=20" }):collect(60)  -- warm up
        m.n:get("/samples")
        m.r = { handoff = {}, rtt = {}, idle = {}, loaded = {}, wait_ticks = 0, wait_cs = 0,
                wait_secs = 0, drain = {} }
    end
    local polling_log = modes[2].n:error_log()
    assert(polling_log:find("falling back to polling", 1, true), "polling mode not in effect")
    assert(not modes[1].n:error_log():find("falling back to polling", 1, true),
           "doorbell mode fell back to polling")

    -- Idle CPU: both instances idle over the same window.
    io.stderr:write(("idle CPU over %g s ...\n"):format(idle_secs))
    proc.sleep(1)
    for _, m in ipairs(modes) do m.t0, m.cs0 = cpu(m.n) end
    proc.sleep(idle_secs)
    for _, m in ipairs(modes) do
        local t, cs = cpu(m.n)
        m.r.idle_ticks, m.r.idle_cs = t - m.t0, cs - m.cs0
    end

    for round = 1, ROUNDS do
        for _, m in ipairs(modes) do
            io.stderr:write(("round %d: %s ...\n"):format(round, m.key))
            local n, r = m.n, m.r
            -- Lock handoff between two requests.
            local res = n:fire({ "/pingpong?rounds=" .. HANDOFF_ROUNDS,
                                 "/pingpong?rounds=" .. HANDOFF_ROUNDS }):collect(120)
            for _, x in ipairs(res) do
                assert(x.status == 200 and x.body == "ok\n", "pingpong failed: " .. tostring(x.err)
                       .. " " .. tostring(x.body))
            end
            local _, body = n:get("/samples")
            append(r.handoff, numbers(body))
            -- get() round trips (several requests: both workers).
            for _ = 1, 4 do
                local _, rb = n:get("/rtt?n=50", 30)
                append(r.rtt, numbers(rb))
            end
            -- /ping idle, then with WAITERS requests waiting on a held lock.
            append(r.idle, pings(n, PINGS))
            local held = root .. "/held-" .. m.key
            local holder = admin:lock(held)
            assert(holder:acquire(10))
            local paths = {}
            for i = 1, WAITERS do paths[i] = "/lock?name=held-" .. m.key .. "&i=" .. i end
            local batch = n:fire(paths)
            local deadline = proc.now() + 30
            while #(admin:children(held) or {}) < WAITERS + 1 do
                assert(proc.now() < deadline, "waiters did not queue")
                proc.sleep(0.05)
            end
            -- Their cost while nothing else happens, then /ping meanwhile.
            local t0, w0, c0 = proc.now(), cpu(n)
            proc.sleep(WAIT_CPU_SECS)
            local w1, c1 = cpu(n)
            r.wait_ticks = r.wait_ticks + (w1 - w0)
            r.wait_cs = r.wait_cs + (c1 - c0)
            r.wait_secs = r.wait_secs + (proc.now() - t0)
            append(r.loaded, pings(n, PINGS))
            local t_rel = proc.now()
            assert(holder:release())
            local results = batch:collect(120)
            r.drain[#r.drain + 1] = proc.now() - t_rel
            for _, x in ipairs(results) do
                assert(x.status == 200, "waiter failed: " .. tostring(x.err) .. " " .. tostring(x.body))
            end
        end
    end
end)

for _, m in ipairs(modes) do
    if m.n then m.n:destroy() end
end
admin:close()
srv:destroy()
if not ok then
    error(err, 0)
end

-- Report ------------------------------------------------------------------------

local function ms(x)
    return x < 0.001 and ("%.0f µs"):format(x * 1e6) or ("%.2f ms"):format(x * 1e3)
end

local function p50_99(list)
    return ("%s / %s"):format(ms(pct(list, 50)), ms(pct(list, 99)))
end

local function median(list)
    return pct(list, 50)
end

local rows = {}
local function row(label, fn)
    rows[#rows + 1] = ("| %s | %s | %s |"):format(label, fn(modes[1].r), fn(modes[2].r))
end
row(("idle CPU of 2 workers over %g s"):format(idle_secs), function(r)
    return ("%d ticks (%.1f %% of a core), %d context switches"):format(
        r.idle_ticks, 100 * r.idle_ticks / CLK_TCK / idle_secs, r.idle_cs)
end)
row("lock handoff, release → next waiter running, p50 / p99", function(r)
    return p50_99(r.handoff) .. (" (%d)"):format(#r.handoff)
end)
row("`get()` round trip inside a worker, p50 / p99", function(r) return p50_99(r.rtt) end)
row("`/ping` p50 / p99, idle", function(r) return p50_99(r.idle) end)
row(("`/ping` p50 / p99, %d requests waiting on a held lock"):format(WAITERS),
    function(r) return p50_99(r.loaded) end)
row(("CPU of 2 workers while %d requests wait (no other traffic)"):format(WAITERS), function(r)
    return ("%d ticks in %.0f s (%.1f %% of a core), %d context switches"):format(
        r.wait_ticks, r.wait_secs, 100 * r.wait_ticks / CLK_TCK / r.wait_secs, r.wait_cs)
end)
row(("%d waiters served after the release (median)"):format(WAITERS), function(r)
    return ms(median(r.drain))
end)

local table_md = table.concat({
    "| measure | doorbell pump | polling fallback |",
    "|---|---|---|",
    table.concat(rows, "\n"),
}, "\n")
print(table_md)

if write_doc then
    replace_section("docs/PERFORMANCE.md", "ngx", table.concat({
        "<!-- ngx:begin -->",
        "## Inside nginx: doorbell pump vs polling fallback",
        "",
        "Command: `luajit bench/ngx.lua --doc` (starts its own ZooKeeper, forceSync=no, and two",
        "private nginx instances with 2 workers each on 127.0.0.1; the polling one is forced by",
        "`init_worker{ sock_dir = \"/nonexistent\" }`).",
        ("Measured %s on %s, load average %s (other work was running)."):format(
            os.date("!%Y-%m-%d"), machine(), loadavg()),
        "",
        table_md,
        "",
        ("Idle CPU: both instances idle over the same %g s, from utime+stime in"):format(idle_secs),
        "/proc/<pid>/stat of each worker (a tick is 1/" .. CLK_TCK .. " s). Handoff: two requests",
        "pass one lock back and forth (1 ms hold); each sample is the time from the holder's",
        "`release()` to the other request's `acquire()` returning, across workers or within one.",
        "It includes ZooKeeper's work: the delete, the watch notification, and the waiter's",
        "`children` round trip. `/ping`: sequential HTTP requests (new connection each, 2 ms",
        ("apart) from one client process, %d per measurement; the %d waiters are requests"):format(
            PINGS, WAITERS),
        "blocked in `lock:acquire()` behind a lock held by another process. Medians repeat",
        ("well; p99 values depend on what else the machine runs. %d interleaved rounds."):format(
            ROUNDS),
        "",
        "The polling fallback sleeps 50 ms between polls while no request waits, and doubles",
        "its step from 1 ms up to 50 ms while requests wait, whether or not replies arrive:",
        "a request that starts while the loop sleeps, or a sequence of requests in one",
        "worker, pays up to 50 ms per wait. Idle, it wakes 20 times a second per worker; the",
        "doorbell pump does not wake at all.",
        "<!-- ngx:end -->",
    }, "\n"))
end
