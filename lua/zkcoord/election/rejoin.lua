--- zkcoord.election.rejoin: a leadership lost unasked joins the line again
--- by itself (internal; Curator's LeaderLatch resets after a lost session,
--- and when it finds its node gone).
--
-- A leadership that ended "sessionexpired" or "deleted" (never after
-- resign()) joins the line again, as a candidate at the back, and
-- on_elected callbacks run when it wins (is_leader() is true from then).
-- The election is "rejoining" meanwhile (zkcoord.election.state). It runs
-- in the client's callbacks (a step is queued when the loss is reported,
-- and at every "connected"): in plain Lua inside whichever client call
-- runs them next (dispatch(), process(), any request, or a state question:
-- is_leader() and the like run queued callbacks first, and then take a
-- step's round trips), in nginx in the client's callback timer.
--
-- A step is one enter_step() of the position (zkcoord.line): its round
-- trips wait at most a session timeout (a few milliseconds when
-- connected); the wait for the node below ours is a watch that steps
-- again, so no call waits for leadership. Through, our node's owner is
-- checked (CURATOR-696) before we lead. A step that fails on the
-- connection goes on at the next "connected"; any other error is logged
-- and ends the rejoin (its node deleted). resign() ends a rejoin and
-- deletes its node; so does campaign(), which then joins afresh;
-- client:close() ends it (the node goes with the session).
local line = require "zkcoord.line"
local util = require "zkcoord.util"
local errors = require "zkcoord.errors"
local state = require "zkcoord.election.state"

local tostring = tostring

local _M = {}

-- The rejoin's record (self._rejoin while the election is rejoining):
-- { q = its position, wake = the watch's function, on_state = its state
-- listener, stepping = a step runs, again = a step was asked for meanwhile }.

local step

-- Closures are made outside the frames that wait (in nginx a waiting
-- coroutine may be gone when the watch fires).
local function waker(self, r)
    return function() step(self, r) end
end

local function on_connected(self, r)
    return function(st)
        if st == "connected" then
            step(self, r)
        end
    end
end


-- Detaches the rejoin from the client (its node stays: the caller leaves
-- it or leads with it).
local function detach(self, r)
    self._rejoin = nil
    self.client:remove_listener(r.on_state)
end


--- Ends the rejoin running (the election goes idle) and returns its
--- position, whose node the caller leaves; nil if none runs.
function _M.stop(self)
    local r = self._rejoin
    if not r then
        return nil
    end
    detach(self, r)
    if self._q == r.q then
        self._q = nil
    end
    state.set(self, "idle")
    return r.q
end


-- Ends the rejoin for good after an error that no new session mends: its
-- node deleted, the error logged.
local function give_up(self, r, err)
    self.client:log("error", "election " .. self.path .. ": rejoin failed: " .. tostring(err))
    _M.stop(self)
    r.q:leave()
end


-- A step failed with err: the connection's errors (and a step's timeout)
-- wait for the next "connected"; "closed" ends it (nothing is left on the
-- server); anything else gives up.
local function failed(self, r, err)
    if err == "closed" then
        _M.stop(self)
    elseif not (errors.transient[err] or errors.unknown_outcome[err]
                or err == "sessionexpired" or err == "timeout") then
        give_up(self, r, err)
    end
end


-- One try: returns true to try again at once (through with a node of an
-- ended session), nothing otherwise. Every wait runs callbacks, user code
-- included: after each, the rejoin may have ended (self._rejoin ~= r).
local function try(self, r)
    local client, q = self.client, r.q
    if client:is_closed() then
        return failed(self, r, "closed")
    elseif client:state() ~= "connected" then
        return           -- the next "connected" steps again
    end
    local through, err = q:enter_step(r.wake, client:session_timeout())
    if self._rejoin ~= r then
        return q:leave()  -- ended while we waited
    elseif through == nil then
        return failed(self, r, err)
    elseif not through then
        return           -- the watch on the node below ours steps again
    end
    local mine, oerr = self:_owned(q)
    if self._rejoin ~= r then
        return q:leave()
    elseif not mine then
        q:leave()     -- CURATOR-696: made in a session that has ended meanwhile
        return mine == false or failed(self, r, oerr)
    end
    detach(self, r)
    self._lost = nil      -- leading again: resign() answers true
    self:_elected(q)
end


-- Runs tries until one settles (bounded: a node that goes every time).
-- A step asked for while one runs (from a callback in its waits) runs
-- after it.
function step(self, r)
    if self._rejoin ~= r then
        return
    end
    if r.stepping then
        r.again = true
        return
    end
    r.stepping = true
    local again = true
    for _ = 1, util.MAX_RACES do
        r.again = false
        again = try(self, r)
        if self._rejoin ~= r or not (again or r.again) then
            break
        end
    end
    r.stepping = false
    if self._rejoin == r and (again or r.again) then
        self.client:waiter():defer(step, self, r)   -- later, not in a loop
    end
end


--- Starts rejoining (the election goes from idle to rejoining): a new
--- position, stepped from the client's callback queue (not inside the code
--- that reported the loss) and at every "connected".
function _M.start(self)
    local q = line.new(self.client, self.path, self._driver, self.id)
    local r = { q = q, stepping = false, again = false }
    r.wake = waker(self, r)
    r.on_state = on_connected(self, r)
    self._q, self._rejoin = q, r
    state.set(self, "rejoining")
    self.client:on_state(r.on_state)
    self.client:waiter():defer(step, self, r)
end


return _M
