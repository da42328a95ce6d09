--- zkcoord.wait.ngx.turn: how long the worker has worked since its event
--- loop last turned, and the yield that lets it turn.
--
-- nginx runs what is ready (the connections one epoll_wait reported, the
-- events posted meanwhile, the timers due) before it polls again, and a
-- semaphore posted from a posted event is run in that same pass: requests
-- woken one after the other (a cohort's 10,000 local handoffs), a pump
-- draining 10,000 replies or a ticker visiting 10,000 waiters would keep
-- every other request of the worker waiting until they are all done. Who
-- works through many at once asks `overdue()` and, when it is true,
-- `pause()`s. ngx.sleep(0) would not do: on a stock nginx it only runs
-- the events already posted, then the sleeper again, never a poll
-- (measured: a request working 2 ms between 300 ngx.sleep(0) kept /ping
-- waiting 4.0 s; with ngx.sleep(0.001) /ping took 3.7 ms at the median,
-- 34 ms at most, load 40); a timer of YIELD seconds lets the loop poll.
-- It touches ngx only when called.
local ngx = ngx
local now = require("zkcoord.core").now

local _M = { _VERSION = require("zkcoord.version") }

--- Seconds a pause sleeps (one event-loop turn: nginx's timers are in ms).
_M.YIELD = 0.001
--- Seconds of work after which overdue() is true. Each pause costs more
--- than YIELD on a loaded machine (the worker gives up its core and waits
--- for one again): 10,000 cohort handoffs took 1-4 s at a 2 ms budget
--- (load 28-42), 0.5 s without pauses.
_M.BUDGET = 0.005

local turn_clock, turn_began = -1, 0

--- Has the worker run more than BUDGET seconds since its event loop last
--- turned? nginx's cached clock (ngx.now(), in ms) moves only when the
--- loop turns, so while it has not moved the worker has worked since we
--- first saw that value.
function _M.overdue()
    local cached, t = ngx.now(), now()
    if cached ~= turn_clock then
        turn_clock, turn_began = cached, t
        return false
    end
    return t - turn_began > _M.BUDGET
end


--- Sleeps YIELD seconds: nginx polls, runs its timers, then resumes us.
function _M.pause()
    ngx.sleep(_M.YIELD)
end


return _M
