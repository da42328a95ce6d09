--- zkcoord.cohort.seat: one owner's place in a cohort, a position as
--- zkcoord.line's is (internal part of zkcoord.cohort): enter, leave,
--- interrupt, is_through, node, stat, token, on_lost, plus on_revoke (the
--- cohort watches a node's revocation requests once for all its holders).
-- A seat is served by a kind: zkcoord.cohort.exclusive (a lock: one holder
-- at a time) or zkcoord.cohort.shared (an rwlock's readers). The fields
-- below are the seat's; the kind that serves it owns the ones it sets (q,
-- n, cohort, rec, gen, entry, relead, confirming), zkcoord.cohort.node
-- the one its join sets (leading).
--
-- nginx (owners are requests): the node is the cohort's, not the request's
-- that made it (untied from it once through). Each seat that waits or
-- holds ties a "tie" to its request instead (waiter:track): when the
-- request ends (or aborts), the ticker calls the tie's leave(), which
-- leaves the seat: a holder's hold is released (to the next local waiter,
-- or the node goes; logged as for a node), a waiter leaves the local
-- queue, a leader that was joining the line passes the lead on. A light
-- thread killed while it waits here leaves when its request ends.
local util = require "zkcoord.util"
local fifo = require "zkcoord.cohort.fifo"
local node = require "zkcoord.cohort.node"

local setmetatable = setmetatable

local _M = {}
local Seat = {}
local EMPTY = {}
local mt = { __index = Seat }


--- A seat for one acquire of the line of `driver` under `path`, with the
--- lock's options `opts` (data, cohort_handoffs, cohort_time), served by
--- `kind`.
function _M.new(client, path, driver, opts, kind)
    -- The fields every grant sets are in the constructor (false for
    -- none): the table is made at its size (a seat per acquire; a local
    -- handoff is a few microseconds).
    return setmetatable({
        client = client, path = path, driver = driver, opts = opts, kind = kind,
        lost_fns = false,   -- fn, arg pairs (on_lost); made by the first
        revoke_fns = nil,   -- fn, arg pairs (on_revoke); as lost_fns
        granted = false,    -- enter() returned true
        revoked = nil,      -- told of a revocation request
        tie = nil,          -- nginx: what ties the seat to its request
        q = false, n = 0, cohort = false, rec = false,    -- the kind's
    }, mt)
end


