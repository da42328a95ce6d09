--- zkcoord.wait.blocking: the default waiter outside nginx.
--
-- The calling thread blocks on the C core's condition variable. While it
-- waits it drives the client's pump (zkcoord.client.pump): one loop here
-- drains the queue, so replies to other requests, watch events and session
-- changes are handled meanwhile, and runs their callbacks right after
-- (never on a ZooKeeper thread). A waiter is the only place that
-- knows how to wait: the client and every recipe wait through `event()` and
-- `sleep()` (kazoo's handler idea).
--
-- Coroutines: client:spawn(fn) starts fn in a coroutine this waiter
-- schedules, and client:run() drives them. A wait inside such a coroutine
-- yields to the others instead of blocking the thread, so one process can
-- have many acquires or adds in flight, as nginx requests do. Waits outside
-- a spawned coroutine block as before.
local core = require "zkcoord.core"
local check_wait = require("zkcoord.util.args").check_wait
local contract = require "zkcoord.contract"

local now = core.now
local setmetatable, type, error, pairs, select, tostring, unpack =
    setmetatable, type, error, pairs, select, tostring, require("zkcoord.compat").unpack
local co_running, co_create, co_resume, co_yield, co_status =
    coroutine.running, coroutine.create, coroutine.resume, coroutine.yield, coroutine.status
local traceback = debug.traceback
local huge, min = math.huge, math.min

local _M = { _VERSION = require("zkcoord.version"), name = "blocking", inline_callbacks = true }
local mt = { __index = _M }

local Event = {}
local event_mt = { __index = Event }


---@param client table the zkcoord client this waiter serves
---@param pump table? the client's pump (default contract.pump(client))
function _M.new(client, pump)
    return setmetatable({
        client = client,
        pump = pump or contract.pump(client),
        tasks = {},        -- coroutine -> { deadline =, ev = } while it waits, or true
        ready = {},        -- coroutines to resume, in order
        count = 0,         -- spawned and not finished
        next_due = huge,   -- at most the earliest deadline of a waiting task
    }, mt)
end


-- One turn of the pump: records in, timers kept, callbacks run inline.
local function turn(w)
    local pump = w.pump
    pump:step()
    pump:run_callbacks()
end


-- The one loop of a blocking wait: turn the pump until `ev` is set, the
-- deadline passes or the client closes; sleep on the C queue in between
-- (no longer than the client's next session timer).
local function turn_until(w, ev, deadline)
    local pump, client = w.pump, w.client
    while true do
        turn(w)
        if ev.is_set then
            return true
        end
        local left = deadline - now()
        if left <= 0 or contract.is_closed(client) then
            return ev.is_set
        end
        pump:wait(left)
    end
end


--- A one-shot event: `set()` once, `wait(timeout)` until it is set.
function _M:event()
    return setmetatable({ waiter = self, is_set = false }, event_mt)
end


--- Sets the event and wakes whoever waits on it, once: a coroutine whose
--- timed wait falls due in the same turn of run() is resumed once, and its
--- wait returns true (the waiters' contract: util.waker relies on it).
function Event:set()
    if self.is_set then
        return
    end
    self.is_set = true
    local co = self.co
    if co then
        self.co = nil
        local w = self.waiter
        -- Woken: no longer waiting, so run()'s deadline scan cannot queue
        -- it a second time in the same pass.
        if w.tasks[co] then
            w.tasks[co] = true
        end
        w.ready[#w.ready + 1] = co
    end
end


--- Waits until set or until `timeout` seconds pass (nil or math.huge: no
--- limit other than the client's own). Returns true when set, false on
--- timeout. A timeout that is not nil or a number >= 0 raises.
function Event:wait(timeout)
    local kind = type(timeout)   -- not `~= nil`: a NULL cdata equals nil
    if kind ~= "nil" and not (kind == "number" and timeout >= 0) then
        check_wait(timeout, "wait", 1)   -- raises (NaN waited for ever)
    end
    if self.is_set then
        return true
    end
    local w = self.waiter
    local co = co_running()
    if co and w.tasks[co] then
        -- A spawned coroutine: let the others run until we are set or due.
        local due = timeout and now() + timeout or huge
        w.tasks[co] = { deadline = due, ev = self }
        if due < w.next_due then
            w.next_due = due
        end
        self.co = co
        co_yield()
        w.tasks[co] = true
        self.co = nil
        return self.is_set
    end
    return turn_until(w, self, timeout and now() + timeout or huge)
end


--- Does a wait here let other code of this thread run meanwhile? Only in
--- a spawned coroutine; elsewhere it blocks the thread.
function _M:yields()
    local co = co_running()
    return co ~= nil and self.tasks[co] ~= nil
end


--- Sleeps `seconds` (a number >= 0; math.huge: until the client closes)
--- while still serving the client's events.
function _M:sleep(seconds)
    check_wait(seconds, "sleep", 1, true)
    return self:event():wait(seconds)
end


--- Runs `fn(...)` soon, outside the drain loop: at the end of the current
--- pump (blocking mode runs callbacks inline, in arrival order).
function _M:defer(fn, ...)
    self.pump:enqueue_callback(fn, ...)
end


--- Starts fn(...) in a coroutine that client:run() schedules.
function _M:spawn(fn, ...)
    if type(fn) ~= "function" then
        error("bad argument #1 to 'spawn' (function expected)", 3)
    end
    local co = co_create(fn)
    self.tasks[co] = true
    self.count = self.count + 1
    self.ready[#self.ready + 1] = { co, select("#", ...), ... }
    return co
end


local function resume(self, item)
    local co, ok, err
    if type(item) == "table" then
        co = item[1]
        ok, err = co_resume(co, unpack(item, 3, 2 + item[2]))
    else
        co = item
        -- Finished already (on Lua 5.1 a wait inside pcall cannot yield and
        -- leaves its event naming the coroutine): never resume it again.
        if self.tasks[co] == nil then
            return
        end
        ok, err = co_resume(co)
    end
    if not ok then
        self.client:log("error", "spawned coroutine failed: " .. tostring(err) .. "\n"
                                 .. traceback(co))
    end
    if co_status(co) == "dead" then
        self.tasks[co] = nil
        self.count = self.count - 1
    end
end


--- Runs the spawned coroutines until all have finished, at most `timeout`
--- seconds (nil: until done). Returns true when all finished.
function _M:run(timeout)
    if co_running() and self.tasks[co_running()] then
        error("client:run() cannot be called from a spawned coroutine", 3)
    end
    local deadline = timeout and now() + timeout or huge
    while self.count > 0 do
        turn(self)
        -- Wake the due ones (their wait times out). The scan visits every
        -- task, so it runs only once the earliest deadline may have come
        -- (next_due, a lower bound kept by the waits): a chain of local
        -- handoffs among 10,000 coroutines scanned them all per handoff.
        local t = now()
        local next_due = self.next_due
        if next_due <= t then
            next_due = huge
            for co, st in pairs(self.tasks) do
                if type(st) == "table" then
                    if st.deadline <= t then
                        self.tasks[co] = true
                        st.ev.co = nil
                        self.ready[#self.ready + 1] = co
                    elseif st.deadline < next_due then
                        next_due = st.deadline
                    end
                end
            end
            self.next_due = next_due
        end
        local ready = self.ready
        if #ready > 0 then
            self.ready = {}
            for i = 1, #ready do
                resume(self, ready[i])
            end
        else
            local left = min(deadline, next_due) - t
            if deadline - t <= 0 then
                return false
            end
            if left > 0 then
                self.pump:wait(left)
            end
        end
    end
    turn(self)
    return true
end


--- Seconds on the library's monotonic clock (recipes' deadlines).
_M.now = now


return _M
