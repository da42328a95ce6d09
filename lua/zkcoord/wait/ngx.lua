--- zkcoord.wait.ngx: waiting inside an nginx worker without blocking it.
--
-- A request (or timer) that waits yields on an ngx.semaphore. One pump
-- loop per client, a timer started with ngx.timer.at(0), reads the C core's
-- doorbell: a unix socket the core writes one byte to when its queue goes
-- from empty to non-empty. The loop drives the client's pump
-- (zkcoord.client.pump), whose drain posts the semaphores of the requests
-- whose replies arrived. No polling: an idle worker uses no CPU.
--
-- What a measured prototype showed, kept here:
--  * a far-future sentinel timer: on reload/quit nginx fires pending timers
--    early ("premature"), and the sentinel then kicks the doorbell, so a pump
--    blocked in a read wakes at once instead of holding the worker;
--  * while the worker exits, the pump keeps draining until no request waits;
--  * the socket file is unlinked as soon as the pump connected to it;
--  * callbacks (watches, state listeners) run in a timer of their own, in
--    order, never in the pump, which must not block.
-- Where no socket can be made (no writable directory), the pump falls back
-- to polling with a growing ngx.sleep step, and says so once in the log.
--
-- Requests: nodes a recipe creates in a request (not a timer) belong to
-- it (its ngx.ctx). A ticker timer, armed only while requests wait or hold
-- nodes, sees a request that ended (its ngx.ctx reference was freed) or a
-- wait whose coroutine was killed (its semaphore lost its waiter), and
-- deletes their nodes; a node still held then is logged as a warning.
local core = require "zkcoord.core"

local ngx = ngx
local semaphore = require "ngx.semaphore"
local setmetatable, tostring, pcall, pairs, next, type =
    setmetatable, tostring, pcall, pairs, next, type
local running = coroutine.running
local get_phase = ngx.get_phase
local log, ERR, WARN = ngx.log, ngx.ERR, ngx.WARN
local LEVELS = { error = ngx.ERR, warn = ngx.WARN, info = ngx.INFO, debug = ngx.DEBUG }

-- Is a request's ngx.ctx still its own? lua-resty-core keeps every ctx in
-- one registry table under a reference the request frees when it ends.
local ctx_ref, ctx_tables
do
    local ok = pcall(function()
        local ffi = require "ffi"
        local base = require "resty.core.base"
        require "resty.core.ctx"
        local get_request = base.get_request
        local get_ref = ffi.C.ngx_http_lua_ffi_get_ctx_ref
        local in_ssl, ssl_ref = ffi.new("int[1]"), ffi.new("int[1]")
        ctx_tables = debug.getregistry().ngx_lua_ctx_tables
        ctx_ref = function()
            local r = get_request()
            if not r then
                return nil
            end
            local ref = get_ref(r, in_ssl, ssl_ref)
            return ref > 0 and ref or nil
        end
    end)
    if not ok or type(ctx_tables) ~= "table" then
        ctx_ref, ctx_tables = nil, nil
    end
end

local function get_ctx()
    return ngx.ctx
end

-- The client socket of the current request (plain HTTP/1 over TCP), to see
-- a client that went away while its request waits: nginx notices only with
-- lua_check_client_abort on. The first fields of ngx_http_request_t
-- (signature, connection) and ngx_connection_t (data, read, write, fd) have
-- kept their places across nginx versions; the signature is checked.
local request_fd, client_gone
do
    local ok = pcall(function()
        local ffi = require "ffi"
        local get_request = require("resty.core.base").get_request
        pcall(ffi.cdef, "long recv(int sockfd, void *buf, size_t len, int flags);")
        local recv = ffi.C.recv
        local u32, vpp, ip, cp = ffi.typeof("uint32_t *"), ffi.typeof("void **"),
            ffi.typeof("int *"), ffi.typeof("char *")
        local HTTP = 0x50545448          -- "HTTP"
        local PEEK_NOWAIT = 0x02 + 0x40  -- MSG_PEEK | MSG_DONTWAIT
        local buf = ffi.new("char[1]")
        local ptr_size = ffi.sizeof("void *")
        request_fd = function()
            local r = get_request()
            if not r or ffi.cast(u32, r)[0] ~= HTTP then
                return nil
            end
            local c = ffi.cast(vpp, ffi.cast(cp, r) + ptr_size)[0]
            if c == nil then
                return nil
            end
            local fd = ffi.cast(ip, ffi.cast(cp, c) + 3 * ptr_size)[0]
            return fd >= 0 and fd or nil
        end
        client_gone = function(fd)
            return recv(fd, buf, 1, PEEK_NOWAIT) == 0
        end
    end)
    if not ok then
        request_fd, client_gone = nil, nil
    end
