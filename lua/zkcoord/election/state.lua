--- zkcoord.election.state: the election's one state and its transitions
--- (internal; zkcoord.election sets it, its parts read it).
--
--   idle         no position of ours: new, after resign(), a campaign that
--                failed, or a leadership lost without a rejoin
--   campaigning  campaign() waits in the line (the position's enter())
--   checking     campaign() is through, and checks that our node is our
--                session's (CURATOR-696) before it calls us leader
--   leading      elected; is_leader() asks the position too (through, in
--                our session, after what reached the process)
--   rejoining    a leadership lost unasked joins the line again by itself
--                (zkcoord.election.rejoin)
--
-- Every change goes through set(), which refuses (raises) one the table
-- does not list: a state another path did not expect is a bug to see, not
-- an answer to give.
local error, tostring = error, tostring

local _M = {}

--- The state of a new election.
_M.INITIAL = "idle"

-- from -> the states it may go to.
local NEXT = {
    -- a loss goes to idle first (on_lost runs there), then may rejoin
    idle = { campaigning = true, rejoining = true },
    -- a campaign() of another coroutine replaces the waiting one
    campaigning = { campaigning = true, checking = true, idle = true },
    checking = { leading = true, campaigning = true, idle = true },
    leading = { idle = true },
    -- a rejoin checks our node inside its step (still rejoining), campaign()
    -- takes its place (through idle)
    rejoining = { leading = true, idle = true },
}


--- The election's state.
function _M.get(self)
    return self._state
end


--- Moves the election to state `to`; raises on a move NEXT does not list.
function _M.set(self, to)
    local from = self._state
    if not (NEXT[from] and NEXT[from][to]) then
        error("election: no transition from " .. tostring(from) .. " to " .. tostring(to), 2)
    end
    self._state = to
end


return _M
