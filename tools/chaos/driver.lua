-- chaos.driver: one chaos run from start to end (tools/chaos.lua describes
-- it): the ensemble and the proxies, the contenders, the loop that injects
-- faults (chaos/faults.lua) while watching contenders and servers, then the
-- end: faults undone, contenders stopped, servers up, leftovers listed.
-- Everything goes to DIR/driver.log for the checker (chaos/check.lua).
local zkcoord = require "zkcoord"
local proc = require "helpers.proc"
local zkserver = require "helpers.zkserver"
local tcpproxy = require "helpers.tcpproxy"
local world = require "chaos.world"
local faults = require "chaos.faults"
local recipes = require "chaos.recipes"

local now = zkcoord.now
local PATHS = world.PATHS

local _M = {}

local function admin_client(w)
    return assert(zkcoord.connect { servers = w.ens.hosts, session_timeout = 10,
                                    connect_timeout = 30, logger = world.quiet_logger })
end

-- The ensemble, the paths, and for each contender its three proxies:
-- contender i reaches server s only through proxies[i][s].
local function setup(w)
    w.dlog("config", { duration = w.duration, contenders = w.ncont, seed = w.seed, st = w.st,
                       cap = w.cap, gap_min = w.gap_min, gap_max = w.gap_max,
                       pid = proc.getpid(), recipes = table.concat(w.recipes, ",") })
    w.say(("chaos: seed %d, %d contenders, %g s, session timeout %g s, logs in %s")
        :format(w.seed, w.ncont, w.duration, w.st, w.dir))
    local err
    w.ens = w.shared_ens
    if not w.ens then
        w.ens, err = zkserver.start_ensemble { size = 3, tick_time = 500, timeout = 180 }
        assert(w.ens, "ensemble: " .. tostring(err))
    end
    w.dlog("ensemble", { hosts = w.ens.hosts, leader = w.ens:leader() })

    local admin = admin_client(w)
    local paths = { "/chaos", PATHS.lock, PATHS.rw }
    w.parts = {}
    -- Where the nodes of holders go: listed at the end until empty.
    w.held_paths = { PATHS.lock, PATHS.rw }
    for _, name in ipairs(w.recipes) do
        local part = recipes.part(name)
        if part then
            w.parts[#w.parts + 1] = part
            for _, p in ipairs(part.paths or {}) do paths[#paths + 1] = p end
            for _, p in ipairs(part.held or {}) do w.held_paths[#w.held_paths + 1] = p end
        end
    end
    for _, p in ipairs(paths) do
        local ok, cerr = admin:create(p)
        assert(ok or cerr == "nodeexists", "create " .. p .. ": " .. tostring(cerr))
    end
    w.admin = admin     -- the recipes' probes read the server's state with it

    for i = 1, w.ncont do
        local ci = { id = i, inc = 0, proxies = {}, status = "new" }
        local hosts = {}
        for s = 1, 3 do
            local p = assert(tcpproxy.start("127.0.0.1", w.ens.servers[s].port))
            ci.proxies[s] = p
            w.all_proxies[#w.all_proxies + 1] = p
            hosts[s] = p.hosts
        end
        ci.servers = table.concat(hosts, ",")
        w.contenders[i] = ci
    end
end

-- A contender that died on its own is restarted (unless stopping or under a fault).
local function watch_contenders(w)
    for _, ci in ipairs(w.contenders) do
        if (ci.status == "running" or ci.status == "paused") and not proc.alive(ci.pid) then
            w.dlog("died", { target = ci.id, inc = ci.inc, pid = ci.pid })
            ci.status = "dead"
            if not w.stopping and not ci.busy then
                world.spawn(w, ci)
            end
        end
    end
end

-- What the recipes' parts read from the server (every second), logged.
local function probe(w)
    if now() < (w.next_probe or 0) then
        return
    end
    w.next_probe = now() + 1
    for _, part in ipairs(w.parts) do
        if part.probe then
            part.probe(w.admin, w.dlog)
        end
    end
end

local function progress(w)
    local parts = {}
    for _, k in ipairs(faults.KINDS) do parts[#parts + 1] = k .. "=" .. (w.counts[k] or 0) end
    w.say(("chaos: %d/%d s, faults %s"):format(math.floor(now() - w.t_start), w.duration,
                                                table.concat(parts, " ")))
end

-- The chaos: at most one fault every gap_min..gap_max s until t_end.
local function chaos_loop(w)
    local next_fault = w.t_start + math.min(3, w.duration / 5)
    local last_report = w.t_start
    while now() < w.t_end do
        world.run_timers(w, false)
        watch_contenders(w)
        faults.watch_server(w)
        if w.pending_hold then
            faults.watch_hold(w)
        end
        if now() >= next_fault then
            local kind = faults.draw(w)
            if kind then
                next_fault = now() + w.rng:range(w.gap_min, w.gap_max)
            else
                next_fault = now() + 0.5
            end
        end
        probe(w)
        if now() - last_report >= 60 then
            last_report = now()
            progress(w)
        end
        proc.sleep(0.05)
    end
end

-- Every server up (a restart may still be pending).
local function servers_up(w)
    for i, s in ipairs(w.ens.servers) do
        if not s:running() then
            s:start { wait = false }
            w.dlog("server_start", { server = i, final = 1 })
        end
    end
    local rok, rerr = w.ens:wait_ready(180)
    w.dlog("ensemble_ready", { ok = rok and 1 or 0, err = rerr and rerr:sub(1, 200) })
    -- the server fault under way ends now that the ensemble is ready (its
    -- probe is rate limited: left open, the fault would cover the whole
    -- settle phase, and no probe of it could be judged)
    local deadline = now() + 10
    while w.server_busy and now() < deadline do
        faults.watch_server(w)
        proc.sleep(0.05)
    end
end

-- The first running contender that has not started every part of its run
-- yet (world.started_file), or nil.
local function starting(w)
    for _, ci in ipairs(w.contenders) do
        if ci.status == "running"
                and proc.read_file(world.started_file(w, ci)) ~= ci.inc .. "\n" then
            return ci
        end
    end
    return nil
end

-- With the recipes that promise a stable state (a group's views, the
-- partitions' owners, persistent nodes): every server up, then no fault
-- for 3 session timeouts + 2 s (a killed contender's session expires, the
-- members see it, take their share), probing all along, then 3 more probes:
-- the checker (chaos/check/stable.lua) compares the views with these.
-- A contender restarted near the end starts its parts during the settle:
-- its group join waits out its killed predecessor's session (a session
-- timeout, more under load) before it registers its instances, a change of
-- the membership. The quiet time then counts from its start (at most one
-- more settle): else no probe came that long after the last change, and
-- the checkers found the run "never stable" (seed 41, load 11).
local function settle(w)
    local any = false
    for _, part in ipairs(w.parts) do
        if part.probe then any = true end
    end
    if not any then
        return
    end
    servers_up(w)
    local quiet = 3 * w.st + 2
    -- parts whose operations change a membership (service discovery's
    -- registrations) stop changing it: the stable state is then one state
    proc.write_file(w.dir .. "/quiet", "settling\n")
    w.dlog("settle", { secs = quiet })
    w.say(("chaos: no fault for %g s, then the stable state is probed"):format(quiet))
    local t_end = now() + quiet + 3
    local t_cap = t_end + quiet + 3
    local late
    while now() < t_end do
        local ci = starting(w)
        if ci then
            late = late or { target = ci.id, inc = ci.inc }
            t_end = math.min(t_cap, now() + quiet + 3)
        elseif late then
            w.dlog("settle_started", late)     -- the quiet time counts from here
            late = nil
        end
        probe(w)
        proc.sleep(0.05)
    end
    w.dlog("settled", {})
end

-- No new fault; those under way run their course (a pause still lasts
-- longer than the session timeout), then DIR/stop tells the contenders to
-- finish; those that do not exit in time are killed (the checker counts
-- them as hangs).
local function stop(w)
    w.stopping = true
    w.dlog("chaos_end", {})
    faults.cancel_pending(w)
    local undo_deadline = now() + 30
    while #w.timers > 0 and now() < undo_deadline do
        world.run_timers(w, false)
        faults.watch_server(w)
        proc.sleep(0.05)
    end
    world.run_timers(w, true)
    for _, ci in ipairs(w.contenders) do
        os.remove(world.hold_file(w, ci))
    end
    w.dlog("faults_undone", {})
    settle(w)
    proc.write_file(w.dir .. "/stop", "stop\n")
    w.say("chaos: stopping contenders")
    local exit_deadline = now() + 60 + 3 * w.st
    for _, ci in ipairs(w.contenders) do
        if ci.status == "running" or ci.status == "paused" then
            proc.kill(ci.pid, "CONT")
            if not proc.wait_exit(ci.pid, math.max(1, exit_deadline - now())) then
                w.dlog("stuck", { target = ci.id, inc = ci.inc, pid = ci.pid })
                proc.kill(ci.pid, "KILL")
                proc.wait_exit(ci.pid, 5)
            end
            ci.status = "stopped"
        end
    end
    w.dlog("contenders_stopped", {})
end

-- The lock and rwlock paths (and those of the recipes' holders) listed until empty (the sessions of killed
-- contenders expire), then the counter read.
local function leftovers(w)
    w.say("chaos: waiting for lock nodes to go")
    local admin = admin_client(w)
    local left, names
    local leak_deadline = now() + 3 * w.st + 30
    repeat
        left, names = 0, {}
        for _, path in ipairs(w.held_paths) do
            local kids = admin:children(path)
            for _, k in ipairs(kids or {}) do
                left = left + 1
                local stat = admin:exists(path .. "/" .. k)
                names[#names + 1] = path .. "/" .. k .. "@" .. tostring(stat and stat.ephemeral_owner)
            end
        end
        if left > 0 then proc.sleep(0.5) end
    until left == 0 or now() >= leak_deadline
    w.dlog("final_nodes", { count = left, names = table.concat(names, ",") })
    if w.has.counter then
        admin:sync(PATHS.counter)
        local data, cerr = admin:get(PATHS.counter)
        w.dlog("final_counter", { value = data and tonumber(data) or -1,
                                  err = not data and cerr or nil })
    end
    for _, part in ipairs(w.parts) do
        if part.final then
            part.final(admin, w.dlog)
        end
    end
    admin:close()
    w.admin:close()
end

--- The whole run on state w (chaos.world.new); raises on a setup failure.
function _M.run(w)
    setup(w)
    w.t_start = now()
    w.t_end = w.t_start + w.duration
    w.hard = w.t_end + 180
    for _, ci in ipairs(w.contenders) do
        world.spawn(w, ci)
    end
    chaos_loop(w)
    stop(w)
    servers_up(w)
    leftovers(w)
end

return _M