end
local REQUEST_PHASES = { rewrite = true, access = true, content = true }

local _M = { _VERSION = require("zkcoord.version"), name = "ngx", inline_callbacks = false }
local mt = { __index = _M }

-- Phases where a cosocket or a semaphore cannot wait.
local NO_WAIT = {
    init = true, init_worker = true, set = true, header_filter = true,
    body_filter = true, log = true, balancer = true, ssl_cert = true,
    ssl_session_fetch = true, ssl_session_store = true, exit_worker = true,
}

local arm   -- arm(waiter): the ticker, below
local abandon   -- abandon(waiter, ev, was_set): a waiter whose coroutine is gone

local FOREVER = 365 * 24 * 3600
-- ngx.semaphore and cosockets take milliseconds as a C int: longer waits
-- go in chunks.
local MAX_WAIT = 86400         -- seconds per semaphore wait
local READ_TIMEOUT = 2147483   -- seconds: the pump's read never times out
                               -- in practice; timers and exits kick it
local TICK = 0.05              -- seconds between ticks while armed
-- Seconds between peeks at waiting requests' client connections (one
-- recv() each): the peek only serves requests whose client went away
-- without lua_check_client_abort; every tick would cost a system call per
-- waiting request 20 times a second (40 % of a core at 10,000 waiters).
local PEEK_EVERY = 0.5

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