-- nginx: ties. A tie answers the waiter's contract for request-owned
-- nodes (node(), is_through(), leave(); client.nodes' own_node) for one
-- seat: through while the seat holds; leave() leaves the seat, for a
-- request that ended or a killed coroutine.
local Tie = {}
local tie_mt = { __index = Tie }

function Tie:node()
    return self.key
end

function Tie:is_through()
    local s = self.seat
    return s.kind.holds(s)
end

function Tie:leave()
    return self.seat:leave()
end

local tie_seq = 0

-- Ties the seat to the current request (nginx; a no-op elsewhere). Only
-- the end of the request lets go, not the ticker's rule for a killed
-- coroutine (matched by coroutine): that rule dropped ties of requests
-- still waiting here (spec/ngx_spec.lua, "a node deleted under its
-- holder": a waiter skipped, its acquire timed out).
local function tie(self)
    local w = self.client:waiter()
    if not w.track then
        return
    end
    tie_seq = tie_seq + 1
    local t = setmetatable({ seat = self,
                             key = ("%s (lock cohort, hold %d)"):format(self.path, tie_seq) },
                           tie_mt)
    t.q = t
    if w:track(t, t.key, true) then
        self.tie = t
    end
end

-- The seat no longer needs its request's watch.
local function untie(self)
    local t = self.tie
    if t then
        self.tie = nil
        self.client:waiter():untie(t, t.key)
    end
end


--- nginx: the node of position `q`, tied to the current request when it
--- was made, is the cohort's from now on (its seats' ties stand for it).
function Seat:untrack(q)
    local w = self.client:waiter()
    if w.untrack then
        w:untrack(q:node())
    end
end


--- Takes a place in the cohort, at most `timeout` seconds (nil: no limit,
--- 0: try once): true, or nil, err ("timeout", "closed", "interrupted", a
--- ZooKeeper code).
function Seat:enter(timeout)
    tie(self)
    local ok, err = self.kind.acquire(self.client, self.path, self.driver, self, timeout)
    if ok and self.interrupted then
        self:leave()      -- interrupted while handed the node: to the next
        ok, err = nil, "interrupted"
    end
    if not ok then
        untie(self)
        return nil, err
    end
    self.granted = true
    -- a grant with no write of ours is a local handoff (n numbers them)
    self.client:metrics():cohort_handoff(self.path, self.n > 0 and "local" or "remote")
    return true
end


--- Leaves whatever the seat has in the cohort: a hold is released (to
--- the next local owner, or the node goes, without waiting), a wait in
--- the local queue ends, a join of the line for the cohort passes the lead
--- on. Also the release after a loss (the cohort learns it, if it had not).
function Seat:leave()
    local kind = self.kind
    untie(self)
    if kind.holds(self) then
        return kind.release(self)
    end
    if node.drop_join(self) then    -- gone while joining the line for the cohort
        return
    end
    if self.relead then    -- its node lost, made to lead, never resumed
        self.relead = nil
        return kind.drop_relead(self)
    end
    local e = self.entry
    if e then
        self.entry = nil
        fifo.leave(e)
    end
end


--- Ends an enter() waiting in the local queue or joining the line (it
--- answers nil, "interrupted"); one handed the node meanwhile (its
--- confirmation pending: one round trip) passes it on and answers so when
--- that ends. A seat that holds is left.
function Seat:interrupt()
    local rec = self.leading
    if rec then
        rec.q:interrupt()     -- the join answers "interrupted": the lead passes on
        return true
    end
    local e = self.entry
    if e and not e.state then
        fifo.leave(e, true)
        return true
    end
    if self.granted then
        self:leave()
    else
        self.interrupted = true   -- enter() has not returned: it leaves then
    end
    return true
end


--- Does the seat hold its cohort's node, alive in the current session?
function Seat:is_through()
    local q = self.q
    if not (q and q:is_through()) then    -- may tell a loss first
        return false
    end
    return self.kind.holds(self)
end


--- The cohort's node (nil while the seat has none).
function Seat:node()
    local q = self.q
    return q and q:node() or nil
end


--- The node's create stat (nil while the seat has none).
function Seat:stat()
    local q = self.q
    return q and q:stat() or nil
end


--- The seat's fencing token pair: the node's czxid and n, the grant's
--- number within the node (zkcoord.cohort.number); else nil, "notheld".
function Seat:token()
    if not self:is_through() then
        return nil, "notheld"
    end
    return self.q:stat().czxid, self.n
end


--- fn(reason, arg) runs when the node is lost while the seat holds it.
--- Registered while it holds: its node is watched from now on.
function Seat:on_lost(fn, arg)
    local fns = self.lost_fns
    if not fns then
        fns = {}
        self.lost_fns = fns
    end
    fns[#fns + 1] = fn
    fns[#fns + 1] = arg == nil and false or arg
    if self.granted then
        self.kind.watch_lost(self)
    end
end


--- The kind's: the node is lost while the seat holds it.
function Seat:tell_lost(reason)
    local fns = self.lost_fns or EMPTY
    for i = 1, #fns, 2 do
        util.call(self.client, fns[i], "lock on_lost", reason, fns[i + 1])
    end
end


-- Watches the node the seat holds for revocation requests (once per node).
local function listen(self)
    if not self.granted or self.revoked or not self.revoke_fns then
        return
    end
    local rec = self.kind.held_node(self)
    if rec then
        node.listen(rec, self)
    end
end


--- fn(arg) runs when a revocation request ("__REVOKE__" in the node)
--- reaches the seat while it holds (once). Registered after enter().
function Seat:on_revoke(fn, arg)
    local fns = self.revoke_fns
    if not fns then
        fns = {}
        self.revoke_fns = fns
    end
    fns[#fns + 1] = fn
    fns[#fns + 1] = arg == nil and false or arg
    listen(self)
end


--- zkcoord.cohort.node's: a revocation request for `path` reached the
--- node while the seat holds it.
function Seat:tell_revoke()
    if self.granted and not self.revoked and self.revoke_fns then
        self.revoked = true
        local fns = self.revoke_fns
        for i = 1, #fns, 2 do
            util.call(self.client, fns[i], "lock on_revoke", fns[i + 1])
        end
    end
end


_M.mt = mt
return _M
