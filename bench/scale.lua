-- bench/scale.lua: how zkcoord's costs grow with the size of the problem.
--
--   luajit bench/scale.lua lock    [--waiters 1,16,64,256,1000] [--procs 4] [--seconds 6]
--   luajit bench/scale.lua locks   [--count 10000]
--   luajit bench/scale.lua watches [--count 1000,10000]
--   (every one: [--servers HOSTS]; else a private standalone server)
--
-- lock: W contenders on one lock, spread over P processes (one session per
-- process, W/P coroutines on it: client:spawn), each acquiring and
-- releasing at once, so the line stays W long. Prints handoffs/s and the
-- handoff latency (a release to the next grant, from the merged logs of
-- the processes, on the shared monotonic clock) p50/p99.
-- locks: one session holds N different locks with on_lost registered:
-- client Lua memory per lock, and the time from the session's expiry until
-- every lock has reported on_lost.
-- watches: one client keeps N re-arming watches (client:watch, kind data):
-- Lua memory per watch, delivery latency p50/p99 of one change (200
-- changes on random nodes, set by another session), and the time to re-arm
-- and re-deliver all of them after a session expiry.
local root = (arg and arg[0] or ""):match("^(.*)/bench/[^/]*$") or "."
package.path = root .. "/spec/?.lua;" .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;"
    .. package.path
package.cpath = root .. "/" .. (os.getenv("ZKCOORD_CPATH") or "lua/?.so") .. ";" .. package.cpath

local zkcoord = require "zkcoord"
local proc = require "helpers.proc"
local now = zkcoord.now

local what = arg[1]
local opts = { waiters = "1,16,64,256,1000", procs = 4, seconds = 6, count = nil }
local i = 2
while arg[i] do
    local key, val = arg[i]:match("^%-%-(%w+)$"), arg[i + 1]
    if not key or val == nil then
        io.stderr:write("usage: luajit bench/scale.lua lock|locks|watches [--option value ...]\n")
        os.exit(64)
    end
    opts[key] = tonumber(val) or val
    i = i + 2
end
if what ~= "lock" and what ~= "locks" and what ~= "watches" then
    io.stderr:write("usage: luajit bench/scale.lua lock|locks|watches [--option value ...]\n")
    os.exit(64)
end

local server
local hosts = opts.servers or os.getenv("ZK_HOSTS")
if not hosts or hosts == "" then
    local err
    server, err = require("helpers.zkserver").start({ tick_time = 500,
                                                       extra = { "jute.maxbuffer=4194304" } })
    if not server then
        io.stderr:write("scale.lua: could not start ZooKeeper: ", tostring(err), "\n")
        os.exit(2)
    end
    hosts = server.hosts
end
local base = ("/zkcoord-scale-%d-%d"):format(proc.getpid(), os.time())

