--- Handlers for examples/openresty/nginx.conf: ZooKeeper coordination from
--- nginx workers with zkcoord. Every worker is its own ZooKeeper client
--- (zkcoord.ngx gives each worker one session); requests and timers that
--- wait for ZooKeeper yield, the worker keeps serving meanwhile.
---
---   a config value pushed to every worker     client:watch(path, fn)
---   a job that runs once across a fleet       client:lock(path):acquire(0)
---   a shared counter                          client:counter(path):add(1)
---   leader-only work in a timer               client:election(path):campaign(0)
local zn = require "zkcoord.ngx"

local _M = {}

local ROOT = "/zkcoord-example"
local JOB_PERIOD = 60          -- the job runs once per minute across all workers of all hosts
local JOB_CHECK = 10           -- every worker checks every 10 s whether it is due
local LEADER_CHECK = 5         -- seconds between leadership checks

local config                   -- this worker's copy of <root>/config (the watch keeps it)
local hits                     -- this worker's counter object (one per worker: adds coalesce)
local election                 -- this worker's candidacy
local leader_runs = 0


local function log(level, ...)
    ngx.log(level, "zkcoord example: ", ...)
end


-- Runs fn(client) in a timer now, and again after `retry` seconds until it
-- returns true (e.g. ZooKeeper not reachable yet).
local function in_timer(fn, retry)
    local function run(premature)
        if premature then return end
        local client, err = zn.client()
        local done = client and fn(client)
        if not done then
            if not client then log(ngx.WARN, "no ZooKeeper session yet: ", tostring(err)) end
            ngx.timer.at(retry, run)
        end
    end
    ngx.timer.at(0, run)
end


-- 1. A config value pushed to every worker: the watch calls fn with the
-- current data at once, then on every change (in every worker, within a
-- few ms of the write).
local function watch_config(client)
    local w, err = client:watch(ROOT .. "/config", function(data)
        config = data
        log(ngx.NOTICE, "config is now ", tostring(data))
    end)
    if not w then
        log(ngx.ERR, "watch: ", err)
        return false
    end
    return true
end


-- 2. A job that runs once per period across a fleet. Every worker of every
-- nginx tries; acquire(0) lets exactly one through and the others go on at
-- once. The marker node makes a worker that gets the lock a moment later
-- see that this period's run is done.
local function run_job_once(client)
    local lock = client:lock(ROOT .. "/locks/report")
    local ok, err = lock:acquire(0)
    if not ok then
        return "skipped (" .. tostring(err) .. ": another worker runs it)"
    end
    local result
    local period = tostring(math.floor(ngx.time() / JOB_PERIOD))
    local marker = ROOT .. "/jobs/report-period"
    local last = client:get(marker)
    if last == period then
        result = "skipped (already ran this period)"
    else
        -- The job itself. Here: count the runs, so you can check it ran once.
        local runs = client:counter(ROOT .. "/jobs/report-runs"):add(1)
        local sok, serr = client:set(marker, period)
        if serr == "nonode" then
            sok, serr = client:create(marker, period, { parents = true })
        end
        if not sok then log(ngx.ERR, "job marker: ", serr) end
        result = "ran (run #" .. tostring(runs) .. ")"
        log(ngx.NOTICE, "report job ", result)
    end
    lock:release()
    return result
end


-- 4. Leader-only work in a timer: one worker across the fleet leads; it
-- stays leader until its session ends (reload, quit, crash: another
-- worker takes over at its next check).
local function leader_tick(client)
    election = election or client:election(ROOT .. "/leader",
                                           { id = ("worker-%d"):format(ngx.worker.pid()) })
    if not election:is_leader() then
        if not election:campaign(0) then
            return                 -- someone else leads
        end
        log(ngx.NOTICE, "this worker is the leader now")
    end
    -- Leader-only work goes here (cleanup, cache warming, ...).
    leader_runs = leader_runs + 1
end


--- init_worker_by_lua: connect this worker, start the watch and the timers.
function _M.init_worker(opts)
    ROOT = opts.root or ROOT
    zn.init_worker { servers = opts.servers, session_timeout = opts.session_timeout or 10 }
    in_timer(watch_config, 1)
    -- The periodic work: once at start, then every `interval` seconds.
    local function every(interval, fn)
        local function tick(premature)
            if premature then return end
            local client, err = zn.client()
            if not client then
                log(ngx.WARN, "no ZooKeeper session: ", tostring(err))
                return
            end
            fn(client)
        end
        ngx.timer.at(0, tick)
        ngx.timer.every(interval, tick)
    end
    every(JOB_CHECK, run_job_once)
    every(LEADER_CHECK, leader_tick)
end


--- GET /status: what this worker knows.
function _M.status()
    local leader = election and election:leader()
    ngx.say("worker ", ngx.worker.pid(), ": config=", tostring(config),
            " leader=", tostring(leader),
            " i_lead=", tostring(election ~= nil and election:is_leader()),
            " leader_runs=", leader_runs)
end


--- GET /config?set=VALUE: writes the config node (every worker's watch picks it up).
function _M.set_config()
    local client = assert(zn.client())
    local value = ngx.var.arg_set
    if not value then
        ngx.say(tostring(config))
        return
    end
    local ok, err = client:set(ROOT .. "/config", value)
    if err == "nonode" then
        ok, err = client:create(ROOT .. "/config", value, { parents = true })
    end
    ngx.say(ok and "ok" or ("error: " .. tostring(err)))
end


--- GET /hits: a counter shared by every worker of every nginx.
function _M.hits()
    local client = assert(zn.client())
    hits = hits or client:counter(ROOT .. "/hits")
    local n, err = hits:add(1)
    ngx.say(n or ("error: " .. tostring(err)))
end


--- GET /job: try the once-per-period job now (as the timers do).
function _M.job()
    ngx.say(run_job_once(assert(zn.client())))
end


return _M
