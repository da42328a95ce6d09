--- zkcoord.cohort.seat: one owner's seat in its process's cohort of a
--- line, a position as zkcoord.line's is (internal part of zkcoord.cohort):
--- enter, enter_step, leave, interrupt, is_through, node, stat, token,
--- on_lost, and on_revoke (the node is watched once for all its holders).
-- One path for a lock and an rwlock's readers (writers are not cohorted)
-- under a capacity policy (POLICIES; zkcoord.cohort's header, "Layout"):
-- the local queue, the bound of local grants (may_grant), a node's grants,
-- its release. A seat granted a node locally is `pending` until the node's
-- loss watch is confirmed. Fields: new()'s; a grant sets q, n, gen,
-- cohort, pending, relead (to lead after a loss), entry (its place in the
-- queue); zkcoord.cohort.node's join sets leading.
local core = require "zkcoord.core"
local util = require "zkcoord.util"
local node = require "zkcoord.cohort.node"
local registry = require "zkcoord.cohort.registry"
local tie = require "zkcoord.cohort.tie"
local contract = require "zkcoord.contract"

local now, remaining = core.now, util.remaining
local setmetatable, MAX_RACES = setmetatable, require("zkcoord.util.retry").MAX_RACES

local _M = {}
local Seat = {}
local EMPTY = {}
local mt = { __index = Seat }

_M.LOCAL_BITS = 12
_M.LOCAL_MAX = 2 ^ _M.LOCAL_BITS - 1    -- local grants of one node: n <= LOCAL_MAX
_M.DEFAULT_HANDOFFS = 16
_M.DEFAULT_TIME = 0.01

_M.POLICIES = {     -- the capacity policies
    exclusive = { capacity = 1, join_held = false },        -- a lock
    shared = { capacity = math.huge, join_held = true },     -- an rwlock's readers
}

--- May generation `g`'s node be granted locally once more (as grant g.n)?
--- Always while no participant is behind it (g.remote false), else within
--- the lock's cohort_handoffs and cohort_time; never beyond LOCAL_MAX (the
--- token's range).
local function may_grant(g, opts)
    local n = g.n
    if n > _M.LOCAL_MAX then
        return false
    end
    if not g.remote then
        return true
    end
    return n <= (opts.cohort_handoffs or _M.DEFAULT_HANDOFFS)
           and now() - g.since < (opts.cohort_time or _M.DEFAULT_TIME)
end

-- The queue (entries { h =, ev =, c = }; c.waiting[c.head .. c.tail]).
local function queued(c)
    return c.head <= c.tail      -- maybe one that gave up: pop skips those
end

local function enqueue(c, h, ev)
    local e = { h = h, ev = ev, c = c }
    c.tail = c.tail + 1
    c.waiting[c.tail] = e
    h.entry = e
    return e
end

-- The first entry still waiting, popped.
local function pop(c)
    local w = c.waiting
    while c.head <= c.tail do
        local e = w[c.head]
        w[c.head] = nil
        c.head = c.head + 1
        if not e.gone then
            return e
        end
    end
    c.head, c.tail = 1, 0
    return nil
end

-- Wakes entry `e`: "held" (granted a node locally), "joined" (holds: the
-- node its leader just entered) or "lead" (to join the line itself).
local function wake(e, state)
    e.state = state
    e.ev:set()
end

-- Waits for entry `e` to be woken: its state, or nil, err (the entry
-- stays, skipped by pop).
local function await(e, client, deadline)
    e.ev:wait(remaining(deadline))
    e.h.entry, e.gone = nil, not e.state
    if e.state then
        return e.state
    end
    return nil, e.interrupted and "interrupted" or contract.is_closed(client) and "closed" or "timeout"
end

local function grant(g, h)
    h.q, h.n, h.gen, h.cohort = g.rec.q, g.n, g, g.c
    g.n = g.n + 1
    g.holders = g.holders + 1
    g.holds[h] = true
    if g.holders == 2 then
        node.serve_many(g)
    end
end

-- Grants generation `g`'s node to queued seats, up to the capacity: after
-- a release within the bound (then each is `pending`), after its leader
-- entered it all of them.
local function fill(c, g, opts, bounded)
    local cap = c.policy.capacity
    while g.holders < cap and queued(c) and not g.rec.lost
          and (not bounded or may_grant(g, opts)) do
        local e = pop(c)
        if not e then
            return
        end
        e.h.pending = bounded
        grant(g, e.h)
        wake(e, bounded and "held" or "joined")
    end
end

local function joinable(g, opts)
    return not g.rec.revoked and g.rec.q:is_through() and may_grant(g, opts)
end

--- The release of seat `h` (or after a loss): the node's last holder hands
--- it to the queue within the bound, or deletes it (without waiting); a
--- lost node goes to no one, the first queued seat joins the line again.
local function release(h)
    local g = h.gen
    if not (g and g.holds[h]) then
        return     -- the node was lost meanwhile: the cohort moved on
    end
    local c, rec = g.c, g.rec
    g.holds[h] = nil
    g.holders = g.holders - 1
    if g.holders > 0 then
        return
    end
    if c.cur == g and not rec.revoked and rec.q:is_through() then  -- may run lost
        fill(c, g, h.opts, true)
        if g.holders > 0 then
            return
        end
    end
    node.let_go(g)
end

-- Seat `h` was granted g's node locally, pending its confirmation (waited
-- for until `deadline`; not when stepping). True (it holds), false
-- (stepping: not confirmed yet), "lead" (made to lead after a loss),
-- "again" (the node went: arrive again), or nil, err (out of time: let go).
local function settle(c, h, g, deadline, stepping)
    local rec = g.rec
    if not stepping and g.holds[h] and rec.confirmed == nil then   -- once per node
        node.wait_confirmed(rec, deadline)
    end
    if g.holds[h] and rec.confirmed and rec.q:is_through() then   -- may run lost
        h.pending = nil
        return true
    end
    if not g.holds[h] then
        local relead = h.relead
        h.relead, h.pending = nil, nil
        return relead and "lead" or "again"
    end
    if rec.confirmed == nil and not rec.lost then
        if stepping then
            return false
        end
        h.pending = nil
        release(h)     -- out of time: to the next, or the node goes
        return nil, contract.is_closed(c.client) and "closed" or "timeout"
    end
    h.pending = nil    -- not confirmed: a new node, which h leads
    g.holds[h] = nil
    g.holders = g.holders - 1
    if c.cur == g then
        registry.new_gen(c)
    end
    if g.holders == 0 then
        node.let_go(g)
    end
    return "lead"
