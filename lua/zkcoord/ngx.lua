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

local ngx = ngx
local semaphore = require "ngx.semaphore"
local log, ERR = ngx.log, ngx.ERR

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


--- The worker's client, connecting on first use (opts only needed when
--- init_worker was not called). Waits for the connection, so call it where
--- nginx can wait (content, access, rewrite, timer).
---@return table|nil client, string? err, string? detail
function _M.client(opts)
    if ngx.get_phase() == "init" then
        error("zkcoord: no ZooKeeper session in init_by_lua*: it runs in the master "
              .. "before fork. Call zkcoord.ngx.init_worker(opts) in init_worker_by_lua*", 2)
    end
    if client and client:state() ~= "closed" then
        return client
    end
    if opts then
        options = copy(opts)
    end
    if not options then
        error("zkcoord.ngx.client: no options: call init_worker(opts) first or pass them", 2)
    end
    waiter.check_phase("connect")
    if connecting then
        local waiting = connecting
        waiting.count = waiting.count + 1
        -- ngx.semaphore takes whole milliseconds in an int: a long or
        -- unlimited (math.huge) connect_timeout is waited out in steps.
        local deadline = ngx.now() + (options.connect_timeout or 5)
        repeat
            local posted = waiting.sema:wait(math.min(deadline - ngx.now(), 3600))
        until posted or ngx.now() >= deadline
        if client and client:state() ~= "closed" then
            return client
        end
        return nil, "timeout", "connecting in another request"
    end
    connecting = { sema = semaphore.new(0), count = 0 }
    local c, err, detail = zkcoord.connect(options)
    local waiting = connecting
    connecting = nil
    if waiting.count > 0 then
        waiting.sema:post(waiting.count)
    end
    if not c then
        return nil, err, detail
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
