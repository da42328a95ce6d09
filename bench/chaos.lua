-- bench/chaos.lua: the chaos run. Contenders take a lock, a read-write lock
-- and a counter while faults are injected; the checker (bench/chaos/check.lua)
-- then proves from the logs that nothing unsafe happened.
--
--   luajit bench/chaos.lua [--duration S] [--contenders N] [--seed X]
--                          [--session-timeout S] [--dir DIR] [--keep] [--doc]
--
-- Defaults: 600 s, 8 contenders, a random seed (printed), session timeout
-- 4 s. Starts a 3-node ZooKeeper ensemble on 127.0.0.1; for each contender
-- three TCP proxies (spec/helpers/tcpproxy.lua, one per server), so that its
-- `servers` string is its own three proxies and one contender's connections
-- can be cut, black-holed or delayed alone. Contenders are separate luajit
-- processes (bench/chaos/contender.lua) looping over: lock acquire (with a
-- timeout) / critical section writing the fencing token to a flock-guarded
-- resource file / release; rwlock read or write (writers write their token
-- to a second resource); counter add(1).
--
-- Meanwhile, from a generator seeded with --seed, at most one fault every
-- 1.5..5 s and at most `cap` of each kind (a shuffled deck, so every kind
-- comes up): SIGKILL and restart of a contender; SIGSTOP of a lock holder
-- (asked to hold the lock long first) for longer than the session timeout,
-- then SIGCONT; kill and restart of a follower, of the leader; expiry of a
-- contender's session (a second handle with its published id and password
-- closes it); cut, black hole (shorter or longer than the session
-- timeout) and delay of one contender's connections. Half of the expiries
-- and black holes also hit a contender asked to hold the lock. Every fault
-- is logged with its monotonic start and end in DIR/driver.log.
--
-- At the end: every fault undone, DIR/stop tells the contenders to finish
-- and close (those that do not exit in time are killed and counted as
-- hangs), all servers up again, then the lock and rwlock paths are listed
-- until empty (the sessions of killed contenders expire) and the counter
-- read; then the checker runs. Exit status 0 when it found no violation,
-- no hang and no leaked node. --doc rewrites the generated part of the
-- chaos section of docs/RELIABILITY.md. Logs stay in DIR (kept when
-- something failed, or with --keep).
--
-- As a module (spec/chaos_spec.lua): require("chaos").run(opts) returns the
-- checker's result table.
local function script_dir()
    local src = debug.getinfo(1, "S").source:match("^@(.*)$") or "bench/chaos.lua"
    local d = src:match("^(.*)/[^/]*$") or "."
    if d:sub(1, 1) ~= "/" then
        local p = io.popen("pwd")
        local cwd = p and p:read("*l") or "."
        if p then p:close() end
        d = cwd .. "/" .. d
    end
    return d
end

local BENCH = script_dir()
local ROOT = BENCH .. "/.."
package.path = ROOT .. "/spec/?.lua;" .. ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;"
    .. BENCH .. "/?.lua;" .. package.path
package.cpath = ROOT .. "/" .. (os.getenv("ZKCOORD_CPATH") or "lua/?.so") .. ";" .. package.cpath

local zkcoord = require "zkcoord"
local proc = require "helpers.proc"
local zkserver = require "helpers.zkserver"
local tcpproxy = require "helpers.tcpproxy"
local util = require "chaos.util"
local check = require "chaos.check"

local now = zkcoord.now

local _M = {}

local KINDS = { "kill_contender", "pause_contender", "kill_follower", "kill_leader",
                "expire_session", "cut", "blackhole", "delay" }
_M.KINDS = KINDS

local PATHS = { lock = "/chaos/lock", rw = "/chaos/rw", counter = "/chaos/counter" }


local function quiet_logger() end


