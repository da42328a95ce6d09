-- bench/ngx.lua: the nginx waiter, doorbell pump vs polling fallback.
--   luajit bench/ngx.lua [--doc] [--idle SECONDS]
-- Starts its own ZooKeeper and two private nginx instances (2 workers
-- each) with the same handlers: one with the doorbell pump (sock_dir
-- /tmp), one forced onto the polling fallback (sock_dir /nonexistent).
-- Measures, side by side: idle worker CPU (both idle over the same
-- window), lock handoff latency (two requests ping-ponging a lock),
-- get() round trip inside a worker, /ping latency idle and while 200
-- requests wait on a held lock, and the workers' CPU during that wait.
-- Prints a markdown table; --doc also writes it into docs/PERFORMANCE.md
-- between <!-- ngx:begin --> and <!-- ngx:end -->.
package.path = "spec/?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("ZKCOORD_CPATH") or "lua/?.so") .. ";" .. package.cpath

local zkserver = require "helpers.zkserver"
local nginx = require "helpers.nginx"
local proc = require "helpers.proc"
local zkcoord = require "zkcoord"

local write_doc, idle_secs = false, 10
do
    local i = 1
    while arg[i] do
        if arg[i] == "--doc" then
            write_doc = true
        elseif arg[i] == "--idle" then
            i = i + 1
            idle_secs = assert(tonumber(arg[i]), "--idle needs seconds")
        else
            error("usage: luajit bench/ngx.lua [--doc] [--idle SECONDS]")
        end
        i = i + 1
    end
end

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

local function sh(cmd)
    local f = assert(io.popen(cmd))
    local out = f:read("*a")
    f:close()
    return out
end

local CLK_TCK = tonumber(sh("getconf CLK_TCK")) or 100
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
    local doc = "docs/PERFORMANCE.md"
    local cpuname = sh("grep -m1 'model name' /proc/cpuinfo"):gsub("model name%s*:%s*", "")
                                                           :gsub("\n", "")
    local load = sh("cut -d' ' -f1-3 /proc/loadavg"):gsub("\n", "")
    local nver = sh("nginx -v 2>&1"):gsub("\n", ""):gsub("^nginx version: ", "")
    local section = table.concat({
        "<!-- ngx:begin -->",
        "## Inside nginx: doorbell pump vs polling fallback",
        "",
        "Command: `luajit bench/ngx.lua --doc` (starts its own ZooKeeper, forceSync=no, and two",
        "private nginx instances with 2 workers each on 127.0.0.1; the polling one is forced by",
        "`init_worker{ sock_dir = \"/nonexistent\" }`).",
        ("Measured %s on %s, %d cores, %s, load average %s (other work was running)."):format(
            os.date("!%Y-%m-%d"), cpuname, tonumber(sh("nproc")) or 0, nver, load),
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
    }, "\n")
    local f = io.open(doc)
    local text = f and f:read("*a") or "# Performance\n"
    if f then f:close() end
    if text:find("<!%-%- ngx:begin %-%->") then
        text = text:gsub("<!%-%- ngx:begin %-%->.-<!%-%- ngx:end %-%->", function() return section end)
    else
        text = text .. "\n" .. section .. "\n"
    end
    f = assert(io.open(doc, "w"))
    f:write(text)
    f:close()
    print("wrote " .. doc)
end
