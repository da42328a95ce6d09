--- zkcoord.wait.ngx.gate: requests that wait for a turn of the worker's
--- event loop, let go in arrival order a few per turn.
--
-- zkcoord.wait.ngx.turn says when the worker has worked BUDGET seconds
-- since its event loop last turned. A request that then pauses alone (a
-- 1 ms sleep of its own) comes back in the next turn together with every
-- other one that paused, and they all run then: 3,446 requests woken by
-- one listing ran 40 ms of work in one turn (bench/ngx_hot.lua, 10,000
-- waiters on one lock). Here they queue instead and go one after the
-- other: each one, as it goes on, lets the next go unless the worker is
-- overdue (a semaphore posted now runs in this same pass, after it
-- yields); when it is, a timer of the gate (one, while the queue is not
-- empty) lets the next go at the next turn. A turn so runs BUDGET seconds
-- of them and one more, and what the queue costs is per request, not per
-- request and turn. A request that was let go but never resumed (aborted
-- meanwhile) is passed over at the timer's next tick. Once someone waits
-- here, newcomers queue behind: the order in which they came is the order
-- in which they go on (a lock's joins send their creates in it).
-- It touches ngx only when called, so it loads outside nginx.
local ngx = ngx
local turn = require "zkcoord.wait.ngx.turn"

local _M = { _VERSION = require("zkcoord.version") }

--- Seconds a wait without a bound of its own stays in the queue at most;
--- then it goes on regardless (the queue lets hundreds go per turn: only a
--- worker stuck for that long leaves one waiting so long).
_M.CAP = 30

local new_semaphore     -- ngx.semaphore.new, once in nginx
-- Semaphores back from a pass, for the next (each is a cdata with a
-- finalizer: 10,000 requests through the gate made 10,000 for the GC).
local spare, spares = {}, 0
local SPARES = 64
local queue, head, tail = {}, 1, 0
local sent, sent_clock = nil, nil   -- the entry let go last, until it resumes
local running = false               -- the timer runs


--- Does the coroutine of queue entry `e` (a mark's `gated`) still live: it
--- waits, or it was let go in this very turn (it resumes in this pass, after
--- the timers: a reaper that runs first must not take it for gone).
function _M.alive(e)
    return e.sema:count() < 0 or e.let_go == ngx.now()
end


-- Lets the first entry still waiting go (posts its semaphore); entries
-- whose wait ended (timed out, coroutine gone) are dropped. False when
-- none was left.
local function let_next_go()
    while head <= tail do
        local e = queue[head]
        queue[head] = nil
        head = head + 1
        if e.sema:count() < 0 then  -- a coroutine waits on it
            sent, sent_clock = e, ngx.now()
            e.let_go = sent_clock
            e.sema:post(1)
            return true
        end
    end
    queue, head, tail, sent = {}, 1, 0, nil
    return false
end


-- The gate's timer: at each turn, lets the next go when the chain stopped
-- (the last one let go found the worker overdue) or its entry never
-- resumed (let go at an earlier turn: a live one resumes in the same
-- pass). Ends when the queue is empty; a worker that exits lets all go.
local function run(premature)
    while head <= tail do
        if premature or ngx.worker.exiting() then
            while let_next_go() do end
            break
        end
        if not sent or sent_clock ~= ngx.now() then
            let_next_go()
        end
        ngx.sleep(turn.YIELD)
    end
    running = false
end


--- Waits for this request's (or timer's) turn: returns true at once when
--- nobody waits here and the worker is not overdue; else queues and
--- yields until let go, at most `timeout` seconds (nil: CAP, then true),
--- and lets the next go on its way unless overdue. False when `timeout`
--- ran out first. `mark`, a table, has `gated` set to its entry meanwhile
--- (`alive` tells the reaper whether its coroutine still lives).
function _M.pass(timeout, mark)
    if head > tail and not turn.overdue() then
        return true
    end
    if timeout and timeout <= 0 then
        return false
    end
    if not new_semaphore then
        new_semaphore = require("ngx.semaphore").new
    end
    local sema
    if spares > 0 then
        sema, spare[spares], spares = spare[spares], nil, spares - 1
    else
        sema = new_semaphore(0)
    end
    local e = { sema = sema, let_go = false }
    if not running then
        running = true
        local ok = ngx.timer.at(0, run)
        if not ok then
            running = false
            return true         -- no timer to let it go: go on now
        end
    end
    tail = tail + 1
    queue[tail] = e
    if mark then
        mark.gated = e
    end
    local ok = e.sema:wait(timeout and timeout < _M.CAP and timeout or _M.CAP)
    if mark then
        mark.gated = nil
    end
    if sent == e then
        sent = nil
    end
    -- Again of use when out of the queue (let go) with nothing posted
    -- left in it; one that timed out stays in the queue until passed over.
    if e.let_go and spares < SPARES and sema:count() == 0 then
        spares = spares + 1
        spare[spares] = sema
    end
    if ok and not turn.overdue() then
        let_next_go()
    end
    return ok or not timeout
end


return _M