function _M.new(client, pump)
    local self = setmetatable({
        client = client,
        pump = pump or client:pump(),
        waiting = 0,          -- coroutines blocked in Event:wait
        pumping = false,
        runner = false,       -- a callback-runner timer is scheduled
        live = {},            -- events a coroutine is blocked on (set of events)
        sets = 0,             -- events set and callbacks deferred (the poll loop's progress)
        idle = semaphore.new(0), -- the parked poll loop waits on it
        parked = false,
        scopes = {},          -- requests that own nodes: scope -> true
        by_ctx = setmetatable({}, { __mode = "k" }),  -- ngx.ctx -> scope
        ticking = false,
    }, mt)
    self:_start_pump()
    return self
end


function _M:event()
    -- Raise before the caller registers the event on a request, so a reply
    -- to a request sent from a phase that cannot wait goes to its `late`
    -- handler (a lock's create is then deleted) instead of an event nobody
    -- waits on.
    _M.check_phase("wait for ZooKeeper")
    return setmetatable({ waiter = self, is_set = false, sema = semaphore.new(0) }, event_mt)
end


--- Sets the event and wakes whoever waits on it, once (the waiters'
--- contract: util.waker relies on it): one post of the event's own
--- semaphore, which a wait that timed out meanwhile never takes.
function Event:set()
    if not self.is_set then
        self.is_set = true
        self.set_at = ngx.now()
        self.waiter.sets = self.waiter.sets + 1
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
    w.live[self] = true
    if w.parked then
        w.parked = false
        w.idle:post(1)          -- wake the parked poll loop: someone waits now
    end
    self.co = running()
    if request_fd and REQUEST_PHASES[get_phase()] then
        self.fd = request_fd()
    end
    arm(w)
    local sema = self.sema
    local deadline = timeout and ngx.now() + timeout
    local ok
    while true do
        local left = deadline and deadline - ngx.now() or FOREVER
        if left < 0 then
            left = 0
        end
        ok = sema:wait(left < MAX_WAIT and left or MAX_WAIT)
        if ok or self.is_set or left <= MAX_WAIT then
            break
        end
    end
    if w.live[self] then        -- else the reaper counted us as abandoned already
        w.live[self] = nil
        w.waiting = w.waiting - 1
    end
    if self.cancelled then
        return self.is_set
    end
    return ok and true or self.is_set
end


--- The lock owner inside nginx: the request (its ngx.ctx), so a lock
--- acquired in one phase can be released in a later one.
function _M.owner()
    local ok, ctx = pcall(get_ctx)
    if ok and type(ctx) == "table" then
        return ctx
    end
    return nil
end


--- zkcoord's log lines go to nginx's error log, at their level.
function _M.logger(level, msg)
    log(LEVELS[level] or ERR, "zkcoord: ", msg)
end


--- Ties a recipe node (the client's registry entry `e` for `path`) to the
--- current request, so it goes when the request ends. Not in a timer: a
--- timer is where work that outlives it (leadership) belongs.
function _M:track(e, path)
    if not ctx_ref or get_phase() == "timer" then
        return
    end
    local ok, ctx = pcall(get_ctx)
    if not ok or type(ctx) ~= "table" then
        return
    end
    local s = self.by_ctx[ctx]
    if not s then
        local ref = ctx_ref()
        if not ref then
            return
        end
        s = { ctx = ctx, ref = ref, nodes = {} }
        self.by_ctx[ctx] = s
        self.scopes[s] = true
    end
    e.scope, e.co = s, running()
    s.nodes[path] = e
    arm(self)
end


-- Deletes the node of entry `e` (its position leaves the line).
local function drop(client, path, e, why)
    local q = e.q
    if q:node() == path then
        if q:is_through() then
            log(WARN, "zkcoord: ", why, " holding ", path, ": released")
        end
        q:leave()
    else
        client:disown_node(path)
    end
end


-- Requests that ended: their nodes go. A request whose nodes all went
-- normally is forgotten (a later node makes a new scope).
function _M:_end_scopes()
    local client = self.client
    for s in pairs(self.scopes) do
        if ctx_tables[s.ref] ~= s.ctx then
            for path, e in pairs(s.nodes) do
                drop(client, path, e, "the request ended")
            end
            s.nodes = {}
        end
        if next(s.nodes) == nil then
            self.scopes[s] = nil
            if self.by_ctx[s.ctx] == s then
                self.by_ctx[s.ctx] = nil
            end
        end
    end
end


-- A coroutine killed while waiting (a light thread, an aborted request):
-- the positions it was waiting in leave the line. Its grants stay with
-- the request, which releases them when it ends.
function _M:_abandoned(co)
    local client = self.client
    for s in pairs(self.scopes) do
        for path, e in pairs(s.nodes) do
            if e.co == co and not e.q:is_through() then
                drop(client, path, e, "a killed thread")
            end
        end
    end
end


local function tick(premature, self)
    self.ticking = false
    local client = self.client
    if client:is_closed() then
        return
    end
    local ok, err = pcall(function()
        self:_reap()
        self:_end_scopes()
        self.pump:check_timers()
    end)
    if not ok then
        log(ERR, "zkcoord: tick: ", err)
    end
    if not premature and (next(self.live) or next(self.scopes) or client:state() == "suspended") then
        arm(self)
    end
end


-- Arms the ticker (one timer at a time) while something needs watching.
arm = function(self)
    if self.ticking or self.client:is_closed() then
        return
    end
    local ok = ngx.timer.at(self.pump:timer_cap(TICK), tick, self)
    if ok then
        self.ticking = true
    end
end


--- A wait always yields the request (or timer) thread: other requests,
--- and our callbacks (run in timers), go on meanwhile.
function _M.yields()
    return true
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
    local pump = self.pump
    self.sets = self.sets + 1       -- progress, for the poll loop
    pump:enqueue_callback(fn, ...)
    if self.runner then
        return
    end
    if get_phase() == "exit_worker" then
        -- No timers here ("API disabled"): client:close() in exit_worker
        -- still reports events and "closed". Run them now; they cannot
        -- wait in this phase (a wait raises, and the runner logs it).
        pump:run_callbacks()
        return
    end
    self.runner = true
    local ok, err = ngx.timer.at(0, function(premature)
        self.runner = false
        if premature then
            return
        end
        pump:run_callbacks()
    end)
    if not ok then
        self.runner = false
        log(ERR, "zkcoord: cannot schedule callbacks: ", err)
    end
end


--- Seconds on the library's monotonic clock (recipes' deadlines).
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
        if premature and not self.client:is_closed() then
            self.pump:kick()
        end
    end)
end


function _M:_connect_doorbell()
    local q = self.pump
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
    local client, pump = self.client, self.pump
    local sock, err = self:_connect_doorbell()
    if not sock then
        log(WARN, "zkcoord: no doorbell socket (", err, "); falling back to polling")
        return self:_poll_loop()
    end
    self.pumping = true
    while true do
        if ngx.worker.exiting() then
            -- Drain by polling: no socket read timeouts (each one logs an
            -- error line), and waiters whose request was aborted are reaped.
            self.pumping = false
            sock:close()
            return self:_poll_loop()
        end
        sock:settimeout(READ_TIMEOUT * 1000)
        local data, rerr = sock:receiveany(4096)
        if not data and rerr ~= "timeout" then
            break                          -- closed: the client was closed
        end
        local ok, perr = pcall(pump.step, pump)
        if not ok then
            log(ERR, "zkcoord: pump: ", perr)
        end
        if client:state() == "suspended" then
            arm(self)                      -- the session timer runs in the ticker
        end
        if client:is_closed() then
            break
        end
    end
    self.pumping = false
    sock:close()
end


-- An event whose coroutine is gone: the reply it waited for goes to the
-- request's late handler, as for a caller that gave up (a create's deletes
-- the node it made), and the positions the coroutine waited in leave.
function abandon(self, ev, was_set)
    ev.abandoned = true
    local p = ev.entry
    if was_set and p and p.done and p.late then
        local late = p.late
        p.late = nil
        self:defer(late, p, p.ctx)
    end
    if ctx_ref and ev.co then
        self:_abandoned(ev.co)
    end
