--- zkcoord.ngx: one ZooKeeper client per nginx worker.
--
--   init_worker_by_lua_block { require("zkcoord.ngx").init_worker { servers = "..." } }
--   exit_worker_by_lua_block { require("zkcoord.ngx").exit_worker() }
--   content_by_lua_block {
--       local client = require("zkcoord.ngx").client()
--       local lock = client:lock("/locks/job")
--       ...
--   }
--
-- The session is opened after fork, in a timer started by init_worker (or on
-- first use), never in init_by_lua: that runs in the master, whose threads
-- do not survive fork (the core refuses a session used by another process).
-- exit_worker closes it, so a reloaded worker's ephemeral nodes (its locks)
-- go at once instead of lingering for the session timeout.
local zkcoord = require "zkcoord"
local waiter = require "zkcoord.wait.ngx"
local contract = require "zkcoord.contract"

local ngx = ngx
local semaphore = require "ngx.semaphore"
local log, ERR = ngx.log, ngx.ERR
local now, min, max = zkcoord.now, math.min, math.max

local PROBE_TIMEOUT = require("zkcoord.client.options").PROBE_TIMEOUT

local _M = { _VERSION = require("zkcoord.version") }

local options        -- from init_worker
local client         -- the worker's client, once connected
local connecting     -- semaphore other requests wait on while one connects


local function copy(opts)
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.wait = "ngx"
    return o
end


--- Call from init_worker_by_lua*: remembers the options and connects in a
--- timer (init_worker itself cannot wait).
function _M.init_worker(opts)
    if type(opts) ~= "table" then
        error("bad argument #1 to 'init_worker' (options table expected)", 2)
    end
    options = copy(opts)
    if opts.sock_dir then
        waiter.sock_dir = opts.sock_dir
        options.sock_dir = nil
    end
    local ok, err = ngx.timer.at(0, function(premature)
        if premature then return end
        local _, cerr, detail = _M.client()
        if cerr then
            log(ERR, "zkcoord: connect failed: ", cerr, " ", detail or "")
        end
    end)
    if not ok then
        error("zkcoord: cannot start the connect timer: " .. tostring(err), 2)
    end
    return true
end


-- The longest a connect takes while its coroutine lives: the first
-- connection (connect_timeout, then a TCP probe of a quarter second at most
-- per server: connect.lua's PROBE_TIMEOUT), the credentials if any
-- (connect_timeout again) and the chroot check if any (one request), plus
-- a second for a loaded worker's late timers. A failing connect always runs
-- its whole connect_timeout and a little more, so that alone is no deadline
-- to take over at: waiters did, each closing the live attempt's client and
-- starting over (the n-th caller answered after n connect timeouts).
local function attempt_bound(o)
    local list = type(o.servers) == "table" and o.servers or { o.servers }
    local count, chroot = 0, o.chroot ~= nil
    for _, s in ipairs(list) do
        s = tostring(s)
        count = count + select(2, s:gsub(",", "")) + 1
        chroot = chroot or s:find("/", 1, true) ~= nil
    end
    local connect = o.connect_timeout or 5
    return connect + PROBE_TIMEOUT * count + 1
           + (o.auth and connect or 0)
           + (chroot and (o.request_timeout or o.session_timeout or 10) or 0)
end


-- One connect in progress: the request running it, and those waiting on it,
-- woken when it ends (on every way out) to take its answer. One still in
-- progress past attempt_bound is taken over: an aborted request's coroutine
-- is dropped mid-wait and never comes back to clear it.
local function new_attempt()
    return { sema = semaphore.new(0), count = 0,
             deadline = now() + attempt_bound(options) }
end


-- Connects with the current options, as attempt `a`; the waiter made for
-- the new client is remembered, so an abandoned attempt's client can be
-- closed by whoever takes over.
local function connect_as(a)
    local o = {}
    for k, v in pairs(options) do o[k] = v end
    o.wait = { new = function(c, pump)
        a.client = c
        return waiter.new(c, pump)
    end }
    return pcall(zkcoord.connect, o)
end


-- Takes over from an attempt abandoned past its deadline: its client, if
-- it never connected, would otherwise keep reconnecting for ever. One that
-- connected may still be finishing (credentials, chroot): left alone.
local function abandon(a)
    local c = a.client
    if c and c ~= client and c:state() ~= "connected" then
        c:close()
    end
end


--- The worker's client, connecting on first use (opts only needed when
--- init_worker was not called). Waits for the connection, so call it where
--- nginx can wait (content, access, rewrite, timer).
---@return table|nil client, string? err, string? detail
function _M.client(opts)
    if ngx.get_phase() == "init" then
        error("zkcoord: no ZooKeeper session in init_by_lua*: it runs in the master "
              .. "before fork. Call zkcoord.ngx.init_worker(opts) in init_worker_by_lua*", 2)
    end
    -- Not client:state(): it drains every reply queued (what state
    -- answers must have seen), in each request that asks for the client;
    -- closed is only ever set by close().
    if client and not contract.is_closed(client) then
        return client
    end
    local previous = options
    if opts then
        options = copy(opts)
    end
    if not options then
        error("zkcoord.ngx.client: no options: call init_worker(opts) first or pass them", 2)
    end
    waiter.check_phase("connect")
    while connecting do
        local a = connecting
        -- The monotonic clock: ngx.now() moves only when the worker yields.
        local left = a.deadline - now()
        if left <= 0 then
            abandon(a)
            break
        end
        a.count = a.count + 1
        -- ngx.semaphore takes whole milliseconds in an int: a long or
        -- unlimited (math.huge) connect_timeout is waited out in steps, and
        -- under a millisecond is 0, which returns without yielding: the
        -- worker spun here for ever (its timers woke this up to a
        -- millisecond early, and the cached ngx.now() never moved on).
        a.sema:wait(min(max(left, 0.001), 3600))
        if client and client:state() ~= "closed" then
            return client
        end
        if a.done and not a.raised then
            return nil, a.err, a.detail
        end
        -- else: it raised (bad options of its own), or is still going
    end
    local a = new_attempt()
    connecting = a
    local ok, c, err, detail = connect_as(a)
    -- on every way out: the next request connects, the waiters wake
    if connecting == a then
        connecting = nil
    end
    a.done, a.raised, a.err, a.detail = true, not ok, err, detail
    if a.count > 0 then
        a.sema:post(a.count)
    end
    if not ok then
        options = previous     -- bad options are not kept for the next request
        error(c, 0)
    end
    if not c then
        return nil, err, detail
    end
    if client and client ~= c and client:state() ~= "closed" then
        c:close()              -- we took over from a late attempt that made it after all
        return client
    end
    client = c
    return c
end


--- Call from exit_worker_by_lua*: closes the session so its ephemeral nodes
--- (locks, leadership) go now.
function _M.exit_worker()
    if client then
        client:close()
        client = nil
    end
end


return _M
