--- zkcoord.wait.ngx: waiting inside an nginx worker without blocking it.
--
-- A request (or timer) that waits yields on an ngx.semaphore. One pump per
-- client, a timer started with ngx.timer.at(0), reads the C core's doorbell:
-- a unix socket the core writes one byte to when its queue goes from empty
-- to non-empty. The pump drains the queue, which posts the semaphores of
-- the requests whose replies arrived. No polling: an idle worker uses no CPU.
--
-- What anchors/OPENRESTY.md measured, kept here:
--  * a far-future sentinel timer: on reload/quit nginx fires pending timers
--    early ("premature"), and the sentinel then kicks the doorbell, so a pump
--    blocked in a read wakes at once instead of holding the worker;
--  * while the worker exits, the pump keeps draining until no request waits;
--  * the socket file is unlinked as soon as the pump connected to it;
--  * callbacks (watches, state listeners) run in a timer of their own, in
--    order, never in the pump, which must not block.
-- Where no socket can be made (no writable directory), the pump falls back
-- to polling with a growing ngx.sleep step, and says so once in the log.
local core = require "zkcoord.core"

local ngx = ngx
local semaphore = require "ngx.semaphore"
local setmetatable, tostring, pcall = setmetatable, tostring, pcall
local get_phase = ngx.get_phase
local log, ERR, WARN = ngx.log, ngx.ERR, ngx.WARN

local _M = { _VERSION = "0.1.0", name = "ngx", inline_callbacks = false }
local mt = { __index = _M }

-- Phases where a cosocket or a semaphore cannot wait.
local NO_WAIT = {
    init = true, init_worker = true, set = true, header_filter = true,
    body_filter = true, log = true, balancer = true, ssl_cert = true,
    ssl_session_fetch = true, ssl_session_store = true, exit_worker = true,
}

local FOREVER = 365 * 24 * 3600
local READ_TIMEOUT = 60        -- seconds; the sentinel handles exits
local EXIT_DRAIN_STEP = 0.05   -- seconds between reads while exiting

_M.sock_dir = "/tmp"
local counter = 0


function _M.check_phase(what)
    local phase = get_phase()
    if NO_WAIT[phase] then
        error(("zkcoord: cannot %s in %s_by_lua*: nginx cannot wait there. "
               .. "Run it in a timer: ngx.timer.at(0, function() ... end)")
              :format(what or "wait", phase), 3)
    end
end


local Event = {}
local event_mt = { __index = Event }


function _M.new(client)
    local self = setmetatable({
        client = client,
        waiting = 0,          -- coroutines blocked in Event:wait
        pumping = false,
        runner = false,       -- a callback-runner timer is scheduled
    }, mt)
    self:_start_pump()
    return self
end


function _M:event()
    return setmetatable({ waiter = self, is_set = false, sema = semaphore.new(0) }, event_mt)
end


function Event:set()
    if not self.is_set then
        self.is_set = true
        self.sema:post(1)
    end
end


--- Yields this request until set or `timeout` seconds (nil: a year).
function Event:wait(timeout)
    if self.is_set then
        return true
    end
    _M.check_phase("wait for ZooKeeper")
    local w = self.waiter
    w.waiting = w.waiting + 1
    local ok = self.sema:wait(timeout or FOREVER)
    w.waiting = w.waiting - 1
    return ok and true or self.is_set
end


function _M.sleep(_, seconds)
    _M.check_phase("sleep")
    if seconds and seconds > 0 then
        ngx.sleep(seconds)
    end
    return false
end


--- Runs callbacks in order, in one timer at a time (never in the pump).
function _M:defer(fn, ...)
    local client = self.client
    client:_enqueue_callback(fn, ...)
    if self.runner then
        return
    end
    self.runner = true
    local ok, err = ngx.timer.at(0, function(premature)
        self.runner = false
        if premature then
            return
        end
        client:_run_callbacks()
    end)
    if not ok then
        self.runner = false
        log(ERR, "zkcoord: cannot schedule callbacks: ", err)
    end
end


_M.now = core.now


--- client:spawn(fn, ...) in nginx: a light thread of the current request.
function _M:spawn(fn, ...)
    local threads = self.threads or {}
    self.threads = threads
    local t, err = ngx.thread.spawn(fn, ...)
    if not t then
        error("zkcoord: cannot spawn: " .. tostring(err), 3)
    end
    threads[#threads + 1] = t
    return t
end


--- client:run(timeout) in nginx: waits for the spawned light threads (the
--- timeout is checked between them).
function _M:run(timeout)
    local threads = self.threads or {}
    self.threads = nil
    local deadline = timeout and ngx.now() + timeout
    for i = 1, #threads do
        if deadline and ngx.now() > deadline then
            for j = i, #threads do ngx.thread.kill(threads[j]) end
            return false
        end
        ngx.thread.wait(threads[i])
    end
    return true
end


-- ---------------------------------------------------------------------------
-- The pump.

function _M:_start_pump()
    local ok, err = ngx.timer.at(0, function(premature)
        if not premature then
            self:_pump_loop()
        end
    end)
    if not ok then
        error("zkcoord: cannot start the nginx pump timer: " .. tostring(err), 3)
    end
    -- The sentinel: fired early (premature) when the worker exits.
    ngx.timer.at(FOREVER, function(premature)
        if premature and not self.client._closed then
            self.client._q:kick()
        end
    end)
end


function _M:_connect_doorbell()
    local q = self.client._q
    counter = counter + 1
    local path = ("%s/zkcoord.%d.%d.sock"):format(_M.sock_dir, ngx.worker.pid(), counter)
    local ok, err, detail = q:listen_unix(path)
    if not ok then
        return nil, tostring(err) .. ": " .. tostring(detail)
    end
    local sock = ngx.socket.tcp()
    ok, err = sock:connect("unix:" .. path)
    if not ok then
        q:close_doorbell()
        return nil, err
    end
    ok, err, detail = q:accept_unix()      -- unlinks the path
    if not ok then
        sock:close()
        q:close_doorbell()
        return nil, tostring(err) .. ": " .. tostring(detail)
    end
    return sock
end


function _M:_pump_loop()
    local client = self.client
    local sock, err = self:_connect_doorbell()
    if not sock then
        log(WARN, "zkcoord: no doorbell socket (", err, "); falling back to polling")
        return self:_poll_loop()
    end
    self.pumping = true
    while true do
        local exiting = ngx.worker.exiting()
        local timeout = exiting and EXIT_DRAIN_STEP or client:_timer_cap(READ_TIMEOUT)
        sock:settimeout(timeout * 1000)
        local data, rerr = sock:receiveany(4096)
        if not data and rerr ~= "timeout" then
            break                          -- closed: the client was closed
        end
        local ok, perr = pcall(client._pump, client)
        if not ok then
            log(ERR, "zkcoord: pump: ", perr)
        end
        if client._closed or (exiting and self.waiting == 0) then
            break
        end
    end
    self.pumping = false
    sock:close()
end


-- Fallback: poll with a growing step while someone waits, slowly otherwise.
function _M:_poll_loop()
    local client = self.client
    local step = 0.001
    while not client._closed do
        local ok, perr = pcall(client._pump, client)
        if not ok then
            log(ERR, "zkcoord: pump: ", perr)
        end
        if ngx.worker.exiting() and self.waiting == 0 then
            break
        end
        if self.waiting > 0 then
            ngx.sleep(step)
            step = step < 0.05 and step * 2 or 0.05
        else
            step = 0.001
            ngx.sleep(0.05)
        end
    end
end


return _M
