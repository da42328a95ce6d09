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
-- it (its ngx.ctx). A ticker timer (zkcoord.wait.ngx.ticker), armed only
-- while requests wait or hold nodes, sees a request that ended (its
-- ngx.ctx reference was freed) or a wait whose coroutine was killed (its
-- semaphore lost its waiter), and deletes their nodes; a node still held
-- then is logged as a warning. The ticker also reaps waiting events and
-- runs the exit drain's step. The pump loops, their batches and the
-- sentinel are zkcoord.wait.ngx.loop; this file is the waiter's API.
local core = require "zkcoord.core"
local ticker = require "zkcoord.wait.ngx.ticker"
local loop = require "zkcoord.wait.ngx.loop"
local gate = require "zkcoord.wait.ngx.gate"
local check_wait = require("zkcoord.util").check_wait
local contract = require "zkcoord.contract"

local ngx = ngx
local semaphore = require "ngx.semaphore"
local setmetatable, tostring, pcall, type = setmetatable, tostring, pcall, type
local running = coroutine.running
local get_phase = ngx.get_phase
local log, ERR = ngx.log, ngx.ERR
local LEVELS = { error = ngx.ERR, warn = ngx.WARN, info = ngx.INFO, debug = ngx.DEBUG }
local arm, ctx_ref = ticker.arm, ticker.ctx_ref

local function get_ctx()
    return ngx.ctx
end

local _M = { _VERSION = require("zkcoord.version"), name = "ngx", inline_callbacks = false }
local mt = { __index = _M }

-- Phases where a cosocket or a semaphore cannot wait.
local NO_WAIT = {
    init = true, init_worker = true, set = true, header_filter = true,
    body_filter = true, log = true, balancer = true, ssl_cert = true,
    ssl_session_fetch = true, ssl_session_store = true, exit_worker = true,
}

local FOREVER = 365 * 24 * 3600
-- ngx.semaphore and cosockets take milliseconds as a C int: longer waits
-- go in chunks.
local MAX_WAIT = 86400         -- seconds per semaphore wait

_M.sock_dir = "/tmp"


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
        pump = pump or contract.pump(client),
        waiting = 0,          -- coroutines blocked in Event:wait
        pumping = false,
        looping = false,      -- a pump or poll loop runs (or its timer is scheduled)
        runner = false,       -- a callback-runner timer is scheduled
        live = {},            -- events a coroutine is blocked on (set of events)
        sets = 0,             -- events set and callbacks deferred (the poll loop's progress)
        idle = semaphore.new(0), -- the parked poll loop waits on it
        parked = false,
        scopes = {},          -- requests that own nodes: scope -> true
        by_ctx = setmetatable({}, { __mode = "k" }),  -- ngx.ctx -> scope
        by_co = setmetatable({}, { __mode = "k" }),   -- timer coroutine -> scope of its nodes
        threads = setmetatable({}, { __mode = "k" }), -- coroutine -> light threads it spawned
        ticking = false,      -- the ticker's timer is pending
        next_peek = 0,        -- when the reaper next peeks at client sockets (ngx.now())
        reap_round = false,   -- the ticker's rounds over live and scopes (ticker.lua)
        scope_round = false,
    }, mt)
    local ok, err, detail = loop.start(self)
    if not ok then
        return nil, err, detail
    end
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


--- Yields this request until set or `timeout` seconds (nil or math.huge:
--- no limit). A timeout that is not nil or a number >= 0 raises.
function Event:wait(timeout)
    local kind = type(timeout)   -- not `~= nil`: a NULL cdata equals nil
    if kind ~= "nil" and not (kind == "number" and timeout >= 0) then
        check_wait(timeout, "wait", 1)   -- raises (NaN waited for ever)
    end
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
    elseif not w.looping then
        loop.restart(w)         -- the exit drain ended, and a request waits again
    end
    self.co = running()
    ticker.note_client(self)
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
    if ok and not self.cancelled and deadline then
        -- Let nginx poll before this request goes on, in our turn, while
        -- still counted as waiting: one aborted meanwhile is reaped.
        local left = deadline - ngx.now()
        gate.pass(left > 0 and left or 0, self)
    elseif ok and not self.cancelled then
        gate.pass(nil, self)
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


--- Waits, at most `timeout` seconds (nil: no bound of its own), for the
--- worker's turn before a line is joined (zkcoord.line.node's create):
--- requests that arrive while it is busy queue, in arrival order, and
--- send their creates a few per turn of the event loop
--- (zkcoord.wait.ngx.gate). False when `timeout` ran out first.
function _M.admit(_, timeout)
    if NO_WAIT[get_phase()] then
        return true             -- cannot yield here: its own wait raises
    end
    return gate.pass(timeout)
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
--- timer is where work that outlives it (leadership) belongs; there the
--- node is only noted under its coroutine, so that a light thread killed
--- while waiting in a line leaves it (ticker.lua, abandoned).
--- `request_only`: only the end of the request lets go, not that rule (a
--- lock cohort's seat, whose coroutine may wait on another's behalf).
--- Returns true when tied.
function _M:track(e, path, request_only)
    if get_phase() == "timer" then
        local co = running()
        local s = self.by_co[co]
        if not s then
            s = { nodes = {} }     -- not in self.scopes: no request ends it
            self.by_co[co] = s
        end
        e.scope, e.co = s, not request_only and co or nil
        s.nodes[path] = e
        return true
    end
    if not ctx_ref then
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
    e.scope, e.co = s, not request_only and running() or nil
    s.nodes[path] = e
    arm(self)
    return true
