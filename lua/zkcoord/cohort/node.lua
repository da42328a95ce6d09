--- zkcoord.cohort.node: a cohort's node in the line and what watches it
--- (internal part of zkcoord.cohort): the join that makes it, its
--- confirmation, its loss, the participants behind it, revocation
--- requests. One record per node, whichever side holds it: a lock's cohort
--- (one holder at a time) or a read node's generation (many); the side's
--- kind (zkcoord.cohort.exclusive or .shared) says who holds it
--- (`each_holder`), what its loss does (`lost`), what a revocation request
--- closes (`revoked`) and who leads when its join fails (`pass_lead`).
local line = require "zkcoord.line"
local util = require "zkcoord.util"

local remaining = util.remaining

local _M = {}

local REVOKE = "__REVOKE__"     -- Curator's LockInternals.REVOKE_MESSAGE


--- The record of node position `q` (not yet entered) for side `side`.
function _M.new(q, side, client)
    return { q = q, side = side, kind = side.kind, client = client }
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


--- Waits (until `deadline`) for node `rec`'s confirmation or loss.
function _M.wait_confirmed(rec, deadline)
    if rec.confirmed ~= nil or rec.lost then
        return
    end
    local ev = rec.client:waiter():event()
    rec.evs = rec.evs or {}
    rec.evs[#rec.evs + 1] = ev
    ev:wait(remaining(deadline))
end


--- Node `rec` was lost (its session ended, it was deleted): the owners
--- waiting for its confirmation wake, and its side's kind moves on (once).
function _M.lost(reason, rec)
    if rec.lost then
        return
    end
    rec.lost = true
    wake(rec)
    rec.kind.lost(reason, rec)
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

local function node_revoked(rec)
    rec.revoked = true
    rec.kind.revoked(rec)
    rec.kind.each_holder(rec, tell)
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
            rec.kind.each_holder(rec, function(x) if x == h then tell(h, rec) end end)
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

--- Hold `h` enters node `rec`'s position for its side (h.leading, this
--- module's field, is rec meanwhile). If enter raises (a driver's rule: line.lua re-raises it, our
--- node gone), whoever waits leads instead.
function _M.enter(h, rec, timeout)
    h.leading = rec
    if not PROTECT then
        local ok, err = rec.q:enter(timeout)
        h.leading = nil
        return ok, err
    end
    local ok, res, err = pcall(rec.q.enter, rec.q, timeout)
    h.leading = nil
    if not ok then
        _M.abandon(rec)
        error(res, 0)
    end
    return res, err
end


--- Hold `h` joins the line for side `side` of cohort `c` with a new node
--- (until `deadline`): the node's record, through; or nil, err when the
--- join failed (the next local owner of the side leads).
function _M.join(c, side, h, deadline)
    local q = line.new(c.client, c.path, c.driver, h.opts.data)
    local rec = _M.new(q, side, c.client)
    side.rec = rec
    if h.lost_fns then
        _M.on_lost(rec)
    end
    local ok, err = _M.enter(h, rec, remaining(deadline))
    if not ok then
        side.kind.pass_lead(side)
        return nil, err
    end
    h:untrack(q)
    return rec
end


--- Hold `h` is gone while it joins the line (its owner ended): the next
--- local owner of the side leads, and its node goes. False when it was
--- not joining.
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
--- or is gone): if it is still its side's, the next local owner leads.
function _M.abandon(rec)
    if rec.side.rec == rec then
        rec.kind.pass_lead(rec.side)
    end
end


return _M
