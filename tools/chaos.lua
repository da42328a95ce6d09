-- tools/chaos.lua: the chaos run. Contenders use the recipes of the catalog
-- (lock, rwlock, counter, cohort lock and rwlock, multi-lock, semaphore,
-- barrier, double barrier, work queue, group, partitioner, persistent node,
-- service discovery, lease, multi-lease)
-- while faults are injected; the checker (tools/chaos/check.lua) then proves
-- from the logs that each kept its promises.
--
--   luajit tools/chaos.lua [--duration S] [--contenders N] [--seed X]
--                          [--session-timeout S] [--recipes LIST] [--dir DIR]
--                          [--keep] [--doc]
--
-- --recipes: a comma-separated part of the catalog (tools/chaos/recipes.lua:
-- lock, rwlock, counter, cohort_lock, cohort_rwlock, multi_lock, semaphore,
-- barrier, double_barrier, work_queue, group, partitioner, persistent_node,
-- service_discovery, lease, multi_lease, election),
-- default all of it. Each recipe beyond the lock family has its part of the
-- run in tools/chaos/recipe/<name>.lua and its checker in
-- tools/chaos/check/<name>.lua; group, partitioner, persistent node and
-- service discovery are also probed on the server by the driver every
-- second, and the run settles (no fault for 3 session timeouts + 2 s, from the
-- start of the last contender restarted; DIR/quiet tells the contenders to
-- stop changing registrations) before the end, so that their stable state is
-- checked.
--
-- Defaults: 600 s, 8 contenders, a random seed (printed), session timeout
-- 4 s. Starts a 3-node ZooKeeper ensemble on 127.0.0.1; for each contender
-- three TCP proxies (spec/helpers/tcpproxy.lua, one per server), so that its
-- `servers` string is its own three proxies and one contender's connections
-- can be cut, black-holed or delayed alone. Contenders are separate luajit
-- processes (tools/chaos/contender.lua) looping over: lock acquire (with a
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
--
-- The parts (tools/chaos/): world.lua the run's state, timers and spawning;
-- faults.lua the kinds of fault; driver.lua the run from start to end;
-- contender.lua one contender process; resource.lua the fenced resource;
-- check.lua (and check/) the checker; doc.lua --doc; util.lua what they
-- share (log lines, files).
local function script_dir()
    local src = debug.getinfo(1, "S").source:match("^@(.*)$") or "tools/chaos.lua"
    local d = src:match("^(.*)/[^/]*$") or "."
    if d:sub(1, 1) ~= "/" then
        local p = io.popen("pwd")
        local cwd = p and p:read("*l") or "."
        if p then p:close() end
        d = cwd .. "/" .. d
    end
    return d
end

local TOOLS = script_dir()
local ROOT = TOOLS .. "/.."
package.path = ROOT .. "/spec/?.lua;" .. package.path
require("helpers.tool").paths(ROOT)

local proc = require "helpers.proc"
local zkserver = require "helpers.zkserver"
local world = require "chaos.world"
local faults = require "chaos.faults"
local driver = require "chaos.driver"
local check = require "chaos.check"
local doc = require "chaos.doc"

local _M = {}

_M.KINDS = faults.KINDS

--- Runs the chaos. opts: duration (s), contenders, seed, session_timeout,
--- recipes (comma-separated, default all), dir, keep, print (function for
--- progress lines, default none), gap_min, gap_max, ensemble (a running
--- 3-node ensemble of helpers.zkserver to use instead of a new one; left
--- running: the specs share one across short runs). Returns the checker's
--- result (see tools/chaos/check.lua) plus dir and seed, or raises on a
--- setup failure.
function _M.run(opts)
    opts = opts or {}
    local w = world.new(opts, TOOLS)
    local ok, err = xpcall(driver.run, debug.traceback, w)
    if not ok then
        w.dlog("driver_error", { msg = tostring(err):sub(1, 2000) })
    end
    world.cleanup(w)
    w.dlog_file:close()
    if not ok then
        error("chaos driver failed (logs in " .. w.dir .. "): " .. tostring(err), 0)
    end

    local result = check.run(w.dir)
    result.dir, result.seed = w.dir, w.seed
    if result.ok and not opts.keep and not opts.dir then
        proc.rm_rf(w.dir)
        result.dir = nil
    end
    return result
end

--- Writes the generated part of the chaos section of docs/RELIABILITY.md.
function _M.write_doc(result, cmd)
    return doc.write(ROOT, result, cmd)
end

local function this_is_the_script()
    local src = debug.getinfo(1, "S").source:match("^@(.*)$")
    return arg and arg[0] and src and (arg[0] == src or arg[0]:match("tools/chaos%.lua$"))
        and not package.loaded["busted"]
end

local function main()
    local options = require "helpers.options"
    local opts = options.parse(arg, {
        name = "chaos.lua",
        usage = "usage: luajit tools/chaos.lua [--duration S] [--contenders N] "
            .. "[--seed X] [--session-timeout S] [--recipes LIST] [--dir DIR] [--keep] [--doc]",
        status = 64,
        options = { ["--duration"] = "number", ["--contenders"] = "number", ["--seed"] = "number",
                    ["--session-timeout"] = "number", ["--dir"] = "string", ["--keep"] = "flag",
                    ["--recipes"] = "string",
                    ["--doc"] = "flag" },
    })
    local write = opts.doc
    opts.doc, opts.print = nil, print
    opts.seed = opts.seed or (os.time() % 1000000)
    local ok, result = pcall(_M.run, opts)
    zkserver.destroy_all()
    if not ok then
        io.stderr:write(tostring(result), "\n")
        os.exit(2)
    end
    print(result.text)
    local cmd = ("luajit tools/chaos.lua --duration %g --contenders %d --seed %d%s%s")
        :format(opts.duration or 600, opts.contenders or 8, opts.seed,
                opts.session_timeout and (" --session-timeout " .. opts.session_timeout) or "",
                opts.recipes and (" --recipes " .. opts.recipes) or "")
    print("reproduce: " .. cmd)
    if result.dir then
        print("logs: " .. result.dir)
    end
    if write then
        print("wrote " .. _M.write_doc(result, cmd))
    end
    os.exit(result.ok and 0 or 1)
end

if this_is_the_script() then
    main()
end

return _M