local function list(s)
    local out = {}
    for n in tostring(s):gmatch("%d+") do out[#out + 1] = tonumber(n) end
    return out
end

local function pct(sorted, p)
    if #sorted == 0 then return 0 end
    return sorted[math.max(1, math.ceil(#sorted * p))]
end

local function quiet(level, msg)
    if level == "error" then io.stderr:write("zkcoord [error] ", msg, "\n") end
end

local function connect(o)
    o = o or {}
    o.servers, o.logger = hosts, o.logger or quiet
    o.session_timeout = o.session_timeout or 10
    return assert(zkcoord.connect(o))
end

-- Expires `c`'s session: a second handle joins it and closes it. The
-- client may win its session back meanwhile, so again until it changed.
local function expire(c)
    local sid, pw = c:session_id(), c:session_password()
    local deadline = now() + 30
    repeat
        local other = zkcoord.connect { servers = hosts, session_id = sid,
                                        session_password = pw, reconnect = false,
                                        session_timeout = c:session_timeout(), logger = quiet }
        if other then
            other:close()
        end
        local t = now()
        while c:session_id() == sid and now() - t < 2 do c:dispatch(0.01) end
    until c:session_id() ~= sid or now() > deadline
    assert(c:session_id() ~= sid, "the session did not expire")
end

local function lua_kb()
    collectgarbage()
    collectgarbage()
    return collectgarbage("count")
end


-- ---------------------------------------------------------------------------
if what == "lock" then
    local WORKER = [[
local zkcoord = require "zkcoord"
local core = require "zkcoord.core"
local path, k, seconds, log = ...
k, seconds = tonumber(k), tonumber(seconds)
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 10 })
local lock = c:lock(path)
local events = {}
local stop = core.now() + seconds
for _ = 1, k do
    c:spawn(function()
        while core.now() < stop do
            local ok = lock:acquire(seconds + 30)
            if not ok then break end
            events[#events + 1] = ("a %.6f"):format(core.now())
            events[#events + 1] = ("r %.6f"):format(core.now())
            lock:release()
        end
    end)
end
c:run(seconds + 60)
local f = assert(io.open(log, "w"))
f:write(table.concat(events, "\n"), "\n")
f:close()
c:close()
]]
    local dir = proc.mktemp_dir("zkcoord-scale")
    local script = dir .. "/worker.lua"
    assert(proc.write_file(script, WORKER))
    local env = {
        LUA_PATH = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;;",
        LUA_CPATH = root .. "/" .. (os.getenv("ZKCOORD_CPATH") or "lua/?.so") .. ";;",
        ZK_HOSTS = hosts,
    }
    print("| waiters | processes x coroutines | handoffs/s | handoff p50 | handoff p99 |")
    print("|---|---|---|---|---|")
    for _, w in ipairs(list(opts.waiters)) do
        local procs = math.min(opts.procs, w)
        local path = ("%s/lock-%d"):format(base, w)
        local pids, logs = {}, {}
        for p = 1, procs do
            local k = math.floor(w / procs) + (p <= w % procs and 1 or 0)
            logs[p] = ("%s/w%d-%d.log"):format(dir, w, p)
            pids[p] = assert(proc.spawn({ "luajit", script, path, tostring(k),
                                          tostring(opts.seconds), logs[p] },
                                        { env = env, stderr = dir .. "/err.log" }))
        end
        for _, pid in ipairs(pids) do
            assert(proc.wait_exit(pid, opts.seconds + 120), "a worker did not finish")
        end
        local ev = {}
        for _, f in ipairs(logs) do
            for kind, t in (proc.read_file(f) or ""):gmatch("(%a) (%S+)") do
                ev[#ev + 1] = { kind, tonumber(t) }
            end
        end
        table.sort(ev, function(a, b) return a[2] < b[2] end)
        local lat, last_r, grants, first, last = {}, nil, 0, nil, nil
        for _, e in ipairs(ev) do
            if e[1] == "a" then
                grants = grants + 1
                first = first or e[2]
                last = e[2]
                if last_r then lat[#lat + 1] = e[2] - last_r end
            else
                last_r = e[2]
            end
        end
        table.sort(lat)
        local span = (last or 0) - (first or 0)
        print(("| %d | %d x %s | %.0f | %.2f ms | %.2f ms |"):format(
            w, procs, w % procs == 0 and tostring(math.floor(w / procs))
                      or "~" .. math.floor(w / procs),
            span > 0 and (grants - 1) / span or 0, 1000 * pct(lat, 0.5), 1000 * pct(lat, 0.99)))
    end
    proc.rm_rf(dir)

-- ---------------------------------------------------------------------------
elseif what == "locks" then
    local n = tonumber(opts.count) or 10000
    local c = connect()
    local before = lua_kb()
    local locks, lost, last_lost = {}, 0, nil
    local function on_lost()
        lost = lost + 1
        last_lost = now()
    end
    local t0 = now()
    local WORKERS = 64        -- coroutines on the session, each taking its share in turn
    for w = 1, WORKERS do
        c:spawn(function()
            for k = w, n, WORKERS do
                local l = c:lock(("%s/locks/l%d"):format(base, k))
                l:on_lost(on_lost)
                if l:acquire(60) then locks[#locks + 1] = l end
            end
        end)
    end
    assert(c:run(900), "acquiring did not finish")
    local took = now() - t0
    local held = #locks
    local per = (lua_kb() - before) * 1024 / held
    local t1 = now()
    expire(c)
    while lost < held and now() - t1 < 120 do c:dispatch(0.01) end
    print(("%d of %d locks held on one session (acquired in %.1f s, %.0f/s, %d coroutines); Lua "
           .. "memory %.0f bytes per held lock; %d on_lost, the last %.3f s after the expiry "
           .. "was sent"):format(held, n, took, held / took, WORKERS, per, lost,
                                 (last_lost or now()) - t1))
    c:close()

-- ---------------------------------------------------------------------------
elseif what == "locks" then
    local n = tonumber(opts.count) or 10000
    local c = connect { session_timeout = 4 }
    local before = lua_kb()
    local locks, lost = {}, 0
    local function on_lost() lost = lost + 1 end
    local t0 = now()
    for k = 1, n do
        c:spawn(function()
            local l = c:lock(("%s/locks/l%d"):format(base, k))
            l:on_lost(on_lost)
            assert(l:acquire(60))
            locks[k] = l
        end)
    end
    assert(c:run(600), "acquiring did not finish")
    local took = now() - t0
    local per = (lua_kb() - before) * 1024 / n
    expire(c)
    local t1 = now()
    while lost < n and now() - t1 < 120 do c:dispatch(0.01) end
    local held = 0
    for _ in pairs(locks) do held = held + 1 end    -- kept referenced until here
    print(("%d locks on one session: acquired in %.1f s (%.0f/s, coroutines on one session); "
           .. "Lua memory %.0f bytes per held lock; all %d on_lost %.3f s after the expiry "
           .. "was sent"):format(held, took, n / took, per, lost, now() - t1))
    c:close()

-- ---------------------------------------------------------------------------
else
    for _, n in ipairs(list(opts.count or "1000,10000")) do
        local writer = connect()
        local c = connect { session_timeout = 4 }
        local dir = ("%s/w%d"):format(base, n)
        assert(writer:create(dir, nil, { parents = true }))
        local fs = {}
        for k = 1, n do
            fs[#fs + 1] = writer:send("create", ("%s/n%d"):format(dir, k), "0")
            if #fs == 1000 or k == n then
                for _, f in ipairs(fs) do assert(f:wait(30)) end
                fs = {}
            end
        end
        local before = lua_kb()
        local seen, delivered = {}, 0
        local ws = {}
        local t0 = now()
        for k = 1, n do
            local key = k
            ws[k] = assert(c:watch(("%s/n%d"):format(dir, k), function(data)
                seen[key] = data
                delivered = delivered + 1
            end))
        end
        local arm = now() - t0
        local per = (lua_kb() - before) * 1024 / n
        -- delivery latency of one change
        local lat = {}
        for r = 1, 200 do
            local k = math.random(n)
            local v = tostring(r)
            local t = now()
            assert(writer:set(("%s/n%d"):format(dir, k), v))
            while seen[k] ~= v and now() - t < 5 do c:dispatch(0.0005) end
            lat[#lat + 1] = now() - t
        end
        table.sort(lat)
        -- re-arm and re-deliver after an expiry: every fn runs again
        delivered = 0
        local t1 = now()
        expire(c)
        while delivered < n and now() - t1 < 300 do c:dispatch(0.01) end
        print(("%d watches on one client: armed in %.2f s; Lua memory %.0f bytes per watch; "
               .. "one change delivered p50 %.2f ms p99 %.2f ms (set on another session); after "
               .. "an expiry %d re-delivered in %.2f s"):format(n, arm, per, 1000 * pct(lat, 0.5),
                                                          1000 * pct(lat, 0.99), delivered,
                                                          now() - t1))
        for _, w in ipairs(ws) do w:cancel() end
        c:close()
        writer:close()
    end
end

if server then
    server:stop()
end
