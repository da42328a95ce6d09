-- bench/pollwait.lua: one Lua thread driving several zkcoord clients'
-- coroutines at once, through the clients' fds and poll(2).
--
--   local pollwait = require "pollwait"          -- with bench/ on package.path
--   local sched = pollwait.new()
--   local c1 = zkcoord.connect { servers = hosts, wait = sched:wait_option() }
--   local c2 = zkcoord.connect { servers = hosts, wait = sched:wait_option() }
--   sched:spawn(function() ... c1 ... end)
--   sched:spawn(function() ... c2 ... end)
--   assert(sched:run(60))
--
-- Why a waiter of its own: the default (blocking) waiter serves one
-- client: client:run() sleeps on that client's condition variable, so the
-- coroutines of a second client in the same thread would only progress if
-- the thread polled each client in turn (busy polling or added latency).
-- This is the custom waiter the README describes (`wait = { ... }` in
-- connect, client:fd() and client:process()): every client's fd (an
-- eventfd that turns readable when its replies or events arrive) goes into
-- one poll(2); a readable one is handled with client:process(), which runs
-- the callbacks inline, and those set the events the coroutines wait on.
--
-- A wait inside a coroutine of this scheduler yields; a wait outside one
-- (connect, close, code on the main thread) blocks the thread on that
-- client's fd alone, as the blocking waiter does.
local ffi = require "ffi"
local core = require "zkcoord.core"

local now = core.now
local co_running, co_resume, co_yield, co_status =
    coroutine.running, coroutine.resume, coroutine.yield, coroutine.status
local huge, min, ceil = math.huge, math.min, math.ceil
local unpack = unpack or table.unpack     -- luacheck: ignore 143

if not pcall(ffi.typeof, "struct zkb_pollfd") then
    ffi.cdef [[
    struct zkb_pollfd { int fd; short events; short revents; };
    int zkb_poll(struct zkb_pollfd *fds, unsigned long nfds, int timeout) __asm__("poll");
    ]]
end
local POLLIN = 1
-- The longest a poll sleeps without looking at the clients' timers (a
-- suspended session's loss is detected on the client's own clock).
local MAX_SLEEP = 0.05

local _M = {}
local sched_mt = { __index = _M }

local Waiter = {}
local waiter_mt = { __index = Waiter }

local Event = {}
local event_mt = { __index = Event }


function _M.new()
    return setmetatable({
        clients = {},      -- in order of connect
        tasks = {},        -- coroutine -> true (running or queued), or { deadline, ev } while it waits
        ready = {},        -- items to resume, in order
        count = 0,         -- spawned and not finished
        errors = {},       -- tracebacks of coroutines that failed
    }, sched_mt)
end


--- The value for connect's `wait` option: this scheduler waits for the client.
function _M:wait_option()
    return { new = function(client, pump) return self:_waiter(client, pump) end }
end


