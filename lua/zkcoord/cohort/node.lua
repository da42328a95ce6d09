--- zkcoord.cohort.node: a cohort's node in the line, its lifetime and
--- what watches it (internal part of zkcoord.cohort): the join that makes
--- it (and who leads it), its confirmation, its loss, the participants
--- behind it, revocation requests. One record per node, for the node's
--- generation (zkcoord.cohort.seat: the seats that hold it together). The
--- generation's kind (zkcoord.cohort.seat) holds the local queue this
--- module hands the node to, or the lead on.
local line = require "zkcoord.line"
local registry = require "zkcoord.cohort.registry"
local tie = require "zkcoord.cohort.tie"
local util = require "zkcoord.util"

local now = require("zkcoord.core").now
local remaining = util.remaining
local pairs = pairs
local MAX_RACES = require("zkcoord.util.retry").MAX_RACES

local _M = {}

local REVOKE = "__REVOKE__"     -- Curator's LockInternals.REVOKE_MESSAGE

--- The record of node position `q` (not yet entered) for generation `g`.
function _M.new(q, g, client)
    return { q = q, side = g, client = client }
end

-- Wakes the owners waiting for node `rec`'s confirmation (or its loss).
function _M.wake(rec)
    local evs = rec.evs
    if evs then
        rec.evs = nil
        for i = 1, #evs do
            evs[i]:set()
        end
    end
end
local wake = _M.wake

local function confirm_reply(rec)
    return function(stat)
        if rec.confirmed == nil then
            rec.confirmed = stat and true or false
        end
        wake(rec)
    end
end