end


--- Unties entry `e`, tracked as `path`, from the request (or timer) it
--- was tied to, from any request or timer: a cohort seat that let go.
function _M.untie(_, e, path)
    local s = e.scope
    if s and s.nodes[path] == e then
        s.nodes[path] = nil
    end
end


--- Unties node `path` from the current request (a lock cohort's node: the
--- cohort ties its holders instead); the node stays owned by the client.
function _M:untrack(path)
    local s
    if get_phase() == "timer" then
        s = self.by_co[running()]
    else
        local ok, ctx = pcall(get_ctx)
        s = ok and self.by_ctx[ctx]
    end
    local e = s and s.nodes[path]
    if e then
        s.nodes[path], e.scope = nil, nil
    end
end


--- A wait always yields the request (or timer) thread: other requests,
--- and our callbacks (run in timers), go on meanwhile.
function _M.yields()
    return true
end


--- Sleeps `seconds` (a number >= 0; math.huge: for ever), yielding the
--- request.
function _M.sleep(_, seconds)
    check_wait(seconds, "sleep", 1, true)
    _M.check_phase("sleep")
    -- ngx.sleep takes milliseconds as a C int: sleep in chunks
    while seconds > MAX_WAIT do
        ngx.sleep(MAX_WAIT)
        seconds = seconds - MAX_WAIT
    end
    if seconds > 0 then
        ngx.sleep(seconds)
    end
    return false
end


-- The runner: drains the queue, callbacks deferred meanwhile included (a
-- callback that waits lets others run, and they only append), a batch at
-- a time (zkcoord.wait.ngx.loop). Also when fired premature (reload,
-- quit): else the queue waits for the next defer, or for close() in
-- exit_worker, where callbacks cannot wait.
local function run_deferred(_, self)
    local ok, err = pcall(loop.run_callbacks, self)
    self.runner = false
    if not ok then
        log(ERR, "zkcoord: callbacks: ", err)
    end
end


--- Runs callbacks in order, one at a time, in one timer (never in the pump).
function _M:defer(fn, ...)
    local pump = self.pump
    self.sets = self.sets + 1       -- progress, for the poll loop
    pump:enqueue_callback(fn, ...)
    if get_phase() == "exit_worker" then
        -- No timers here ("API disabled"): client:close() in exit_worker
        -- still reports events and "closed". Run them now (a runner waiting
        -- in a callback never resumes); they cannot wait in this phase (a
        -- wait raises, and the runner logs it).
        pump:run_callbacks()
        return
    end
    if self.runner then
        return                      -- the runner drains it, in order
    end
    self.runner = true
    local ok, err = ngx.timer.at(0, run_deferred, self)
    if not ok then
        self.runner = false
        log(ERR, "zkcoord: cannot schedule callbacks: ", err)
    end
end


--- Seconds on the library's monotonic clock (recipes' deadlines).
_M.now = core.now


--- client:spawn(fn, ...) in nginx: a light thread of the current
--- coroutine (a request's, a timer's or a light thread's).
function _M:spawn(fn, ...)
    local t, err = ngx.thread.spawn(fn, ...)
    if not t then
        error("zkcoord: cannot spawn: " .. tostring(err), 3)
    end
    -- Per parent: only the parent may ngx.thread.wait on a thread, and
    -- one waiter serves every request of the worker.
    local parent = running()
    local list = self.threads[parent]
    if not list then
        list = {}
        self.threads[parent] = list
    end
    list[#list + 1] = t
    return t
end


local co_status, remove, huge = coroutine.status, table.remove, math.huge
local TIMED_OUT = {}     -- what run's sleeper returns: no thread returns it

local function sleeper(seconds)
    _M.sleep(nil, seconds)
    return TIMED_OUT
end


-- Waits for the threads of `list` in order, the sleeper `timer` (if any)
-- bounding each wait; a thread that ended leaves the list. Returns true
-- when all ended, false when the sleeper ended first. A thread's error
-- is not ours to raise: nginx logs it ("lua user thread aborted"), as the
-- blocking waiter logs a spawned coroutine's, and it counts as ended.
local function wait_all(list, timer)
    while list[1] do
        local t = list[1]
        -- Killed, or waited for by the caller: ngx.thread.wait skips it
        -- and would wait for the sleeper alone.
        if co_status(t) ~= "dead" then
            if timer then
                local ok, res = ngx.thread.wait(t, timer)
                if ok and res == TIMED_OUT then
                    return false
                end
            else
                ngx.thread.wait(t)
            end
        end
        remove(list, 1)
    end
    return true
end


--- client:run(timeout) in nginx: waits for the light threads this
--- coroutine spawned, at most `timeout` seconds (nil: until done). On
--- timeout it returns false and the threads go on, as in the blocking
--- waiter: a later run waits for them again.
function _M:run(timeout)
    local parent = running()
    local list = self.threads[parent]
    if not list then
        return true
    end
    local timer = timeout and timeout < huge and ngx.thread.spawn(sleeper, timeout)
    local ok, done = pcall(wait_all, list, timer)
    if timer then
        ngx.thread.kill(timer)     -- else the request would wait for it to end
    end
    if not ok then
        error(done, 0)
    end
    if done then
        self.threads[parent] = nil
    end
    return done
end


return _M