end

-- Seat `h` arrives: nil, true (it holds: joined a held node), nil, false
-- (joined, pending); else the generation to queue for, or nil (to lead).
local function arrive(c, h)
    node.check_held(c)
    local g = c.cur
    if g and g.state == "held" and c.policy.join_held then
        if joinable(g, h.opts) then
            grant(g, h)
            if g.rec.confirmed then
                return nil, true
            end
            h.pending = true
            node.serve_many(g)
            return nil, false
        end
        c.cur, g = nil, nil    -- not to be joined: a new generation
    end
    return g
end

-- Takes a seat for `h` within `timeout`: true or nil, err.
-- Takes a seat for `h` until `deadline` (`timeout` 0: try once): true or nil,
-- err. Again when the node went under a seat granted it, at most MAX_RACES
-- (a tail call: no loop around a wait, the JIT keeps the path in traces).
local function acquire(h, deadline, timeout, tries)
    local c = registry.of(h.client, h.path, h.driver, h.policy, _M)
    h.cohort = c
    local g, holds = arrive(c, h)
    local how, err
    if holds then
        return true
    elseif holds == false then
        if remaining(deadline) == 0 then
            release(h)     -- no time to wait for its confirmation
            how = "lead"
        else
            how, err = settle(c, h, h.gen, deadline)
        end
    elseif not g then
        how = "lead"
    elseif timeout == 0 then
        return nil, "timeout"  -- try once: a seat of this process has it
    else
        local e = enqueue(c, h, c.client:waiter():event())
        if g.state == "held" and not (g.rec.confirming and g.rec.line_watched) then  -- once
            node.serve_many(g)
        end
        how, err = await(e, c.client, deadline)
        if how == "held" then
            how, err = settle(c, h, h.gen, deadline)
        end
    end
    if how == "lead" then
        return node.lead(c, h, deadline)
    elseif how ~= "again" then
        return how and true, err
    elseif tries < MAX_RACES then
        return acquire(h, deadline, timeout, tries + 1)
    end
    return nil, "timeout"    -- lost under it every time (bounded)
end

--- A seat for one acquire of the line of `driver` under `path`, with the
--- lock's options `opts` (data, cohort_handoffs, cohort_time), under
--- capacity policy `policy` (one of POLICIES). The fields a grant sets are
--- made here (false for none): the table is made at its size.
function _M.new(client, path, driver, opts, policy)
    return setmetatable({
        client = client, path = path, driver = driver, opts = opts, policy = policy,
        lost_fns = false,   -- fn, arg pairs (on_lost); made by the first
        revoke_fns = nil,   -- fn, arg pairs (on_revoke); as lost_fns
        granted = false,    -- enter() returned true
        revoked = nil,      -- told of a revocation request
        tie = nil,          -- nginx: what ties the seat to its request
        q = false, n = 0, gen = false, cohort = false, pending = false, entry = false,
    }, mt)
end

local function granted(self)
    self.granted = true
    -- a grant with no write of ours is a local one (n numbers them)
    self.client:metrics():cohort_handoff(self.path, self.n > 0 and "local" or "remote")
    return true
end

