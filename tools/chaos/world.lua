-- chaos.world: the state of one chaos run and what every part of the driver
-- does with it: the options, the seeded generator, the driver log, the
-- ensemble, the contenders (each with its three TCP proxies), the timers,
-- spawning a contender, logging the end of a fault.
--
-- A contender record: { id, inc (incarnation: restarts count up), pid,
-- proxies = { one per server }, servers (its own "host:port,..." string),
-- status = "new" | "running" | "paused" | "dead" | "stopped",
-- busy = the fault it is under, or nil }.
local zkcoord = require "zkcoord"
local proc = require "helpers.proc"
local util = require "chaos.util"
local recipes = require "chaos.recipes"

local now = zkcoord.now

local _M = {}

_M.PATHS = { lock = "/chaos/lock", rw = "/chaos/rw", counter = "/chaos/counter" }

function _M.quiet_logger() end

--- The run's state from the options of chaos.run (see tools/chaos.lua).
--- `here` is the tools/ directory (where chaos/contender.lua is).
function _M.new(opts, here)
    local duration = opts.duration or 600
    local w = {
        here = here,
        duration = duration,
        ncont = opts.contenders or 8,
        seed = opts.seed or (os.time() % 1000000),
        st = opts.session_timeout or 4,
        gap_min = opts.gap_min or 1.5, gap_max = opts.gap_max or 5,
        say = opts.print or function() end,
        shared_ens = opts.ensemble,   -- a running 3-node ensemble to use (and leave running)
        cap = math.max(2, math.ceil(duration / 15)),   -- at most this many faults of each kind
        contenders = {}, all_proxies = {},
        stopping = false,
        timers = {},
        counts = {},          -- fault kind -> injected
        server_busy = nil,    -- { idx =, phase = "down" | "starting", ... }
        pending_hold = nil,   -- { c =, kind =, since =, act = }
        deck = {},
        recipes = recipes.parse(opts.recipes),   -- the catalog this run covers
        has = {},                                -- recipe name -> true
    }
    for _, name in ipairs(w.recipes) do w.has[name] = true end
    w.rng = util.rng(w.seed)
    w.dir = opts.dir or assert(proc.mktemp_dir("zkcoord-chaos-"))
    assert(proc.mkdir_p(w.dir))
    w.dlog, w.dlog_file = util.logger(w.dir .. "/driver.log", now)
    return w
end

--- Runs fn after `delay` seconds (run_timers calls it).
function _M.at(w, delay, fn)
    w.timers[#w.timers + 1] = { due = now() + delay, fn = fn }
end

--- Runs the timers that are due (all of them with `all`), in due order.
function _M.run_timers(w, all)
    local t = now()
    local due, rest = {}, {}
    for _, tm in ipairs(w.timers) do
        if all or tm.due <= t then due[#due + 1] = tm else rest[#rest + 1] = tm end
    end
    w.timers = rest
    table.sort(due, function(a, b) return a.due < b.due end)
    for _, tm in ipairs(due) do
        tm.fn()
    end
end

--- Starts a new incarnation of contender ci.
function _M.spawn(w, ci)
    ci.inc = ci.inc + 1
    local errlog = ("%s/c%d.%d.err"):format(w.dir, ci.id, ci.inc)
    local pid, perr = proc.spawn({ "luajit", w.here .. "/chaos/contender.lua", ci.id, ci.inc,
                                   w.dir, ci.servers, w.st, w.seed, ("%.3f"):format(w.hard),
                                   table.concat(w.recipes, ",") },
                                 { owner = true, stdout = errlog, stderr = errlog })
    if not pid then
        w.dlog("spawn_fail", { target = ci.id, inc = ci.inc, err = perr })
        ci.status = "dead"
        return
    end
    ci.pid, ci.status = pid, "running"
    w.dlog("spawn", { target = ci.id, inc = ci.inc, pid = pid })
end

--- Logs a fault that ended: its kind, target, start and end.
function _M.fault_done(w, kind, ci, from, extra)
    local kv = { kind = kind, target = ci and ci.id, inc = ci and ci.inc, from = from,
                 to = now() }
    for k, v in pairs(extra or {}) do kv[k] = v end
    w.dlog("fault", kv)
end

--- The file that asks contender ci for a long hold of the lock.
function _M.hold_file(w, ci)
    return ("%s/c%d.hold"):format(w.dir, ci.id)
end

--- The file in which contender ci writes its incarnation once every part
--- of its run has started (the driver's settle waits for it).
function _M.started_file(w, ci)
    return ("%s/c%d.started"):format(w.dir, ci.id)
end

--- Kills what is still running: contenders, proxies, the ensemble.
function _M.cleanup(w)
    for _, ci in ipairs(w.contenders) do
        if ci.pid and proc.alive(ci.pid) then
            proc.kill(ci.pid, "CONT")
            proc.kill(ci.pid, "KILL")
            proc.wait_exit(ci.pid, 5)
        end
    end
    for _, p in ipairs(w.all_proxies) do
        p:stop()
    end
    if w.ens and not w.shared_ens then
        w.ens:destroy()
    end
    w.ens = nil
end

return _M
