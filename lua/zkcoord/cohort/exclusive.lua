--- zkcoord.cohort.exclusive: a lock's cohort, one holder at a time
--- (internal part of zkcoord.cohort; the rules are in its header).
--
-- The cohort (zkcoord.cohort.registry) has a state: "idle" (no node),
-- "entering" (an owner joins the line for it: the leader) or "held" (its
-- node is through; c.holder has it). Owners that come while it is not
-- idle queue (zkcoord.cohort.fifo); a release hands the node to the first
-- within the bound (zkcoord.cohort.fifo), or deletes it and the first
-- joins the line itself.
local core = require "zkcoord.core"
local util = require "zkcoord.util"
local fifo = require "zkcoord.cohort.fifo"
local node = require "zkcoord.cohort.node"
local registry = require "zkcoord.cohort.registry"
local contract = require "zkcoord.contract"

local now = core.now

local _M = {}


-- The node is no longer ours to pass on: the first local waiter (if any)
-- joins the line itself. The cohort is "entering" from now, so a newcomer
-- queues behind it instead of making a second node.
function _M.pass_lead(c)
    c.rec, c.holder = nil, nil
    if fifo.lead_next(c) then
        c.state = "entering"
    else
        c.state = "idle"
        registry.forget(c)   -- no node, no waiter: nothing to keep per path
    end
end
local pass_lead = _M.pass_lead


--- The holds of node `rec` now: its holder, while it is the cohort's.
function _M.each_holder(rec, fn)
    local c = rec.side
    if c.rec == rec and c.holder then
        fn(c.holder, rec)
    end
end


--- A revoked node is never passed on (release reads rec.revoked).
function _M.revoked()
end


--- The cohort's node was lost (zkcoord.cohort.node's `lost`): the holder
--- learns it, waiters join again. A holder handed it whose acquire has
--- not returned never held it: it joins the line itself (relead), untold.
function _M.lost(reason, rec)
    local c = rec.side
    if c.rec ~= rec then
        return
    end
    local h = c.holder
    if h and not h.granted then
        c.rec, c.holder, c.state = nil, nil, "entering"
        h.relead = true
        return
    end
    pass_lead(c)
    if h then
        h:tell_lost(reason)
    end
end


-- The node serves several owners from the first local waiter on: watch
-- the line (remote waiters) and the node (loss), once each per node.
local function start_watching(c)
    local rec = c.rec
    if rec then
        node.watch_remote(rec)
        node.watch_loss(rec)
    end
end


--- on_lost was registered while hold `h` holds: watch its node now.
function _M.watch_lost(h)
    local c = h.cohort
    if c and c.holder == h and c.rec then
        node.watch_loss(c.rec)
    end
end


--- The node hold `h` holds (nil when it does not).
function _M.held_node(h)
    local c = h.cohort
    return c and c.holder == h and c.rec or nil
end


-- Has the held node been lost unnoticed by the cohort (held() saw the
-- session end, no one watched)? Then the cohort learns it now.
local function check_held(c)
    if c.state == "held" and not c.rec.q:is_through() then
        node.lost("sessionexpired", c.rec)   -- a no-op if is_through told it
    end
end


-- Owner hold `h` joins the line for the cohort (until `deadline`).
local function lead(c, h, deadline)
    while true do
        c.state = "entering"
        local rec, err = node.join(c, c, h, deadline)
        if not rec then
            return nil, err
        end
        local q = rec.q
        c.state, c.holder, h.rec = "held", h, rec
        c.n, c.since, c.remote = 0, now(), true
        h.q, h.n, h.cohort = q, 0, c
        if fifo.queued(c) then
            start_watching(c)     -- owners queued while we joined
        end
        if c.holder == h then
            return true
        end
        h.relead = nil            -- lost at once (start_watching saw it): again
    end
end


-- Hold `h` was handed node h.rec locally: it holds once the node is
-- confirmed (zkcoord.cohort's header). Returns true, "lead" (the node is
-- not to be had: h joins the line itself) or nil, err (out of time:
-- passed on).
local function handed(c, h, deadline)
    local rec = h.rec
    if c.holder == h then
        node.wait_confirmed(rec, deadline)
    end
    if c.holder == h and rec.confirmed and h.q:is_through() then  -- may run _M.lost
        return true
    end
    if c.holder ~= h then
        h.relead = nil    -- _M.lost made us lead
        return "lead"
    end
    if rec.confirmed == nil and not rec.lost then
        _M.release(h)     -- out of time: to the next, or the node goes
        return nil, contract.is_closed(c.client) and "closed" or "timeout"
    end
    c.rec, c.holder, c.state = nil, nil, "entering"   -- not confirmed: a new node
    h.q:leave()
    return "lead"
end


--- Acquires for hold `h` on the line of `driver` under `path`: sets h.q
--- (the node's position), h.n (the grant number within the node),
--- h.cohort, h.rec.
function _M.acquire(client, path, driver, h, timeout)
    local c = registry.of(client, path, driver, _M)
    check_held(c)
    if c.state == "idle" then
        return lead(c, h, util.deadline(timeout))
    end
    if timeout == 0 then
        return nil, "timeout"     -- try once: an owner of this process has it
    end
    local deadline = util.deadline(timeout)
    local e = fifo.enqueue(c, c.client, h)
    h.entry = e
    if c.state == "held" then
        start_watching(c)
    end
    local how, err = fifo.await(e, c.client, deadline)
    h.entry = nil
    if how == "held" then
        how, err = handed(c, h, deadline)
    end
    if how == "lead" then
        return lead(c, h, deadline)
    end
    return how and true, err
end


--- Does hold `h` hold its cohort's node?
function _M.holds(h)
    local c = h.cohort
    return c and c.holder == h or false
end


--- Hold `h`, made to lead after a loss, never resumed (its owner is gone):
--- the next local owner leads.
function _M.drop_relead(h)
    pass_lead(h.cohort)
end


--- The last release of hold `h` (or its release after a loss): hands the
--- node to the next local owner, or deletes it (without waiting); a lost
--- node goes to no one, the next local owner joins the line again.
function _M.release(h)
    local c = h.cohort
    if c.holder ~= h then
        return     -- the node was lost meanwhile: the cohort moved on
    end
    local rec, q = c.rec, h.q
    if not q:is_through() then     -- may run _M.lost: then the cohort moved on
        if c.holder == h then
            pass_lead(c)           -- lost unwatched: the releaser needs no telling
        end
        q:leave()
        return
    end
    if fifo.queued(c) and not rec.revoked and fifo.may_grant(c.n + 1, c.since, c.remote, h.opts) then
        local e = fifo.pop(c)
        if e then
            c.n = c.n + 1
            local nh = e.h
            nh.q, nh.n, nh.cohort, nh.rec = q, c.n, c, rec
            c.holder = nh
            fifo.wake(e, "held")
            return
        end
    end
    pass_lead(c)
    q:leave()
end


return _M
