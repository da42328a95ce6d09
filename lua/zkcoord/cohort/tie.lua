--- zkcoord.cohort.tie: nginx only, a seat tied to the request that waits
--- or holds in it, and the cohort's node untied from the request that
--- made it (internal part of zkcoord.cohort).
--
-- The node is the cohort's, not the request's that made it (untied from
-- it once through). Each seat that waits or holds ties a "tie" to its
-- request instead (waiter:track): when the request ends (or aborts), the
-- ticker calls the tie's leave(), which leaves the seat: a holder's hold
-- is released (to the next local waiter, or the node goes; logged as for
-- a node), a waiter leaves the local queue, a leader that was joining the
-- line passes the lead on. A light thread killed while it waits in a seat
-- leaves when its request ends.
local setmetatable = setmetatable

local _M = {}

-- A tie answers the waiter's contract for request-owned nodes (node(),
-- is_through(), leave(); client.nodes' own_node) for one seat: through
-- while the seat holds; leave() leaves the seat.
local Tie = {}
local mt = { __index = Tie }

function Tie:node()
    return self.key
end

function Tie:is_through()
    return self.seat:holds()
end

function Tie:leave()
    return self.seat:leave()
end

local seq = 0

--- Ties `seat` to the current request (seat.tie), when the client's waiter
--- tracks requests (nginx). Only the end of the request lets go, not the
--- ticker's rule for a killed coroutine (matched by coroutine): that rule
--- dropped ties of requests still waiting here (spec/ngx_spec.lua, "a node
--- deleted under its holder": a waiter skipped, its acquire timed out).
function _M.tie(seat)
    local w = seat.client:waiter()
    if not w.track then
        return
    end
    seq = seq + 1
    local t = setmetatable({ seat = seat,
                             key = ("%s (lock cohort, hold %d)"):format(seat.path, seq) }, mt)
    t.q = t
    if w:track(t, t.key, true) then
        seat.tie = t
    end
end


--- The seat no longer needs its request's watch.
function _M.untie(seat)
    local t = seat.tie
    seat.tie = nil
    seat.client:waiter():untie(t, t.key)
end


--- The node of line position `q`, tied to the current request when it was
--- made, is the cohort's from now on (its seats' ties stand for it).
function _M.untrack(client, q)
    local w = client:waiter()
    if w.untrack then
        w:untrack(q:node())
    end
end


return _M
