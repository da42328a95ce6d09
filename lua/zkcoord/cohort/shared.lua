--- zkcoord.cohort.shared: an rwlock's readers, many holders of one read
--- node (internal part of zkcoord.cohort).
--
-- The readers of one client share one read node, a "generation". A reader
-- joins the open generation at once (no request) while its node is
-- through and within the bound (zkcoord.cohort.fifo: with a node behind
-- it in line, a writer may wait there); otherwise it opens a new
-- generation (a new node, behind that writer). Readers that arrive while
-- a generation's node is being entered queue (zkcoord.cohort.fifo) and all
-- hold when it is through. The node goes when its last reader releases.
local core = require "zkcoord.core"
local util = require "zkcoord.util"
local fifo = require "zkcoord.cohort.fifo"
local node = require "zkcoord.cohort.node"
local registry = require "zkcoord.cohort.registry"

local now, remaining = core.now, util.remaining
local pairs = pairs

local _M = {}


--- Generation `g`'s node is not being entered any more: the first reader
--- waiting for it enters one itself, or the generation closes.
function _M.pass_lead(g)
    g.rec = nil
    if not fifo.lead_next(g) and g.c.open == g then
        g.c.open = nil
    end
end


--- The holds of node `rec` now: the generation's readers.
function _M.each_holder(rec, fn)
    for h in pairs(rec.side.holds) do
        fn(h, rec)
    end
end


--- A revoked node is joined by no reader any more.
function _M.revoked(rec)
    local g = rec.side
    if g.c.open == g then
        g.c.open = nil
    end
end


--- Generation node `rec` was lost (zkcoord.cohort.node's `lost`): no
--- reader joins it, its readers learn it.
function _M.lost(reason, rec)
    local g = rec.side
    if g.c.open == g then
        g.c.open = nil
    end
    for h in pairs(g.holds) do
        if not h.confirming then     -- not granted yet: it opens a new generation
            h:tell_lost(reason)
        end
    end
end

local function watch_lost(g)
    local rec = g.rec
    if not rec then
        return
    elseif g.state == "held" then
        node.watch_loss(rec)
    else
        node.on_lost(rec)       -- set when the node is through
    end
end


--- on_lost was registered while hold `h` holds: watch its node now.
function _M.watch_lost(h)
    local g = h.gen
    if g and g.holds[h] then
        watch_lost(g)
    end
end


--- The node hold `h` holds (nil when it does not).
function _M.held_node(h)
    local g = h.gen
    return g and g.holds[h] and g.rec or nil
end


--- Does hold `h` hold its generation's node?
function _M.holds(h)
    local g = h.gen
    return g and g.holds[h] == true or false
end


local function join(g, h)
    h.q, h.n, h.cohort, h.gen = g.rec.q, g.joins, g.c, g
    g.joins = g.joins + 1
    g.holders = g.holders + 1
    g.holds[h] = true
    if g.holders == 2 then
        -- Several readers on one node: watch the line (writers behind) and
        -- the node (loss), once each.
        node.watch_remote(g.rec)
        watch_lost(g)
    end
end


local function joinable(g, opts)
    if g.state ~= "held" or g.rec.revoked or not g.rec.q:is_through() then
        return false
    end
    return fifo.may_grant(g.joins, g.since, g.remote, opts)
end


-- Reader `h` enters a node for generation `g`; on success every reader
-- waiting for `g` holds too.
local function lead(g, h, deadline)
    local rec, err = node.join(g.c, g, h, deadline)
    if not rec then
        return nil, err
    end
    g.state, g.since = "held", now()
    join(g, h)
    local e = fifo.pop(g)
    while e do
        join(g, e.h)
        fifo.wake(e, "held")
        e = fifo.pop(g)
    end
    return true
end


local function new_generation(c)
    return fifo.init { c = c, kind = _M, state = "entering", holds = {}, holders = 0, joins = 0,
                       since = 0, remote = true }
end


--- Acquires for reader hold `h` on the line of `driver` under `path`: sets
--- h.q (the node's position), h.n (its join number), h.cohort, h.gen.
function _M.acquire(client, path, driver, h, timeout)
    local c = registry.of(client, path, driver, _M)
    local deadline = util.deadline(timeout)
    local g = c.open
    while g and g.state == "held" do
        local ok = joinable(g, h.opts)
        if ok and g.rec.confirmed then
            join(g, h)
            return true
        elseif ok and g.rec.confirmed == nil and remaining(deadline) ~= 0 then
            -- Granted only once confirmed (zkcoord.cohort's header): at
            -- most one wait per node. Meanwhile h counts as a holder, so
            -- the node stays.
            local rec = g.rec
            join(g, h)
            h.confirming = true
            watch_lost(g)
            node.wait_confirmed(rec, deadline)
            h.confirming = nil
            if g.holds[h] and rec.confirmed and not rec.lost and rec.q:is_through() then
                return true
            end
            _M.release(h)
            g = c.open     -- anything may have changed meanwhile
        else
            c.open, g = nil, nil
        end
    end
    if not g then
        g = new_generation(c)
        c.open = g
        return lead(g, h, deadline)
    end
    if timeout == 0 then
        return nil, "timeout"     -- try once: a reader of this process is entering
    end
    h.entry = fifo.enqueue(g, client, h)
    local how, err = fifo.await(h.entry, client, deadline)
    h.entry = nil
    if how == "lead" then
        return lead(g, h, deadline)
    end
    return how and true, err
end


--- The release of reader hold `h` (or after a loss): the last reader's
--- deletes the node.
function _M.release(h)
    local g = h.gen
    if not g.holds[h] then
        return
    end
    g.holds[h] = nil
    g.holders = g.holders - 1
    if g.holders == 0 then
        local c = g.c
        if c.open == g then
            c.open = nil
        end
        if c.open == nil then
            registry.forget(c)
        end
        g.rec.q:leave()
    end
end


--- A reader made to lead after a loss never resumed: nothing to pass on
--- (a reader leads only from its generation's queue).
function _M.drop_relead()
end


return _M