--- Runs the chaos. opts: duration (s), contenders, seed, session_timeout,
--- dir, keep, print (function for progress lines, default none), gap_min,
--- gap_max. Returns the checker's result (see bench/chaos/check.lua) plus
--- dir and seed, or raises on a setup failure.
function _M.run(opts)
    opts = opts or {}
    local duration = opts.duration or 600
    local ncont = opts.contenders or 8
    local seed = opts.seed or (os.time() % 1000000)
    local st = opts.session_timeout or 4
    local gap_min, gap_max = opts.gap_min or 1.5, opts.gap_max or 5
    local say = opts.print or function() end
    local cap = math.max(2, math.ceil(duration / 15))
    local rng = util.rng(seed)

    local dir = opts.dir or assert(proc.mktemp_dir("zkcoord-chaos-"))
    assert(proc.mkdir_p(dir))
    local dlog, dlog_file = util.logger(dir .. "/driver.log", now)

    local ens, contenders, all_proxies = nil, {}, {}
    local stopping = false
    local timers = {}
    local counts = {}
    local server_busy        -- { idx =, phase = "down" | "starting", ... }
    local pending_hold       -- { c =, kind =, since =, act = }

    local function cleanup()
        for _, ci in ipairs(contenders) do
            if ci.pid and proc.alive(ci.pid) then
                proc.kill(ci.pid, "CONT")
                proc.kill(ci.pid, "KILL")
                proc.wait_exit(ci.pid, 5)
            end
        end
        for _, p in ipairs(all_proxies) do
            p:stop()
        end
        if ens then
            ens:destroy()
            ens = nil
        end
    end

    local function body()
        dlog("config", { duration = duration, contenders = ncont, seed = seed, st = st,
                         cap = cap, gap_min = gap_min, gap_max = gap_max,
                         pid = proc.getpid() })
        say(("chaos: seed %d, %d contenders, %g s, session timeout %g s, logs in %s")
            :format(seed, ncont, duration, st, dir))
        local err
        ens, err = zkserver.start_ensemble { size = 3, tick_time = 500, timeout = 180 }
        assert(ens, "ensemble: " .. tostring(err))
        dlog("ensemble", { hosts = ens.hosts, leader = ens:leader() })

        local admin = assert(zkcoord.connect { servers = ens.hosts, session_timeout = 10,
                                               connect_timeout = 30, logger = quiet_logger })
        for _, p in ipairs({ "/chaos", PATHS.lock, PATHS.rw }) do
            local ok, cerr = admin:create(p)
            assert(ok or cerr == "nodeexists", "create " .. p .. ": " .. tostring(cerr))
        end
        admin:close()

        -- Proxies: contender i reaches server s only through proxies[i][s].
        for i = 1, ncont do
            local ci = { id = i, inc = 0, proxies = {}, status = "new" }
            local hosts = {}
            for s = 1, 3 do
                local p = assert(tcpproxy.start("127.0.0.1", ens.servers[s].port))
                ci.proxies[s] = p
                all_proxies[#all_proxies + 1] = p
                hosts[s] = p.hosts
            end
            ci.servers = table.concat(hosts, ",")
            contenders[i] = ci
        end

        local t_start = now()
        local t_end = t_start + duration
        local hard = t_end + 180

        local function spawn(ci)
            ci.inc = ci.inc + 1
            local errlog = ("%s/c%d.%d.err"):format(dir, ci.id, ci.inc)
            local pid, perr = proc.spawn({ "luajit", BENCH .. "/chaos/contender.lua", ci.id, ci.inc,
                                           dir, ci.servers, st, seed, ("%.3f"):format(hard) },
                                         { owner = true, stdout = errlog, stderr = errlog })
            if not pid then
                dlog("spawn_fail", { target = ci.id, inc = ci.inc, err = perr })
                ci.status = "dead"
                return
            end
            ci.pid, ci.status = pid, "running"
            dlog("spawn", { target = ci.id, inc = ci.inc, pid = pid })
        end

        for _, ci in ipairs(contenders) do
            spawn(ci)
        end

        local function at(delay, fn)
            timers[#timers + 1] = { due = now() + delay, fn = fn }
        end

        local function run_timers(all)
            local t = now()
            local due, rest = {}, {}
            for _, tm in ipairs(timers) do
                if all or tm.due <= t then due[#due + 1] = tm else rest[#rest + 1] = tm end
            end
            timers = rest
            table.sort(due, function(a, b) return a.due < b.due end)
            for _, tm in ipairs(due) do
                tm.fn()
            end
        end

        local function set_proxies(ci, how, arg)
            for s, p in ipairs(ci.proxies) do
                local ok, perr
                if how == "delay" then ok, perr = p:delay(arg) else ok, perr = p[how](p) end
                if not ok then
                    dlog("proxy_error", { target = ci.id, server = s, cmd = how, err = perr })
                end
            end
        end

        local function fault_done(kind, ci, from, extra)
            local kv = { kind = kind, target = ci and ci.id, inc = ci and ci.inc, from = from,
                         to = now() }
            for k, v in pairs(extra or {}) do kv[k] = v end
            dlog("fault", kv)
        end

        local function free_contender(need_session)
            local cands = {}
            for _, ci in ipairs(contenders) do
                if ci.status == "running" and not ci.busy then
                    if not need_session or util.exists(("%s/c%d.session"):format(dir, ci.id)) then
                        cands[#cands + 1] = ci
                    end
                end
            end
            if #cands == 0 then
                return nil
            end
            return rng:pick(cands)
        end

        local function servers_ok()
            if server_busy then
                return false
            end
            for _, s in ipairs(ens.servers) do
                if not s:running() then
                    return false
                end
            end
            return true
        end

        local inject = {}

        function inject.kill_contender()
            local ci = free_contender()
            if not ci then return false end
            local from = now()
            ci.busy, ci.status = "kill", "dead"
            proc.kill(ci.pid, "KILL")
            proc.wait_exit(ci.pid, 5)
            os.remove(("%s/c%d.hold"):format(dir, ci.id))
            fault_done("kill_contender", ci, from, { pid = ci.pid })
            local pid = ci.pid
            at(rng:range(0.5, 2), function()
                ci.busy = nil
                if not stopping then
                    spawn(ci)
                else
                    dlog("not_restarted", { target = ci.id, inc = ci.inc, pid = pid })
                end
            end)
            return true
        end

        -- Holder-targeted faults: ask the contender for a long hold of the
        -- lock (DIR/c<ID>.hold), wait until it says it holds (at most 10 s),
        -- then act(ci, holding token or "none"). The act removes the hold
        -- file when its fault ends; the contender lets go 3 s later.
        local function hold_file(ci)
            return ("%s/c%d.hold"):format(dir, ci.id)
        end

        local function request_hold(ci, kind, act)
            ci.busy = kind
            util.write_file(hold_file(ci), "hold\n")
            pending_hold = { c = ci, kind = kind, since = now(), act = act }
            dlog("inject", { kind = kind, target = ci.id, inc = ci.inc, phase = "hold_requested" })
        end

        local function watch_hold()
            local ph = pending_hold
            local ci = ph.c
            local holding = "none"
            local text = util.read_file(("%s/c%d.holding"):format(dir, ci.id))
            local hinc, htok = (text or ""):match("^(%d+) (%-?%d+)")
            if hinc and tonumber(hinc) == ci.inc then
                holding = htok
            end
            if holding == "none" and now() - ph.since < 10 then
                return   -- not yet holding: wait (at most 10 s)
            end
            pending_hold = nil
            if ci.status ~= "running" then
                ci.busy = nil
                os.remove(hold_file(ci))
                return
            end
            ph.act(ci, holding)
        end

        function inject.pause_contender()
            if pending_hold then return false end
            local ci = free_contender()
            if not ci then return false end
            local secs = st + rng:range(2, 5)
            request_hold(ci, "pause_contender", function(_, holding)
                local from = now()
                proc.kill(ci.pid, "STOP")
                ci.status = "paused"
                dlog("inject", { kind = "pause_contender", target = ci.id, inc = ci.inc,
                                 pid = ci.pid, holding = holding, secs = secs })
                at(secs, function()
                    proc.kill(ci.pid, "CONT")
                    ci.status = "running"
                    ci.busy = nil
                    os.remove(hold_file(ci))
                    fault_done("pause_contender", ci, from, { pid = ci.pid, holding = holding })
                end)
            end)
            return true
        end

        local function kill_server(kind, idx, role)
            local s = ens.servers[idx]
            local from = now()
            s:kill()
            server_busy = { idx = idx, phase = "down", from = from, kind = kind, role = role }
            dlog("inject", { kind = kind, server = idx, role = role })
            at(rng:range(2, 6), function()
                local ok, serr = s:start { wait = false }
                dlog("server_start", { server = idx, ok = ok and 1 or 0, err = serr })
                server_busy.phase, server_busy.since, server_busy.next_probe = "starting", now(), 0
            end)
            return true
        end

        function inject.kill_follower()
            if not servers_ok() then return false end
            local leader = ens:leader()
            if not leader then return false end
            local f = {}
            for i = 1, #ens.servers do
                if i ~= leader then f[#f + 1] = i end
            end
            return kill_server("kill_follower", rng:pick(f), "follower")
        end

        function inject.kill_leader()
            if not servers_ok() then return false end
            local leader = ens:leader()
            if not leader then return false end
            return kill_server("kill_leader", leader, "leader")
        end

        local function watch_server()
            local sb = server_busy
            if not sb or sb.phase ~= "starting" or now() < sb.next_probe then
                return
            end
            sb.next_probe = now() + 0.5
            local s = ens.servers[sb.idx]
            if s:ready(0.3) then
                server_busy = nil
                dlog("fault", { kind = sb.kind, server = sb.idx, role = sb.role, from = sb.from,
                                to = now(), mode = s:mode(0.5) })
            elseif now() - sb.since > 90 then
                dlog("server_retry", { server = sb.idx, running = s:running() and 1 or 0 })
                s:kill()
                s:start { wait = false }
                sb.since = now()
            end
        end

        local function session_of(ci)
            local text = util.read_file(("%s/c%d.session"):format(dir, ci.id)) or ""
            local sid, pwhex, sinc = text:match("^(%x+) (%x+) (%d+)")
            if sid and tonumber(sinc) == ci.inc then
                return sid, pwhex
            end
            return nil
        end

        local function expire(ci, holding)
            local sid, pwhex = session_of(ci)
            local from = now()
            local ok, attempts, why = false, 0, nil
            local file = ("%s/c%d.session"):format(dir, ci.id)
            while sid and attempts < 3 and not ok do
                attempts = attempts + 1
                local other, cerr = zkcoord.connect {
                    servers = ens.hosts, session_id = sid, session_password = util.unhex(pwhex),
                    connect_timeout = 3, session_timeout = st, reconnect = false,
                    logger = quiet_logger }
                if other then
                    other:close()
                else
                    why = cerr
                end
                if cerr == "sessionexpired" then
                    ok = true   -- already gone (the contender will see it too)
                end
                -- Expired when the contender published another session.
                local deadline = now() + 3
                while not ok and now() < deadline do
                    local cur = (util.read_file(file) or ""):match("^(%x+)")
                    if cur and cur ~= sid then
                        ok = true
                    else
                        proc.sleep(0.05)
                    end
                end
            end
            ci.busy = nil
            os.remove(hold_file(ci))
            fault_done("expire_session", ci, from, { sid = sid, ok = ok and 1 or 0,
                                                     attempts = attempts, err = why,
                                                     holding = holding })
        end

        -- Half of the expiries and black holes hit a lock holder.
        function inject.expire_session()
            local ci = free_contender(true)
            if not ci or not session_of(ci) then return false end
            if not pending_hold and rng:float() < 0.5 then
                request_hold(ci, "expire_session", expire)
            else
                ci.busy = "expire"
                expire(ci, nil)
            end
            return true
        end

        function inject.cut()
            local ci = free_contender()
            if not ci then return false end
            local from = now()
            set_proxies(ci, "cut")
            fault_done("cut", ci, from)
            return true
        end

        local function blackhole(ci, holding)
            -- Half shorter than the session timeout (suspended, then back),
            -- half longer (the session is lost).
            local secs = rng:float() < 0.5 and rng:range(1, st * 0.8) or rng:range(st + 1, st + 3)
            local from = now()
            set_proxies(ci, "blackhole")
            dlog("inject", { kind = "blackhole", target = ci.id, inc = ci.inc, secs = secs,
                             holding = holding })
            at(secs, function()
                set_proxies(ci, "pass")
                ci.busy = nil
                os.remove(hold_file(ci))
                fault_done("blackhole", ci, from, { secs = secs, holding = holding })
            end)
        end

        function inject.blackhole()
            local ci = free_contender()
            if not ci then return false end
            if not pending_hold and rng:float() < 0.5 then
                request_hold(ci, "blackhole", blackhole)
            else
                ci.busy = "blackhole"
                blackhole(ci, nil)
            end
            return true
        end

        function inject.delay()
            local ci = free_contender()
            if not ci then return false end
            ci.busy = "delay"
            local ms = rng:range(0.1, 1.5)
            local secs = rng:range(2, 6)
            local from = now()
            set_proxies(ci, "delay", ms)
            dlog("inject", { kind = "delay", target = ci.id, inc = ci.inc, delay = ms, secs = secs })
            at(secs, function()
                set_proxies(ci, "pass")
                ci.busy = nil
                fault_done("delay", ci, from, { delay = ms, secs = secs })
            end)
            return true
        end

        local deck = {}
        local function draw()
            if #deck == 0 then
                for _, k in ipairs(KINDS) do deck[#deck + 1] = k end
                rng:shuffle(deck)
            end
            -- The first feasible kind; the others stay in the deck.
            for i, kind in ipairs(deck) do
                if (counts[kind] or 0) < cap and inject[kind]() then
                    table.remove(deck, i)
                    counts[kind] = (counts[kind] or 0) + 1
                    return kind
                end
            end
            return nil
        end

        local function watch_contenders()
            for _, ci in ipairs(contenders) do
                if (ci.status == "running" or ci.status == "paused") and not proc.alive(ci.pid) then
                    dlog("died", { target = ci.id, inc = ci.inc, pid = ci.pid })
                    ci.status = "dead"
                    if not stopping and not ci.busy then
                        spawn(ci)
                    end
                end
            end
        end

        -- The chaos.
        local next_fault = t_start + math.min(3, duration / 5)
        local last_report = t_start
        while now() < t_end do
            run_timers(false)
            watch_contenders()
            watch_server()
            if pending_hold then
                watch_hold()
            end
            if now() >= next_fault then
                local kind = draw()
                if kind then
                    next_fault = now() + rng:range(gap_min, gap_max)
                else
                    next_fault = now() + 0.5
                end
            end
            if now() - last_report >= 60 then
                last_report = now()
                local parts = {}
                for _, k in ipairs(KINDS) do parts[#parts + 1] = k .. "=" .. (counts[k] or 0) end
                say(("chaos: %d/%d s, faults %s"):format(math.floor(now() - t_start), duration,
                                                          table.concat(parts, " ")))
            end
            proc.sleep(0.05)
        end

        -- The end: no new fault; let those under way run their course (a
        -- pause still lasts longer than the session timeout), then stop the
        -- contenders.
        stopping = true
        dlog("chaos_end", {})
        if pending_hold then
            local ci = pending_hold.c   -- a fault not begun yet: cancelled
            ci.busy = nil
            os.remove(("%s/c%d.hold"):format(dir, ci.id))
            dlog("inject", { kind = pending_hold.kind, target = ci.id, phase = "cancelled" })
            counts[pending_hold.kind] = counts[pending_hold.kind] - 1
            pending_hold = nil
        end
        local undo_deadline = now() + 30
        while #timers > 0 and now() < undo_deadline do
            run_timers(false)
            watch_server()
            proc.sleep(0.05)
        end
        run_timers(true)
        for _, ci in ipairs(contenders) do
            os.remove(("%s/c%d.hold"):format(dir, ci.id))
        end
        dlog("faults_undone", {})
        util.write_file(dir .. "/stop", "stop\n")
        say("chaos: stopping contenders")
        local exit_deadline = now() + 60 + 3 * st
        for _, ci in ipairs(contenders) do
            if ci.status == "running" or ci.status == "paused" then
                proc.kill(ci.pid, "CONT")
                if not proc.wait_exit(ci.pid, math.max(1, exit_deadline - now())) then
                    dlog("stuck", { target = ci.id, inc = ci.inc, pid = ci.pid })
                    proc.kill(ci.pid, "KILL")
                    proc.wait_exit(ci.pid, 5)
                end
                ci.status = "stopped"
            end
        end
        dlog("contenders_stopped", {})

        -- Every server up (a restart may still be pending), then the leftovers.
        for i, s in ipairs(ens.servers) do
            if not s:running() then
                s:start { wait = false }
                dlog("server_start", { server = i, final = 1 })
            end
        end
        local rok, rerr = ens:wait_ready(180)
        dlog("ensemble_ready", { ok = rok and 1 or 0, err = rerr and rerr:sub(1, 200) })
        if server_busy then
            watch_server()
        end

        say("chaos: waiting for lock nodes to go")
        admin = assert(zkcoord.connect { servers = ens.hosts, session_timeout = 10,
                                         connect_timeout = 30, logger = quiet_logger })
        local left, names
        local leak_deadline = now() + 3 * st + 30
        repeat
            left, names = 0, {}
            for _, key in ipairs({ "lock", "rw" }) do
                local kids = admin:children(PATHS[key])
                if kids then
                    for _, k in ipairs(kids) do
                        left = left + 1
                        local stat = admin:exists(PATHS[key] .. "/" .. k)
                        names[#names + 1] = key .. ":" .. k .. "@"
                            .. tostring(stat and stat.ephemeral_owner)
                    end
                end
            end
            if left > 0 then proc.sleep(0.5) end
        until left == 0 or now() >= leak_deadline
        dlog("final_nodes", { count = left, names = table.concat(names, ",") })
        admin:sync(PATHS.counter)
        local data, cerr = admin:get(PATHS.counter)
        dlog("final_counter", { value = data and tonumber(data) or -1, err = not data and cerr or nil })
        admin:close()
    end

    local ok, err = xpcall(body, debug.traceback)
    if not ok then
        dlog("driver_error", { msg = tostring(err):sub(1, 2000) })
    end
    cleanup()
    dlog_file:close()
    if not ok then
        error("chaos driver failed (logs in " .. dir .. "): " .. tostring(err), 0)
    end

    local result = check.run(dir)
    result.dir, result.seed = dir, seed
    if result.ok and not opts.keep and not opts.dir then
        proc.rm_rf(dir)
        result.dir = nil
    end
    return result
end


-- Replaces the text between two markers of a file (the markers stay).
local function replace_between(text, b, e, body)
    local s1, e1 = text:find(b, 1, true)
    local s2 = text:find(e, 1, true)
    if not s1 or not s2 or s2 < e1 then
        return nil
    end
    return text:sub(1, e1) .. "\n" .. body .. "\n" .. text:sub(s2)
end


local DOC_SKELETON = [[
# Reliability

What zkcoord has been shown to survive, with the commands to reproduce it.

## Chaos run

<!-- chaos:begin -->
<!-- chaos-run:begin -->
<!-- chaos-run:end -->
<!-- chaos:end -->

## Fuzzer

<!-- fuzz:begin -->
<!-- fuzz:end -->

## Soak

<!-- soak:begin -->
<!-- soak:end -->
]]


--- Writes the generated part of the chaos section of docs/RELIABILITY.md.
function _M.write_doc(result, cmd)
    local path = ROOT .. "/docs/RELIABILITY.md"
    local text = util.read_file(path) or DOC_SKELETON
    if not text:find("<!-- chaos:begin -->", 1, true) then
        text = text .. "\n## Chaos run\n\n<!-- chaos:begin -->\n<!-- chaos:end -->\n"
    end
    if not text:find("<!-- chaos-run:begin -->", 1, true) then
        text = text:gsub("<!%-%- chaos:begin %-%->",
                         "<!-- chaos:begin -->\n<!-- chaos-run:begin -->\n<!-- chaos-run:end -->", 1)
    end
    local uname = io.popen("uname -srm"):read("*l") or "?"
    local cpu = (io.popen("grep -m1 'model name' /proc/cpuinfo"):read("*l") or ""):match(":%s*(.*)$")
    local ncpu = io.popen("nproc"):read("*l") or "?"
    local zkv = (io.popen("dpkg-query -W -f='${Version}' zookeeper 2>/dev/null"):read("*l") or "?")
    local body = table.concat({
        ("Last full run: %s, on %s (%s CPUs, %s), ZooKeeper %s (Debian package), "
         .. "libzookeeper_mt %s, LuaJIT."):format(os.date("!%Y-%m-%d %H:%M UTC"), uname, ncpu,
                                                  cpu or "?", zkv,
                                                  tostring(zkcoord.zookeeper_version)),
        "",
        "```sh",
        cmd,
        "```",
        "",
        result.text,
    }, "\n")
    local new = replace_between(text, "<!-- chaos-run:begin -->", "<!-- chaos-run:end -->", body)
    assert(new, "docs/RELIABILITY.md: chaos-run markers not found")
    assert(util.write_file(path, new))
    return path
end


local function this_is_the_script()
    local src = debug.getinfo(1, "S").source:match("^@(.*)$")
    return arg and arg[0] and src and (arg[0] == src or arg[0]:match("bench/chaos%.lua$"))
        and not package.loaded["busted"]
end


if this_is_the_script() then
    local opts, doc = { print = print }, false
    local i = 1
    while i <= #arg do
        local a = arg[i]
        local function num()
            i = i + 1
            local v = tonumber(arg[i])
            if not v then
                io.stderr:write(a .. " needs a number\n")
                os.exit(64)
            end
            return v
        end
        if a == "--duration" then opts.duration = num()
        elseif a == "--contenders" then opts.contenders = num()
        elseif a == "--seed" then opts.seed = num()
        elseif a == "--session-timeout" then opts.session_timeout = num()
        elseif a == "--dir" then i = i + 1; opts.dir = arg[i]
        elseif a == "--keep" then opts.keep = true
        elseif a == "--doc" then doc = true
        else
            io.stderr:write("usage: luajit bench/chaos.lua [--duration S] [--contenders N] "
                            .. "[--seed X] [--session-timeout S] [--dir DIR] [--keep] [--doc]\n")
            os.exit(64)
        end
        i = i + 1
    end
    opts.seed = opts.seed or (os.time() % 1000000)
    local ok, result = pcall(_M.run, opts)
    zkserver.destroy_all()
    if not ok then
        io.stderr:write(tostring(result), "\n")
        os.exit(2)
    end
    print(result.text)
    local cmd = ("luajit bench/chaos.lua --duration %g --contenders %d --seed %d")
        :format(opts.duration or 600, opts.contenders or 8, opts.seed)
    print("reproduce: " .. cmd)
    if result.dir then
        print("logs: " .. result.dir)
    end
    if doc then
        print("wrote " .. _M.write_doc(result, cmd))
    end
    os.exit(result.ok and 0 or 1)
end

return _M
