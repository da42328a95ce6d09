--- zkcoord.client.pump: the pump a waiter drives (contract for waiters).
--
-- One per client. It owns the C completion queue and the callback queue:
-- `drain` hands each record the ZooKeeper threads queued to the client
-- (which completes requests, fires watches, moves the session state),
-- `wait` blocks this thread on the queue no longer than the client's next
-- session timer, and callbacks (watches, state listeners, late replies)
-- wait in order until the waiter runs them: inline after a drain
-- (blocking) or in a timer of their own (nginx). The waiter owns the loop;
-- the pump owns no loop of its own.
--
-- The client hands the pump its record and timer handlers at
-- construction (static functions taking the client), so the pump reads no
-- client field.
local compat = require "zkcoord.compat"

local setmetatable, select, tostring = setmetatable, select, tostring
local xpcall, unpack = compat.xpcall, compat.unpack
local traceback = debug.traceback

local _M = {}

local Pump = {}
local mt = { __index = Pump }


--- `q`: the C completion queue. `owner`: the client. `hooks`: static
--- functions of the client: record(owner, rec) for each drained record,
--- check_timers(owner), timer_cap(owner, seconds) -> seconds.
function _M.new(q, owner, hooks)
    return setmetatable({
        q = q,
        owner = owner,
        on_record = hooks.record,
        on_timers = hooks.check_timers,
        cap = hooks.timer_cap,
        -- The record q:next() fills: one table reused for every record,
        -- made with every field so that filling it never adds a key.
        rec = { kind = 0, id = 0, rc = 0, value = false, stat = false, extra = false,
                type = 0, state = 0, path = false },
        callbacks = { head = 1, tail = 0 },
    }, mt)
end


--- Hands every queued record to the client, oldest first, without waiting;
--- at most `limit` of them when given (a waiter that must yield between
--- batches: nginx). True when it stopped at the limit: more may be queued,
--- and no new doorbell rings for them.
function Pump:drain(limit)
    local q, rec, on_record, owner = self.q, self.rec, self.on_record, self.owner
    if not q:next(rec) then
        return false
    end
    local n, more = 1, false
    while true do
        on_record(owner, rec)
        if limit and n >= limit then
            more = true
            break
        end
        if not q:next(rec) then
            break
        end
        n = n + 1
    end
    -- Let go of the last record's values (data, lists, stat).
    rec.value, rec.stat, rec.extra, rec.path = false, false, false, false
    return more
end


--- Keeps the client's session timers (the loss of a suspended session).
function Pump:check_timers()
    self.on_timers(self.owner)
end


--- Drains (at most `limit` records, see drain) and keeps the timers: what
--- a waiter does each time it wakes. Callbacks are the waiter's to run
--- (run_callbacks). True when records may be left.
function Pump:step(limit)
    local more = self:drain(limit)
    self.on_timers(self.owner)
    return more
end


--- How long a waiter may sleep: at most `seconds`, and no longer than the
--- client's next session timer.
function Pump:timer_cap(seconds)
    return self.cap(self.owner, seconds)
end


--- Blocks this thread until records are queued, at most `seconds` (and no
--- longer than the next session timer). True when records are ready.
function Pump:wait(seconds)
    return self.q:wait(self.cap(self.owner, seconds))
end


--- Wakes a wait() or the doorbell reader at once (any thread).
function Pump:kick()
    self.q:kick()
end


--- The fd (an eventfd) that turns readable when records arrive.
function Pump:fd()
    return self.q:fd()
end


--- Reads the fd back to not readable (before draining).
function Pump:clear_fd()
    self.q:clear_fd()
end


--- The nginx doorbell: a unix socket at `path` the core writes one byte to
--- when the queue goes from empty to non-empty. listen, connect to it,
--- accept (which unlinks the path); close_doorbell when done.
function Pump:listen_unix(path)
    return self.q:listen_unix(path)
end


function Pump:accept_unix()
    return self.q:accept_unix()
end


function Pump:close_doorbell()
    self.q:close_doorbell()
end


--- Queues fn(...) to run at the next run_callbacks.
function Pump:enqueue_callback(fn, ...)
    local cbs = self.callbacks
    cbs.tail = cbs.tail + 1
    cbs[cbs.tail] = { fn, select("#", ...), ... }
end


--- Runs the queued callbacks in order, each protected: a failing one is
--- logged through the client and the others still run. At most `limit`
--- of them when given; true when some are left.
function Pump:run_callbacks(limit)
    local cbs = self.callbacks
    local n = 0
    while cbs.head <= cbs.tail do
        if limit and n >= limit then
            return true
        end
        n = n + 1
        local h = cbs.head
        local item = cbs[h]
        cbs[h] = nil
        cbs.head = h + 1
        local ok, err = xpcall(item[1], traceback, unpack(item, 3, 2 + item[2]))
        if not ok then
            self.owner:log("error", "callback failed: " .. tostring(err))
        end
    end
    cbs.head, cbs.tail = 1, 0
    return false
end


--- How many callbacks wait to run.
function Pump:queued_callbacks()
    local cbs = self.callbacks
    return cbs.tail - cbs.head + 1
end


return _M