-- Node `rec`'s loss watch was sent: learn, without waiting, when it is
-- set on the live node (zkcoord.cohort's "local grant"). Once per node,
-- when a second local owner wants it (an uncontended lock pays nothing).
local function confirm(rec)
    if rec.confirming then
        return
    end
    rec.confirming = true
    local node = rec.q:node()
    if not node then
        rec.confirmed = false
        return wake(rec)
    end
    rec.client:send("exists", node):on_done(confirm_reply(rec))
end

--- ev:set() when node `rec`'s confirmation or loss comes (once).
function _M.notify(rec, ev)
    local evs = rec.evs or {}
    rec.evs = evs
    if evs[#evs] ~= ev then
        evs[#evs + 1] = ev
    end
end

--- Waits (until `deadline`) for node `rec`'s confirmation or loss.
function _M.wait_confirmed(rec, deadline)
    if rec.confirmed ~= nil or rec.lost then
        return
    end
    local ev = rec.client:waiter():event()
    _M.notify(rec, ev)
    ev:wait(remaining(deadline))
end

local gen_lost

--- Node `rec` was lost (its session ended, it was deleted): the owners
--- waiting for its confirmation wake, and its generation moves on (once).
function _M.lost(reason, rec)
    if rec.lost then
        return
    end
    rec.lost = true
    wake(rec)
    gen_lost(reason, rec.side)
end
local lost = _M.lost

--- Watches node `rec` for loss (once per node) without confirming: for a
--- node not through yet (the watch is set when it is).
function _M.on_lost(rec)
    if not rec.lost_watched then
        rec.lost_watched = true
        rec.q:on_lost(lost, rec)
    end
end

--- Watches generation `g`'s node for loss (once per node; confirmed once
--- held).
function _M.watch_lost(g)
    if g.state == "held" then
        _M.watch_loss(g.rec)
    else
        _M.on_lost(g.rec)    -- set when the node is through
    end
end

--- The node of generation `g` serves several seats (a second holder, a
--- queued one): watch the line (remote waiters) and the node (loss), once
--- each per node.
function _M.serve_many(g)
    if g.rec then
        _M.watch_remote(g.rec)
        _M.watch_lost(g)
    end
end

--- Watches node `rec` for loss (once per node) and confirms the watch. A
--- node found lost before (held() saw the session end, no one watched):
--- it is lost now, as its watch would have told.
function _M.watch_loss(rec)
    _M.on_lost(rec)
    if not rec.q:is_through() then
        return lost("sessionexpired", rec)
    end
    confirm(rec)
end

-- Is a participant behind our node in this listing?
local function behind_us(rec, names)
    local q = rec.q
    local entries = q:parse(names)
    local me = q:node()
    for i = #entries, 1, -1 do
        if entries[i].path == me then
            return i < #entries
        end
    end
    return true    -- our node is not listed: assume the worst
end

-- Any change of the line while we hold: a create is behind us (sequence
-- numbers grow), and nothing is ahead of a holder to delete. So a remote
-- waiter, without listing again; the watch is not re-armed.
local function remote_watcher(rec)
    return function()
        rec.changed = true
        if rec.side.rec == rec then
            rec.side.remote = true
        end
    end
end

local function remote_reply(rec)
    return function(names)
        if rec.side.rec == rec and names and not rec.changed then
            rec.side.remote = behind_us(rec, names)
        end
    end
end

--- Lists the line with a watch, without waiting, once per node: the side
--- learns whether a participant is behind its node (side.remote). Our own
--- delete of the node fires the watch at the latest, so none outlives it.
function _M.watch_remote(rec)
    if rec.line_watched then
        return
    end
    rec.line_watched = true
    rec.client:send("children", rec.q.path, remote_watcher(rec)):on_done(remote_reply(rec))
end

-- Revocation: a request reaches the holders of the node at that time (a
-- hold woken but not yet resumed is told by listen's read, after its
-- acquire returns).
local function tell(h, rec)
    h:tell_revoke(rec.q:node())
end

-- A revoked node is never passed on (a release reads rec.revoked) nor
-- joined (readers: its generation takes no arrival).
local function node_revoked(rec)
    rec.revoked = true
    local g = rec.side
    if g.c.policy.join_held and g.c.cur == g then
        g.c.cur = nil
    end
    for h in pairs(g.holds) do
        tell(h, rec)
    end
end

local watch_revoke

local function revoke_watcher(rec)
    return function(ev)
        if ev.type == "changed" and rec.q:is_through() then
            watch_revoke(rec)
        end
    end
end

local function revoke_reply(rec)
    return function(data)
        if data == REVOKE and rec.q:is_through() then
            node_revoked(rec)
        end
    end
end

-- Reads the node's data with a watch, without waiting; the delete of the
-- node fires the watch at the latest.
function watch_revoke(rec)
    rec.revoke_watched = true
    local node = rec.q:node()
    if node then
        rec.client:send("get", node, revoke_watcher(rec)):on_done(revoke_reply(rec))
    end
end

local function told_late(rec, h)
    return function(data)
        if data == REVOKE and rec.q:is_through() then
            if rec.side.holds[h] then
                tell(h, rec)
            end
        end
    end
end

--- Hold `h`, holding node `rec` with its acquire returned, listens for
--- revocation requests: the node's data is watched (once per node).
function _M.listen(rec, h)
    if not rec.revoke_watched then
        watch_revoke(rec)
    elseif rec.revoked then
        -- Asked before this hold was ours to tell: tell it the way a new
        -- watch would, from the reply (not inside acquire).
        rec.client:send("get", rec.q:node()):on_done(told_late(rec, h))
    end
end

-- Can enter() wait inside a pcall? LuaJIT and 5.2+ yes; plain 5.1 no:
-- there it runs unprotected (a raising rule leaves the cohort stuck).
local PROTECT = rawget(_G, "jit") ~= nil or _VERSION ~= "Lua 5.1"

-- Seat `h` enters node `rec`'s position with `how` (its enter or
-- enter_step; h.leading, this module's field, is rec meanwhile). If it
-- raises (a driver's rule: line.lua re-raises it, our node gone), whoever
-- waits leads instead.
local function enter(h, rec, how, ...)
    h.leading = rec
    if not PROTECT then
        return how(rec.q, ...)
    end
    local ok, res, err = pcall(how, rec.q, ...)
    if not ok then
        h.leading = nil
        _M.abandon(rec)
        error(res, 0)
    end
    return res, err
end

-- Seat `h` joins the line for generation `g` of cohort `c` with a new node
-- (or steps its join on): the node's record, through; false (stepping:
-- not yet); or nil, err (blocking: the next queued seat leads).
local function join(c, g, h, how, ...)
    local rec = h.leading
    if not rec then
        rec = _M.new(line.new(c.client, c.path, c.driver, h.opts.data), g, c.client)
        g.rec = rec
        if h.lost_fns then
            _M.on_lost(rec)
        end
    end
    local ok, err = enter(h, rec, how, ...)
    if ok then
        h.leading = nil
        tie.untrack(c.client, rec.q)
        return rec
    elseif how == line.enter then
        h.leading = nil
        _M.pass_lead(g)
        return nil, err
    end
    return ok, err     -- stepping: the seat keeps its node (leave() drops it)
end

--- Seat `h` is gone while it joins the line (its owner ended): the next
--- queued seat leads, and its node goes. False when it was not joining.
function _M.drop_join(h)
    local rec = h.leading
    if not rec then
        return false
    end
    h.leading = nil
    _M.abandon(rec)
    rec.q:leave()
    return true
end

--- Node `rec` is not being entered any more (its leader gave up, raised,
--- or is gone): if its generation still waits for it, the next leads.
function _M.abandon(rec)
    if rec.side.rec == rec then
        _M.pass_lead(rec.side)
    end
end

-- The generation's lifetime.

--- Generation `g`'s node is not being entered any more (or is let go): if
--- arrivals still go to it, the first queued seat joins the line for a new
--- one (or the cohort forgets the line).
function _M.pass_lead(g)
    local c, kind = g.c, g.kind
    if c.cur ~= g then
        return
    end
    c.cur = nil
    local e = kind.pop(c)
    if e then
        registry.new_gen(c)
        kind.wake(e, "lead")
    else
        registry.forget(c)
    end
end

--- Generation `g`'s node has no holder left and goes to no one: it is
--- deleted (without waiting); if arrivals went to it, the first queued seat
--- joins the line for a new one.
function _M.let_go(g)
    local c = g.c
    if c.cur == g then
        _M.pass_lead(g)
    else
        registry.forget(c)
    end
    g.rec.q:leave()
end

--- The seat to lead cohort `c`'s generation, not being entered, is gone:
--- the next queued seat leads.
function _M.drop_lead(c)
    local g = c and c.cur
    if g and not g.rec then
        _M.pass_lead(g)
    end
end

-- Generation `g`'s node was lost: its holders learn it; a seat granted it
-- but not through its acquire yet (pending) never held it: the first such
-- joins the line again (relead), others arrive again, untold.
gen_lost = function(reason, g)
    local c = g.c
    local current, relead = c.cur == g, nil
    for h in pairs(g.holds) do
        if h.pending then
            g.holds[h] = nil
            g.holders = g.holders - 1
            if current and not relead then
                relead = h
                h.relead = true
            end
        end
    end
    if relead then
        registry.new_gen(c)     -- for relead to enter
    elseif current then
        _M.pass_lead(g)
    end
    for h in pairs(g.holds) do
        h:tell_lost(reason)
    end
end

--- Has cohort `c`'s held node been lost unnoticed (held() saw the session
--- end, no one watched)? Then the cohort learns it now.
function _M.check_held(c)
    local g = c.cur
    if g and g.state == "held" and not g.rec.q:is_through() then
        _M.lost("sessionexpired", g.rec)   -- a no-op if is_through told it
    end
end

-- Seat `h` entered generation `g`'s node: it holds, and so do the seats
-- queued for it, up to the capacity. False when the node was lost at once
-- (`h` leads again).
local function won(c, g, h)
    local kind = g.kind
    g.state, g.since = "held", now()
    h.pending = true      -- until it holds: a loss now makes it lead again
    kind.grant(g, h)
    kind.fill(c, g, h.opts, false)
    if kind.queued(c) then
        _M.serve_many(g)
    end
    h.pending, h.relead = nil, nil
    return g.holds[h] == true
end

-- The generation seat `h` is to lead: the one it steps the join of, or
-- c.cur unless someone enters it.
local function to_lead(c, h)
    local rec = h.leading
    if rec then
        return rec.side
    end
    local g = c.cur
    if not g or g.rec then
        g = registry.new_gen(c)
    end
    return g
end

--- Seat `h` joins the line for cohort `c` (until `deadline`): true once it
--- holds, or nil, err (the next queued seat leads). With `step_wake`: one step
--- (line's enter_step, `timeout` for its round trips): also false.
function _M.lead(c, h, deadline, step_wake, timeout)
    for _ = 1, MAX_RACES do
        local g = to_lead(c, h)
        local rec, err
        if step_wake then
            rec, err = join(c, g, h, line.enter_step, step_wake, timeout)
        else
            rec, err = join(c, g, h, line.enter, remaining(deadline))
        end
        if not rec then
            return rec, err
        end
        if won(c, g, h) then
            return true
        end
    end
    return nil, "timeout"    -- lost at once every time (bounded)
end


return _M