--- Takes a place in the cohort, at most `timeout` seconds (nil: no limit,
--- 0: try once): true, or nil, err ("timeout", "closed", "interrupted", a
--- ZooKeeper code).
function Seat:enter(timeout)
    if self.client:waiter().track then
        tie.tie(self)
    end
    local ok, err = acquire(self, util.deadline(timeout), timeout, 1)
    if ok and self.interrupted then
        self:leave()      -- interrupted while handed the node: to the next
        ok, err = nil, "interrupted"
    end
    if not ok then
        if self.tie then
            tie.untie(self)
        end
        return nil, err
    end
    return granted(self)
end

--- enter() in steps, as zkcoord.line's enter_step (the same contract):
--- true when the seat holds, else false and fn() is called when it may
--- (zkcoord.cohort.step).
---@param fn function called when the seat may hold
---@param timeout number? seconds for the step's round trips (nil: no limit)
---@return boolean|nil through, string? err "timeout" | "closed" | "interrupted" | a ZooKeeper code
function Seat:enter_step(fn, timeout)
    local ok, err = require("zkcoord.cohort.step").enter_step(self, fn, timeout)
    if ok then
        return granted(self)
    end
    return ok, err
end

--- Leaves whatever the seat has in the cohort: a hold is released (to the
--- next local owner, or the node goes, without waiting), a wait in the
--- local queue ends, a join of the line for the cohort passes the lead on.
--- Also the release after a loss (the cohort learns it, if it had not).
function Seat:leave()
    if self.tie then
        tie.untie(self)
    end
    local g = self.gen
    if g and g.holds[self] then
        return release(self)
    end
    if node.drop_join(self) then    -- gone while joining the line for the cohort
        return
    end
    if self.relead then    -- its node lost, made to lead, never resumed
        self.relead = nil
        return node.drop_lead(self.cohort)
    end
    local e = self.entry
    if e then
        self.entry = nil
        if not e.gone then
            e.gone = true
            if e.state == "lead" then    -- woken to lead, never resumed
                node.drop_lead(e.c)
            end
        end
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
    if e and not e.state and not e.gone then
        e.gone, e.interrupted = true, true
        e.ev:set()
        return true
    end
    if self.granted then
        self:leave()
    else
        self.interrupted = true   -- enter() has not returned: it leaves then
    end
    return true
end

--- Does the seat hold its generation's node (maybe pending)?
function Seat:holds()
    local g = self.gen
    return g and g.holds[self] == true or false
end

--- Does the seat hold its cohort's node, alive in the current session?
function Seat:is_through()
    local q = self.q
    if not (q and q:is_through()) then    -- may tell a loss first
        return false
    end
    local g = self.gen
    return g.holds[self] == true
end

--- The cohort's node, and its create stat (nil while the seat has none).
function Seat:node()
    return self.q and self.q:node() or nil
end
function Seat:stat()
    return self.q and self.q:stat() or nil
end

--- The seat's fencing token pair: the node's czxid and n, the grant's
--- number within the node (zkcoord.cohort.number); else nil, "notheld".
function Seat:token()
    if not self:is_through() then
        return nil, "notheld"
    end
    return self.q:stat().czxid, self.n
end

-- Adds fn, arg to the seat's list `key` (pairs; made by the first).
local function add_fn(self, key, fn, arg)
    local fns = self[key] or {}
    self[key] = fns
    fns[#fns + 1] = fn
    fns[#fns + 1] = arg == nil and false or arg
end

--- fn(reason, arg) runs when the node is lost while the seat holds it.
--- Registered while it holds: its node is watched from now on.
function Seat:on_lost(fn, arg)
    add_fn(self, "lost_fns", fn, arg)
    if self.granted and self:holds() then
        node.watch_lost(self.gen)
    end
end

--- fn(arg) runs when a revocation request ("__REVOKE__" in the node)
--- reaches the seat while it holds (once). Registered after enter(): the
--- node is watched for requests from now on (once per node).
function Seat:on_revoke(fn, arg)
    add_fn(self, "revoke_fns", fn, arg)
    if self.granted and not self.revoked and self:holds() then
        node.listen(self.gen.rec, self)
    end
end

--- zkcoord.cohort.node's: the node is lost while the seat holds it.
function Seat:tell_lost(reason)
    local fns = self.lost_fns
    for i = 1, #(fns or EMPTY), 2 do
        util.call(self.client, fns[i], "lock on_lost", reason, fns[i + 1])
    end
end

--- zkcoord.cohort.node's: a revocation request reached the node while the
--- seat holds it (told once).
function Seat:tell_revoke()
    local fns = self.revoke_fns
    if self.granted and not self.revoked and fns then
        self.revoked = true
        for i = 1, #fns, 2 do
            util.call(self.client, fns[i], "lock on_revoke", fns[i + 1])
        end
    end
end

-- For zkcoord.cohort.node (a generation's kind) and zkcoord.cohort.step.
_M.pop, _M.wake, _M.queued, _M.grant, _M.fill = pop, wake, queued, grant, fill
_M.arrive, _M.settle, _M.enqueue = arrive, settle, enqueue
_M.mt = mt
return _M
