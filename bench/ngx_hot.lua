-- bench/ngx_hot.lua: one hot lock in nginx (issue 30, items 3 and 4).
--   luajit bench/ngx_hot.lua [--counts 1000,5000,10000] [--workers 1,4]
--                            [--only plain,cohort,sleep] [--cap SECONDS]
--                            [--perf DIR] [--profile] [--during join|serve]
--                            [--events TEXT] [--doc]
-- Starts its own standalone ZooKeeper (zkcoord.testing.server) and, for each
-- point, a fresh private nginx (1 or 4 workers, doorbell pump). This process
-- holds one exclusive lock; N requests (one connection each, sent 500 at a
-- time as fast as they go out, over loopback) wait on it, as a plain lock
-- or with `cohort = true`; then it releases and each request, granted,
-- releases at once. The "sleep" shape (--only sleep) is nginx's own floor:
-- the same requests wait on a semaphore of the worker, no lock, no
-- ZooKeeper, and are let go one after the other (each woken request wakes
-- the next) when this process says so. Measured:
--  * join: from the first request sent until every request called
--    acquire in a worker and (plain) has its node in the line, or `--cap`
--    seconds; "missing" is how many had no node in the line at the release;
--  * served: from the release to the last grant (worker-side monotonic
--    clock, the same as this process's);
--  * order: grants served out of arrival order, arrival being the order in
--    which each worker's requests called acquire (a grant whose arrival
--    number is below one granted before it in the same worker);
--  * /ping p50 / p99 / max (a new connection each, one every 10 ms) while
--    they join and while they are served;
--  * the workers' CPU (utime + stime) per second while they join and while
--    they are served; worker RSS before, while waiting, 3 s after the last
--    was served;
--  * the most CPU the worker spent in one turn of its event loop (a timer's
--    1 ms sleeps) while they join and while they are served;
--  * --perf DIR: `perf record -g` of the worker (one worker) while they
--    join, into DIR/<shape>-<count>.data (`perf report -i ...`);
--  * --profile: LuaJIT's profiler (jit.profile) in the worker while they
--    join: the functions where the worker's Lua spent its samples;
--  * --during serve: --perf and --profile while they are served instead;
--  * per handoff while served: the scheduler's time (run, and runnable but
--    waiting for a CPU) of the worker's event loop, of its libzookeeper
--    threads and of the server, over N (/proc/.../task/*/schedstat).
-- --events TEXT adds lines to nginx's events block (an operator's
-- settings: "multi_accept on;").
-- --doc writes the table into docs/PERFORMANCE.md (<!-- ngx-hot -->).
package.path = "spec/?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("ZKCOORD_CPATH") or "lua/?.so") .. ";" .. package.cpath

local zkserver = require "helpers.zkserver"
local nginx = require "helpers.nginx"
local proc = require "helpers.proc"
local options = require "helpers.options"
local zkcoord = require "zkcoord"

local function shape_set(text)
    local set = {}
    for v in text:gmatch("[^,]+") do
        if v ~= "plain" and v ~= "cohort" and v ~= "sleep" then
            return nil, "takes plain, cohort, sleep"
        end
        set[v] = true
    end
    return set
end

local opts = options.parse(arg, {
    name = "ngx_hot.lua",
    usage = "usage: luajit bench/ngx_hot.lua [--counts 1000,5000,10000] [--workers 1,4]"
        .. " [--only plain,cohort,sleep] [--cap SECONDS] [--perf DIR] [--profile]"
        .. " [--during join|serve] [--events TEXT] [--doc]",
    status = 64,
    defaults = { counts = { 1000, 5000, 10000 }, workers = { 1 }, cap = 60, doc = false,
                 profile = false, during = "join" },
    options = {
        ["--counts"] = options.numbers,
        ["--workers"] = options.numbers,
        ["--only"] = shape_set,
        ["--cap"] = "number",
        ["--perf"] = "string",
        ["--profile"] = "flag",
        ["--during"] = function(v)
            if v ~= "join" and v ~= "serve" then return nil, "takes join or serve" end
            return v
        end,
        ["--events"] = "string",
        ["--doc"] = "flag",
    },
})

local CHUNK = 500        -- requests sent per burst
local PING_EVERY = 0.01  -- s between pings
local SERVE_CAP = 120    -- s for all to be served after the release
local SETTLE = 3         -- s after the last grant before "RSS after"
-- s between two looks at the waiters' connections while they are served
-- (the served time is the workers' grant stamps, not when we read the
-- answers): looking every 1 ms, at up to 10,000 sockets each time, took
-- this process 130-200 µs of CPU per handoff, as much as the worker, on
-- the same cores as the worker and the server.
local POLL_SERVED = 0.05

local APP = [==[
local zn = require "zkcoord.ngx"
local now = require("zkcoord").now
local probe = require "turn_probe"
local _M = {}
local arrived = 0

-- The most CPU the worker spent in one turn of its event loop since the
-- last call (helpers.nginx.TURN_PROBE).
function _M.turn()
    ngx.say(("%.6f"):format(probe.take()))
end

function _M.init_worker()
    zn.init_worker { servers = os.getenv("ZK_HOSTS"), session_timeout = 10 }
end

function _M.xlock()
    arrived = arrived + 1
    local me = arrived
    local d = ngx.shared.hot
    d:incr("joined", 1, 0)
    local lock = assert(zn.client()):lock(ngx.var.arg_node, { cohort = ngx.var.arg_cohort == "1" })
    local ok, err = lock:acquire(300)
    if not ok then
        ngx.status = 500
        ngx.say("acquire: ", tostring(err))
        return
    end
    d:rpush("grants", ("%d %d %.6f"):format(ngx.worker.pid(), me, now()))
    lock:release()
    ngx.say("ok")
end

-- nginx's floor: a request that waits without the library. The worker's
-- sleepers wait on one semaphore; a poller (a timer, every 5 ms while some
-- wait) posts it once when /go set the flag, and each woken request wakes
-- the next, pausing first when the worker is overdue (as a woken waiter
-- of the library does, zkcoord.wait.ngx.turn).
local turn = require "zkcoord.wait.ngx.turn"
local sleepers = { sema = nil, waiting = 0, polling = false }

local function poll_go(premature)
    while not premature and sleepers.waiting > 0 do
        if ngx.shared.hot:get("go") then
            sleepers.sema:post(1)
            break
        end
        ngx.sleep(0.005)
    end
    sleepers.polling = false
end

function _M.sleep()
    arrived = arrived + 1
    local me = arrived
    local d = ngx.shared.hot
    d:incr("joined", 1, 0)
    if not d:get("go") then
        sleepers.sema = sleepers.sema or require("ngx.semaphore").new(0)
        sleepers.waiting = sleepers.waiting + 1
        if not sleepers.polling then
            sleepers.polling = true
            assert(ngx.timer.at(0, poll_go))
        end
        local ok = sleepers.sema:wait(300)
        sleepers.waiting = sleepers.waiting - 1
        if not ok then
            ngx.status = 500
            ngx.say("sleep: timeout")
            return
        end
        if turn.overdue() then turn.pause() end
        if sleepers.waiting > 0 then sleepers.sema:post(1) end
    end
    d:rpush("grants", ("%d %d %.6f"):format(ngx.worker.pid(), me, now()))
    ngx.say("ok")
end

function _M.go()
    ngx.shared.hot:set("go", ngx.var.arg_on == "1")
    ngx.say("ok")
end

-- LuaJIT's profiler in this worker: /prof?start=1 starts it, /prof stops
-- it and answers the samples by stack (callers first), most first.
local profile = { counts = nil }
function _M.prof()
    local jp = require "jit.profile"
    if ngx.var.arg_start then
        local counts = {}
        profile.counts = counts
        jp.start("fi1", function(thread, samples, vmstate)
            local stack = jp.dumpstack(thread, "F <", 6):gsub(" <$", "")
            local key = vmstate .. " " .. stack
            counts[key] = (counts[key] or 0) + samples
        end)
        ngx.say("started")
        return
    end
    jp.stop()
    local list = {}
    for k, v in pairs(profile.counts or {}) do list[#list + 1] = { k, v } end
    table.sort(list, function(a, b) return a[2] > b[2] end)
    for i = 1, math.min(#list, 60) do ngx.say(list[i][2], "\t", list[i][1]) end
end

-- Two full collections: what the heap gives back when asked; ?trim=1:
-- then malloc_trim(0), what glibc's heap (nginx's request pools) gives back.
function _M.gc()
    collectgarbage()
    collectgarbage()
    if ngx.var.arg_trim then
        local ffi = require "ffi"
        pcall(ffi.cdef, "int malloc_trim(size_t);")
        ffi.C.malloc_trim(0)
    end
    ngx.say(("%.1f"):format(collectgarbage("count")))
end

function _M.joined()
    ngx.say(ngx.shared.hot:get("joined") or 0)
end

function _M.grants()
    local d, out = ngx.shared.hot, {}
    while true do
        local v = d:lpop("grants")
        if not v then break end
        out[#out + 1] = v
    end
    d:set("joined", 0)
    ngx.say(table.concat(out, "\n"))
end

return _M
]==]

local HTTP = [[
    lua_shared_dict hot 32m;
    init_worker_by_lua_block { require("app").init_worker() }
    exit_worker_by_lua_block { require("zkcoord.ngx").exit_worker() }
    server {
        listen 127.0.0.1:@PINGPORT@;
        location = /ping { content_by_lua_block { ngx.say("pong") } }
    }
    server {
        listen 127.0.0.1:@PORT@ backlog=4096;
        location = /xlock { content_by_lua_block { require("app").xlock() } }
        location = /sleep { content_by_lua_block { require("app").sleep() } }
        location = /go { content_by_lua_block { require("app").go() } }
        location = /prof { content_by_lua_block { require("app").prof() } }
        location = /turn { content_by_lua_block { require("app").turn() } }
        location = /gc { content_by_lua_block { require("app").gc() } }
        location = /joined { content_by_lua_block { require("app").joined() } }
        location = /grants { content_by_lua_block { require("app").grants() } }
    }
]]

local sh = proc.output

local CLK_TCK = nginx.clk_tck()
local pct = nginx.percentile

local function cpu_ticks(pids)
    local t = 0
    for _, pid in ipairs(pids) do t = t + (nginx.cpu_ticks(pid) or 0) end
    return t
end

local function rss_mb(pids)
    local kb = 0
    for _, pid in ipairs(pids) do kb = kb + proc.rss_kb(pid) end
    return kb / 1024
end

-- The scheduler's counts of the workers' and the server's threads.
local function sched_of(pids, server_pid)
    local t = { server = proc.schedstat(server_pid), bench = proc.schedstat(proc.getpid()) }
    for i, pid in ipairs(pids) do t[i] = { pid = pid, threads = proc.schedstat(pid) } end
    return t
end

-- Where a phase's time went, summed over the workers: their main threads
-- (nginx's event loop: all the Lua), their other threads (libzookeeper's
-- IO and completion threads, the heartbeat), and the server; each as
-- { run, wait, slices } (seconds on a CPU; runnable, waiting for one).
local function sched_split(before, after)
    local out = { main = { 0, 0, 0 }, zk = { 0, 0, 0 } }
    local function add(into, a, b, c)
        into[1], into[2], into[3] = into[1] + a, into[2] + b, into[3] + c
    end
    for i, w in ipairs(after) do
        local pid = w.pid
        add(out.main, proc.schedstat_delta(before[i].threads, w.threads,
            function(t) return t.tid == pid end))
        add(out.zk, proc.schedstat_delta(before[i].threads, w.threads,
            function(t) return t.tid ~= pid end))
    end
    out.server = { proc.schedstat_delta(before.server, after.server) }
    out.bench = { proc.schedstat_delta(before.bench, after.bench) }
    return out
end

-- One line: per handoff (the phase's sums over `n`), in µs.
local function sched_line(s, n)
    local function cell(x)
        return ("%.0f on CPU, %.0f waiting for one, %.2f slices"):format(x[1] / n * 1e6,
            x[2] / n * 1e6, x[3] / n)
    end
    return ("  per handoff while served (µs): worker's event loop %s; its libzookeeper threads %s;"
        .. " the server %s; this bench (its clients) %s\n"):format(cell(s.main), cell(s.zk),
        cell(s.server), cell(s.bench))
end

local function number_of(n, path)
    local status, body = n:get(path, 30)
    assert(status == 200, path .. ": " .. tostring(body))
    return tonumber(body)
end

-- One ping, timed, into `into`; keeps the batches' sockets read meanwhile.
local Pinger = {}
Pinger.__index = Pinger

local function pinger(port)
    return setmetatable({ port = port, next_at = 0 }, Pinger)
end

-- /ping on a listener of its own: a ping on the waiters' port would queue
-- behind thousands of connections not accepted yet, and measure the
-- backlog, not how long the worker keeps others waiting.
function Pinger:maybe(into)
    local t = proc.now()
    if t < self.next_at then return end
    self.next_at = t + PING_EVERY
    local conn = assert(proc.tcp_connect("127.0.0.1", self.port, 60))
    assert(conn:send("GET /ping HTTP/1.0\r\n\r\n", 60))
    local text = conn:recv_all(60)
    conn:close()
    into[#into + 1] = proc.now() - t
    assert(nginx.parse_response(text or "") == 200, "ping failed")
end

local function poll_all(batches)
    local left = 0
    for _, b in ipairs(batches) do left = left + b:poll(0) end
    return left
end

-- `perf record -g` of process `pid` into `file` until stop_perf.
local function start_perf(pid, file)
    local ppid = assert(proc.spawn({ "perf", "record", "-F", "999", "-g", "-p", tostring(pid),
                                     "-o", file }, { stderr = file .. ".log", owner = true }))
    proc.sleep(0.5)    -- perf attached
    return ppid
end

local function stop_perf(ppid)
    proc.kill(ppid, "INT")
    proc.wait_exit(ppid, 30)
end

local function one_point(srv, admin, root, workers, count, shape)
    local cohort, sleep = shape == "cohort", shape == "sleep"
    local r = { workers = workers, count = count, shape = shape, join_pings = {},
                serve_pings = {} }
    local ping_port = proc.free_port()
    local n = assert(nginx.start {
        workers = workers,
        vars = { PINGPORT = ping_port },
        worker_connections = count * 2 + 1000,
        events = opts.events,
        main = ("worker_rlimit_nofile %d;"):format(count * 2 + 2000),
        env = { ZK_HOSTS = srv.hosts },
        lua_modules = { app = APP, turn_probe = nginx.TURN_PROBE },
        http = HTTP,
    })
    local ok, err = pcall(function()
        local pids = n:worker_pids()
        local node = ("%s/%s-%d-%d"):format(root, shape, workers, count)
        assert(admin:create(node))
        local path = sleep and "/sleep?node=" .. node
            or "/xlock?node=" .. node .. (cohort and "&cohort=1" or "")
        if sleep then n:get("/go?on=1") end
        -- Warm up: every worker connected, every code path run once.
        for _ = 1, 10 * workers do
            for _, x in ipairs(n:fire({ path }):collect(30)) do
                assert(x.status == 200, n:log_tail())
            end
        end
        n:get("/grants")
        proc.sleep(1)
        r.rss0 = rss_mb(pids)
        local holder = admin:lock(node)
        if sleep then
            n:get("/go?on=0")
        else
            assert(holder:acquire(10))
        end
        local serving = opts.during == "serve"
        local perf = opts.perf and workers == 1 and not serving
            and start_perf(pids[1], ("%s/%s-%d.data"):format(opts.perf, shape, count))
        if opts.profile and not serving then number_of(n, "/prof?start=1") end
        local ping = pinger(ping_port)
        number_of(n, "/turn")
        local batches = {}
        local t0, c0 = proc.now(), cpu_ticks(pids)
        for first = 1, count, CHUNK do
            local paths = {}
            for i = first, math.min(count, first + CHUNK - 1) do paths[#paths + 1] = path .. "&i=" .. i end
            batches[#batches + 1] = n:fire(paths, 60)
            poll_all(batches)
            ping:maybe(r.join_pings)
        end
        r.sent = proc.now() - t0
        -- Joined: every request called acquire, and (plain) has its node.
        while proc.now() - t0 < opts.cap do
            local joined = number_of(n, "/joined")
            if joined >= count then
                if cohort or sleep then break end
                local st = admin:exists(node)
                local line = st and st.num_children - 1 or 0
                if line >= count then break end
            end
            poll_all(batches)
            ping:maybe(r.join_pings)
            proc.sleep(0.005)
        end
        r.join = proc.now() - t0
        if perf then stop_perf(perf) end
        if opts.profile and not serving then
            local _, body = n:get("/prof", 30)
            io.stderr:write("  jit.profile while joining (samples, vmstate, stack leaf first):\n",
                            body)
        end
        if serving then
            perf = opts.perf and workers == 1
                and start_perf(pids[1], ("%s/%s-%d.data"):format(opts.perf, shape, count))
            if opts.profile then number_of(n, "/prof?start=1") end
        end
        r.join_turn = number_of(n, "/turn")
        r.join_cpu = (cpu_ticks(pids) - c0) / CLK_TCK / r.join
        if shape == "plain" then
            local st = admin:exists(node)
            r.missing = count - (st and st.num_children - 1 or 0)
        end
        r.rss1 = rss_mb(pids)
        -- Release; served while /ping goes on.
        local c1 = cpu_ticks(pids)
        local sched0 = sched_of(pids, srv.pid)
        local t_rel = zkcoord.now()
        if sleep then
            n:get("/go?on=1")
        else
            assert(holder:release())
        end
        local polled = 0
        while zkcoord.now() - t_rel < SERVE_CAP do
            if proc.now() - polled >= POLL_SERVED then
                if poll_all(batches) == 0 then break end
                polled = proc.now()
            end
            ping:maybe(r.serve_pings)
            proc.sleep(0.001)
        end
        local t_end = zkcoord.now()
        if serving then
            if perf then stop_perf(perf) end
            if opts.profile then
                local _, body = n:get("/prof", 30)
                io.stderr:write("  jit.profile while served (samples, vmstate, stack leaf first):\n",
                                body)
            end
        end
        r.sched = sched_split(sched0, sched_of(pids, srv.pid))
        r.serve_turn = number_of(n, "/turn")
        r.serve_cpu = (cpu_ticks(pids) - c1) / CLK_TCK / (t_end - t_rel)
        local failed = 0
        for _, b in ipairs(batches) do
            for _, x in ipairs(b:collect(0.1)) do
                if x.status ~= 200 then
                    failed = failed + 1
                    r.first_err = r.first_err or tostring(x.status) .. " " .. tostring(x.err)
                        .. " " .. tostring(x.body)
                end
            end
        end
        r.failed = failed
        local _, body = n:get("/grants", 60)
        local last, grants, maxseen, late = t_rel, 0, {}, 0
        for pid, me, t in body:gmatch("(%d+) (%d+) (%S+)") do
            me, t = tonumber(me), tonumber(t)
            grants = grants + 1
            if t > last then last = t end
            if (maxseen[pid] or 0) > me then late = late + 1 end
            if me > (maxseen[pid] or 0) then maxseen[pid] = me end
        end
        r.grants, r.order, r.served = grants, late, last - t_rel
        proc.sleep(SETTLE)
        r.rss2 = rss_mb(pids)
        for _ = 1, 4 * workers do
            local _, kb = n:get("/gc", 30)
            r.heap = tonumber(kb)
        end
        r.rss3 = rss_mb(pids)
        for _ = 1, 4 * workers do n:get("/gc?trim=1", 30) end
        r.rss4 = rss_mb(pids)
    end)
    r.errlog = n:error_log()
    for line in r.errlog:gmatch("[^\n]+") do     -- what went wrong shows with the row
        if line:find("%[error%]") or line:find("%[warn%]") then
            io.stderr:write("  ", line:sub(1, 300), "\n")
        end
    end
    local missing_logged = 0
    for _ in r.errlog:gmatch("missing from the line") do missing_logged = missing_logged + 1 end
    r.missing_logged = missing_logged
    n:destroy()
    if not ok then
        r.broke = tostring(err)
        io.stderr:write("  error: ", r.broke, "\n")
    end
    return r
end

local function fmt_ms(x)
    if not x then return "—" end
    return x < 1 and ("%.1f ms"):format(x * 1e3) or ("%.2f s"):format(x)
end

local function pings_cell(list)
    if #list == 0 then return "—" end
    return ("%s / %s / %s (%d)"):format(fmt_ms(pct(list, 50)), fmt_ms(pct(list, 99)),
                                        fmt_ms(pct(list, 100)), #list)
end

local function table_of(results)
    local out = {
        "| workers | waiters | lock | joined in (missing at release) "
            .. "| `/ping` p50 / p99 / max (n) while joining | CPU while joining "
            .. "| all served after the release (per waiter) | out of arrival order "
            .. "| `/ping` p50 / p99 / max (n) while served | CPU while served "
            .. "| RSS before → waiting → 3 s after → after a full GC → after malloc_trim |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    }
    for _, r in ipairs(results) do
        local cells = { tostring(r.workers), tostring(r.count), r.shape }
        if r.broke then
            cells[#cells + 1] = "**failed**: " .. r.broke:gsub("\n.*", "")
            for _ = 5, 11 do cells[#cells + 1] = "—" end
        else
            cells[#cells + 1] = ("%s (%s)"):format(fmt_ms(r.join), r.missing and tostring(r.missing) or "—")
            cells[#cells + 1] = pings_cell(r.join_pings)
            cells[#cells + 1] = ("%.2f s/s"):format(r.join_cpu)
            cells[#cells + 1] = ("%s (%.0f µs)%s"):format(fmt_ms(r.served), r.served / r.count * 1e6,
                (r.failed > 0 or r.grants ~= r.count)
                    and (" **%d failed, %d granted**"):format(r.failed, r.grants) or "")
            cells[#cells + 1] = tostring(r.order)
            cells[#cells + 1] = pings_cell(r.serve_pings)
            cells[#cells + 1] = ("%.2f s/s"):format(r.serve_cpu)
            cells[#cells + 1] = ("%.0f → %.0f → %.0f → %.0f → %.0f MB"):format(r.rss0, r.rss1,
                r.rss2, r.rss3, r.rss4)
        end
        out[#out + 1] = "| " .. table.concat(cells, " | ") .. " |"
    end
    return table.concat(out, "\n")
end

local function loadavg()
    return (sh("cut -d' ' -f1-3 /proc/loadavg"):gsub("\n", ""))
end

local maxn = math.max(unpack(opts.counts))
local nofile = proc.raise_nofile(maxn * 2 + 1000)
assert(nofile >= maxn + 200, ("open files limit %d: too low for %d requests"):format(nofile, maxn))
local load0, started = loadavg(), os.date("!%Y-%m-%d %H:%M UTC")
local srv = assert(zkserver.start { extra = { "jute.maxbuffer=4194304" } })
local root = "/bench-ngx-hot"
local admin = assert(zkcoord.connect { servers = srv.hosts, session_timeout = 30 })
admin:create(root)
local results = {}
local ok, err = pcall(function()
    for _, workers in ipairs(opts.workers) do
        for _, count in ipairs(opts.counts) do
            for _, shape in ipairs({ "sleep", "plain", "cohort" }) do
                if not opts.only or opts.only[shape] then
                    io.stderr:write(("%d worker(s), %d waiters, %s ...\n"):format(workers, count,
                        shape))
                    results[#results + 1] = one_point(srv, admin, root, workers, count, shape)
                    io.stderr:write(table_of({ results[#results] }):match("[^\n]*$"), "\n")
                    local r = results[#results]
                    io.stderr:write(("  Lua heap after a full GC: %.1f MB; waiters that logged "
                        .. "they were missing from the line: %d; most CPU in one turn of a "
                        .. "worker: %s joining, %s served\n"):format((r.heap or 0) / 1024,
                        r.missing_logged, fmt_ms(r.join_turn), fmt_ms(r.serve_turn)))
                    if r.sched then io.stderr:write(sched_line(r.sched, r.count)) end
                end
            end
        end
    end
end)
admin:close()
srv:destroy()
if not ok then error(err, 0) end
local load1 = loadavg()
local md = table_of(results)
print(md)
print(("load average %s before, %s after; started %s"):format(load0, load1, started))
if opts.doc then
    local replace_section = dofile("bench/doc_section.lua")
    replace_section("docs/PERFORMANCE.md", "ngx-hot", table.concat({
        "<!-- ngx-hot:begin -->",
        "### One hot lock inside nginx (issue 30 items 3 and 4)",
        "",
        ("Command: `luajit bench/ngx_hot.lua --doc --counts %s --workers %s` (its own"):format(
            table.concat(opts.counts, ","), table.concat(opts.workers, ",")),
        "standalone ZooKeeper on 127.0.0.1; per row a fresh private nginx, doorbell pump, session",
        "timeout 10 s; this process holds one exclusive lock, N requests (a connection each, 500 per",
        "burst) wait on it, then it releases and each granted request releases at once).",
        ("Measured %s, load average %s before, %s after (2 cores shared)."):format(started, load0, load1),
        "",
        md,
        "",
        "Joined: from the first request sent until all called acquire and (plain) all nodes",
        "are in the line. Served: release to the last grant. Out of arrival order: grants whose",
        "acquire call came before one granted earlier in the same worker. CPU: the workers'",
        "utime + stime per second of the phase. RSS: the workers' VmRSS summed; the full GC:",
        "two `collectgarbage()` in a request, 4 requests per worker (spread by the kernel);",
        "malloc_trim: then glibc's `malloc_trim(0)` the same way (nginx's own request pools).",
        "<!-- ngx-hot:end -->",
    }, "\n"))
end