function _M:_waiter(client, pump)
    local w = setmetatable({ sched = self, client = client, pump = pump, name = "poll",
                             inline_callbacks = true, now = now }, waiter_mt)
    self.clients[#self.clients + 1] = client
    return w
end


-- Waiter protocol (the client calls these) ----------------------------------

function Waiter:event()
    return setmetatable({ w = self, is_set = false }, event_mt)
end


function Waiter:sleep(seconds)
    return self:event():wait(seconds)
end


function Waiter:defer(fn, ...)
    self.pump:enqueue_callback(fn, ...)
end


function Waiter:yields()
    local co = co_running()
    return co ~= nil and self.sched.tasks[co] ~= nil
end


function Waiter:spawn(fn, ...)
    return self.sched:spawn(fn, ...)
end


function Waiter:run(timeout)
    return self.sched:run(timeout)
end


-- Events ---------------------------------------------------------------------

function Event:set()
    if self.is_set then
        return
    end
    self.is_set = true
    local co = self._task
    if co then
        self._task = nil
        self.w.sched:_wake(co)
    end
end


local pfd1 = ffi.new("struct zkb_pollfd[1]")

function Event:wait(timeout)
    if self.is_set then
        return true
    end
    local sched = self.w.sched
    local co = co_running()
    if co and sched.tasks[co] then
        sched.tasks[co] = { deadline = timeout and now() + timeout or huge, ev = self }
        self._task = co
        co_yield()
        self._task = nil
        return self.is_set
    end
    -- Outside the scheduler's coroutines: block on this client's fd alone.
    local client = self.w.client
    local deadline = timeout and now() + timeout or huge
    pfd1[0].fd, pfd1[0].events = client:fd(), POLLIN
    while true do
        client:process()
        if self.is_set then
            return true
        end
        local left = deadline - now()
        if left <= 0 or client:state() == "closed" then
            return self.is_set
        end
        ffi.C.zkb_poll(pfd1, 1, ceil(min(left, MAX_SLEEP) * 1000))
    end
end


-- Scheduler ------------------------------------------------------------------

--- A coroutine waiting on an event, woken by its set or its deadline,
--- whichever comes first: the first flips its task to true, so a second
--- cannot queue it again.
function _M:_wake(co)
    if type(self.tasks[co]) == "table" then
        self.tasks[co] = true
        self.ready[#self.ready + 1] = co
    end
end


-- The blocking waiter's spawn: it keeps the same fields (tasks, ready, count).
_M.spawn = require("zkcoord.wait.blocking").spawn


function _M:_resume(item)
    local co, ok, err
    if type(item) == "table" then
        co = item[1]
        ok, err = co_resume(co, unpack(item, 3, 2 + item[2]))
    else
        co = item
        if self.tasks[co] == nil then
            return
        end
        ok, err = co_resume(co)
    end
    if not ok then
        self.errors[#self.errors + 1] = tostring(err) .. "\n" .. debug.traceback(co)
    end
    if co_status(co) == "dead" then
        self.tasks[co] = nil
        self.count = self.count - 1
    end
end


--- Runs the spawned coroutines until all have finished, at most `timeout`
--- seconds (nil: until done). Returns true when all finished.
function _M:run(timeout)
    local deadline = timeout and now() + timeout or huge
    local fds, nfds, open = nil, 0, {}
    local function gather()
        open = {}
        for _, c in ipairs(self.clients) do
            if c:state() ~= "closed" then
                open[#open + 1] = c
            end
        end
        nfds = #open
        fds = ffi.new("struct zkb_pollfd[?]", math.max(nfds, 1))
        for i, c in ipairs(open) do
            fds[i - 1].fd, fds[i - 1].events = c:fd(), POLLIN
        end
    end
    gather()
    local nclients = #self.clients
    while self.count > 0 do
        if #self.clients ~= nclients then   -- a coroutine connected another client
            nclients = #self.clients
            gather()
        end
        local t = now()
        local next_due = huge
        for co, st in pairs(self.tasks) do
            if type(st) == "table" then
                if st.deadline <= t then
                    st.ev._task = nil
                    self:_wake(co)
                elseif st.deadline < next_due then
                    next_due = st.deadline
                end
            end
        end
        local sleep = 0
        if #self.ready == 0 then
            if deadline <= t then
                return false
            end
            sleep = min(deadline, next_due, t + MAX_SLEEP) - t
        end
        local n = ffi.C.zkb_poll(fds, nfds, sleep > 0 and ceil(sleep * 1000) or 0)
        for i = 0, nfds - 1 do
            -- a poll that timed out looks at every client (its timers)
            if n == 0 and sleep > 0 or fds[i].revents ~= 0 then
                open[i + 1]:process()
            end
        end
        local ready = self.ready
        if #ready > 0 then
            self.ready = {}
            for i = 1, #ready do
                self:_resume(ready[i])
            end
        end
    end
    for _, c in ipairs(open) do
        if c:state() ~= "closed" then
            c:process()
        end
    end
    return true
end


return _M