end


-- Waiters whose coroutine is gone (request aborted, thread killed) while
-- blocked: their semaphore has no waiter and was never posted.
-- A waiter whose client closed its connection is woken: its wait fails as
-- a timeout would, and the recipe leaves the line.
function _M:_reap()
    local exiting = ngx.worker.exiting()
    local peek = false
    if client_gone then
        local t = ngx.now()
        if t >= (self.next_peek or 0) then
            peek, self.next_peek = true, t + PEEK_EVERY
        end
    end
    for ev in pairs(self.live) do
        if ev.is_set then
            -- Set, but its coroutine may never resume: its request was
            -- aborted just after the set (a reply arriving after the
            -- abort). While the worker exits it no longer counts as
            -- waiting (or the exit drain would never end); a live
            -- coroutine resumes within a loop iteration, so one still not
            -- resumed a second after the set is gone: its positions leave.
            if ev.sema:count() >= 0 then
                local stale = ev.set_at and ngx.now() - ev.set_at > 1
                if exiting or stale then
                    self.live[ev] = nil
                    self.waiting = self.waiting - 1
                    if stale then
                        abandon(self, ev, true)
                    end
                end
            end
        else
            if ev.sema:count() >= 0 then
                self.live[ev] = nil
                self.waiting = self.waiting - 1
                abandon(self, ev, false)
            elseif peek and ev.fd and client_gone(ev.fd) then
                self.live[ev] = nil
                self.waiting = self.waiting - 1
                ev.cancelled = true
                ev.sema:post(1)
            end
        end
    end
end


-- Fallback (and the exit drain): poll with a step that grows while nothing
-- arrives and starts again at 1 ms when something did; parked on a
-- semaphore while nobody waits (a new waiter wakes it).
function _M:_poll_loop()
    local client, pump = self.client, self.pump
    local step = 0.001
    while not client:is_closed() do
        local sets = self.sets
        local ok, perr = pcall(pump.step, pump)
        if not ok then
            log(ERR, "zkcoord: pump: ", perr)
        end
        local exiting = ngx.worker.exiting()
        if exiting then
            self:_reap()
            if ctx_ref then
                self:_end_scopes()
            end
            if self.waiting == 0 then
                break
            end
        end
        if self.sets ~= sets then
            step = 0.001
        end
        if self.waiting > 0 then
            ngx.sleep(step)
            step = step < 0.05 and step * 2 or 0.05
        else
            step = 0.001
            self.parked = true
            self.idle:wait(0.05)
            self.parked = false
        end
    end
end


return _M
