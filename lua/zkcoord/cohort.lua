--- zkcoord.cohort: one node per process for a lock's owners (lock
--- cohorting, Dice, Marathe and Shavit 2012), behind client:lock(path,
--- { cohort = true }).
--
-- The owners of one client that want the same lock (same path, same line
-- driver), through any lock object made with `cohort = true`, share one
-- node in the line. The first joins the line as without a cohort; the
-- others queue here, in arrival order, each bounded by its own timeout.
-- When the holder releases and a local owner waits, that owner holds at
-- once, with no request to the server (a "local handoff"), while:
--   * fewer than `cohort_handoffs` (default 16) local handoffs and less
--     than `cohort_time` (default 0.01 s) passed since the node was
--     granted; or
--   * no remote waiter is in line: the cohort's node is the last one. A
--     children watch on the line, set when the first local owner queues
--     (not before: an uncontended lock pays nothing), tells; until its
--     reply, a remote waiter is assumed. A remote waiter that arrives is
--     seen by the watch, so it waits at most one bound;
-- and always fewer than LOCAL_MAX handoffs per node (the token's range).
-- Otherwise the node is deleted and the first local waiter joins the
-- line again with a new node, behind the remote waiters.
--
-- Loss: when the node is lost (session ended, node deleted: the node is
-- watched once a local owner waits, or on_lost is registered), the holder's
-- on_lost callbacks run, its release() answers "lost", and the first local
-- waiter joins the line at once with a new node (as a waiting acquire
-- without a cohort joins again): no owner is ever handed a lost node.
-- A local grant (a handoff, a reader joining a read node) is made only
-- once the node's loss watch is known set on the live node: an exists
-- sent right after it found the node (one session's requests are answered
-- in order). From then on a loss comes as an event, the window a holder
-- without the cohort has, which fencing covers. The owner handed a node
-- waits for that answer (at most once per node, bounded by its timeout);
-- a node lost or not confirmed before its acquire returns is not its: it
-- joins the line itself, and on_lost is not told.
--
-- Revocation (Curator's "__REVOKE__" in the node, zkcoord.lock.revoke):
-- the node's data is watched once a holder whose lock has on_revoke
-- callbacks holds it (re-armed across local handoffs). A request reaches
-- the holders of the node at that time (an rwlock's readers: each), with
-- their own owners; a revoked node is never passed on locally (nor joined
-- by readers): its last release deletes it and the next local owner joins
-- the line again, behind the one that asked.
--
-- Fencing: grant n (0 for the node's first, then 1, 2 ... for each local
-- handoff) of the node with create zxid czxid has the token pair
-- (czxid, n). Grants of one lock follow the order of their nodes' czxids,
-- and of n within a node, so pairs compared lexicographically (czxid
-- first, then n) grow strictly with every grant, across processes.
-- number(czxid, n) = czxid * 2^12 + n is the same order as one number,
-- exact while czxid < 2^41 (ZooKeeper epochs below 512); it returns nil
-- beyond that, where a resource must keep the pair.
--
-- A lock whose pick hook returns another driver for an acquire (rwlock's
-- downgrade) makes that owner's node without the cohort. An rwlock's
-- readers share a node (shared cohorts, below).
--
-- nginx (owners are requests): the node is the cohort's, not the request's
-- that made it (untied from it once through). Each owner that waits or
-- holds ties a "tie" to its request instead (waiter:track): when the
-- request ends (or aborts), the ticker calls the tie's leave(): a holder's
-- hold is released (to the next local waiter, or the node goes; logged as
-- for a node), a waiter leaves the local queue, a leader that was joining
-- the line passes the lead on. A light thread killed while it waits here
-- leaves when its request ends.
local core = require "zkcoord.core"
local line = require "zkcoord.line"
local util = require "zkcoord.util"
local contract = require "zkcoord.contract"

local now, remaining, argerror = core.now, util.remaining, util.argerror
local type, pairs, ipairs, setmetatable, math_floor = type, pairs, ipairs, setmetatable, math.floor

local _M = { _VERSION = require("zkcoord.version") }

local REVOKE = "__REVOKE__"     -- Curator's LockInternals.REVOKE_MESSAGE
local LOCAL_BITS = 12
local LOCAL_MAX = 2 ^ LOCAL_BITS - 1     -- local grants of one node: n <= LOCAL_MAX
local EXACT = 2 ^ 53

_M.DEFAULT_HANDOFFS = 16
_M.DEFAULT_TIME = 0.01

-- client -> driver -> path -> cohort. Weak: a closed, dropped client goes.
local registry = setmetatable({}, { __mode = "k" })

local untrack, gen_pass_lead, tie, untie, release_exclusive, release_shared


--- The token pair (czxid, n) as one number, in the same order; nil when it
--- is not exact in a double (czxid >= 2^41). czxid is an integer >= 0 and
--- n one of a node's grant numbers (0 .. 4095): anything else raises (a
--- NaN or an n out of range would compare wrongly, silently).
function _M.number(czxid, n)
    if type(czxid) ~= "number" or czxid < 0 or czxid % 1 ~= 0 then  -- NaN, huge: % 1 is NaN
        argerror(1, "number", "czxid must be an integer >= 0")
    end
    if type(n) ~= "number" or not (n >= 0 and n <= LOCAL_MAX) or n % 1 ~= 0 then  -- luacheck: ignore 581
        argerror(2, "number", ("n must be an integer from 0 to %d"):format(LOCAL_MAX))
    end
    local t = czxid * 2 ^ LOCAL_BITS + n
    if t >= EXACT then
        return nil
    end
    return t
end


-- The options that only mean something with cohort = true.
local TUNING = { "cohort_handoffs", "cohort_time" }


--- Checks the cohort options of a lock's or rwlock's opts (argument #2 of
--- `fname`; raises on a bad one): cohort a boolean or nil, and the tuning
--- options only with cohort = true (ignored silently, they hid a
--- cohort left off).
function _M.check_opts(opts, fname)
    local on = opts.cohort
    if on ~= nil and type(on) ~= "boolean" then
        argerror(2, fname, "cohort must be a boolean")
    end
    if on ~= true then
        for _, k in ipairs(TUNING) do
            if opts[k] ~= nil then
                argerror(2, fname, k .. " needs cohort = true")
            end
        end
        return
    end
    local h = opts.cohort_handoffs
    if h ~= nil and (type(h) ~= "number" or h < 0 or h ~= math_floor(h)) then
        argerror(2, fname, "cohort_handoffs must be an integer >= 0")
    end
    if opts.cohort_time ~= nil then
        util.check_seconds(opts.cohort_time, "cohort_time", fname, 2, true)
    end
end


local function cohort_of(client, path, d)
    local by_driver = registry[client]
    if not by_driver then
        by_driver = setmetatable({}, { __mode = "k" })
        registry[client] = by_driver
    end
    local by_path = by_driver[d]
    if not by_path then
        by_path = {}
        by_driver[d] = by_path
    end
    local c = by_path[path]
    if not c then
        c = {
            client = client, path = path, driver = d,
            state = "idle",   -- "idle" (no node), "entering" (an owner joins), "held"
            rec = nil,        -- the node: { q =, cohort = }
            holder = nil,     -- the hold that has it now
            waiting = {}, head = 1, tail = 0,   -- local FIFO of { h =, ev =, state = }
            n = 0, since = 0, remote = true,
            home = by_path,   -- to leave the registry when idle
        }
        by_path[path] = c
    end
    return c
end


-- The first local waiter still waiting (timed-out ones are skipped), popped.
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


-- nginx: the node of position `q`, tied to the current request when it
-- was made, is the cohort's from now on (its holders' ties stand for it).
function untrack(client, q)
    local w = client:waiter()
    if w.untrack then
        w:untrack(q:node())
    end
end


-- Queues hold `h` at the end of `line` (a cohort or a generation).
local function enqueue(line_, client, h)
    local e = { h = h, ev = client:waiter():event(), line = line_ }
    line_.tail = line_.tail + 1
    line_.waiting[line_.tail] = e
    return e
end

-- Waits for queue entry `e` to be woken: "held" (it holds now), "lead" (it
-- is to join the line itself), or nil, err when its time ran out (the
-- entry stays, skipped by pop).
local function await(e, client, deadline)
    e.ev:wait(remaining(deadline))
    if e.state then
        return e.state
    end
    e.gone = true
    return nil, contract.is_closed(client) and "closed" or "timeout"
end


-- The node is no longer ours to pass on: the first local waiter (if any)
-- joins the line itself. The cohort is "entering" from now, so a newcomer
-- queues behind it instead of making a second node.
local function pass_lead(c)
    c.rec, c.holder = nil, nil
    local e = pop(c)
    if e then
        c.state = "entering"
        e.state = "lead"
        e.ev:set()
    else
        c.state = "idle"
        c.home[c.path] = nil   -- no node, no waiter: nothing to keep per path
    end
end


-- Wakes the owners waiting for node `rec`'s confirmation (or its loss).
local function wake(rec)
    local evs = rec.evs
    if evs then
        rec.evs = nil
        for i = 1, #evs do
            evs[i]:set()
        end
    end
end

local function confirm_reply(rec)
    return function(stat)
        if rec.confirmed == nil then
            rec.confirmed = stat and true or false
        end
        wake(rec)
    end
end

-- Node `rec`'s loss watch was sent: learn, without waiting, when it is
-- set on the live node (the header's "local grant"). Once per node, when
-- a second local owner wants it (an uncontended lock pays nothing).
local function confirm(rec, client)
    if rec.confirming then
        return
    end
    rec.confirming = true
    local node = rec.q:node()
    if not node then
        rec.confirmed = false
        return wake(rec)
    end
    client:send("exists", node):on_done(confirm_reply(rec))
end

-- Waits (until `deadline`) for node `rec`'s confirmation or loss.
local function wait_confirmed(rec, client, deadline)
    if rec.confirmed ~= nil or rec.lost then
        return
    end
    local ev = client:waiter():event()
    rec.evs = rec.evs or {}
    rec.evs[#rec.evs + 1] = ev
    ev:wait(remaining(deadline))
end


-- The cohort's node was lost: the holder learns it, waiters join again.
-- A holder handed it whose acquire has not returned never held it: it
-- joins the line itself (relead), untold.
local function node_lost(reason, rec)
    rec.lost = true
    wake(rec)
    local c = rec.cohort
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
        util.call_all(c.client, h.lost_fns, "lock on_lost", reason, h.owner)
    end
end


-- Watches through node `rec` for loss (fn, once per node) and confirms the
-- watch. A node found lost before (held() saw the session end, no one
-- watched): fn runs now, as its watch would have.
local function watch_loss(rec, fn, client)
    if not rec.lost_watched then
        rec.lost_watched = true
        rec.q:on_lost(fn, rec)
    end
    if not rec.q:is_through() then
        return fn("sessionexpired", rec)
    end
    confirm(rec, client)
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
        if rec.cohort.rec == rec then
            rec.cohort.remote = true
        end
    end
end

local function remote_reply(rec)
    return function(names)
        local c = rec.cohort
        if c.rec == rec and names and not rec.changed then
            c.remote = behind_us(rec, names)
        end
    end
end

-- Lists the line with a watch, without waiting. Our own delete of the node
-- fires the watch at the latest, so none outlives the node.
local function watch_remote(rec)
    rec.cohort.client:send("children", rec.cohort.path, remote_watcher(rec))
        :on_done(remote_reply(rec))
end


-- Revocation. The holds of node `rec` now (exclusive: one; shared: the
-- generation's readers).
local function each_holder(rec, fn)
    if rec.gen then
        for h in pairs(rec.gen.holds) do
            fn(h, rec)
        end
    elseif rec.cohort.rec == rec and rec.cohort.holder then
        fn(rec.cohort.holder, rec)
    end
end

-- Tells hold `h` (once) of a revocation request for node `rec`, if its
-- lock listens and its acquire returned (a hold woken but not yet resumed
-- is told by _M.listen's read, after its acquire returns).
local function tell_revoke(h, rec)
    if h.granted and not h.revoked and #h.revoke_fns > 0 then
        h.revoked = true
        util.call_all(h.lock.client, h.revoke_fns, "lock on_revoke", h.owner, rec.q:node())
    end
end

local function node_revoked(rec)
    rec.revoked = true
    local g = rec.gen
    if g and g.c.open == g then
        g.c.open = nil      -- no reader joins it any more
    end
    each_holder(rec, tell_revoke)
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
        local c = rec.cohort or rec.gen.c
        c.client:send("get", node, revoke_watcher(rec)):on_done(revoke_reply(rec))
    end
end


-- The node serves several owners from the first local waiter on: watch
-- the line (remote waiters) and the node (loss), once each per node.
local function start_watching(c)
    local rec = c.rec
    if not rec then
        return
    end
    if not rec.line_watched then
        rec.line_watched = true
        watch_remote(rec)
    end
    watch_loss(rec, node_lost, c.client)
end


-- on_lost was registered while hold `h` holds: watch its node now.
local function watch_lost_exclusive(h)
    local c = h.cohort
    local rec = c.rec
    if c.holder == h and rec then
        watch_loss(rec, node_lost, c.client)
    end
end


-- Has the held node been lost unnoticed by the cohort (held() saw the
-- session end, no one watched)? Then the cohort learns it now.
local function check_held(c)
    if c.state == "held" and not c.rec.q:is_through() then
        node_lost("sessionexpired", c.rec)   -- a no-op if is_through told it
    end
end


-- Can enter() wait inside a pcall? LuaJIT and 5.2+ yes; plain 5.1 no:
-- there it runs unprotected (a raising rule leaves the cohort stuck).
local PROTECT = rawget(_G, "jit") ~= nil or _VERSION ~= "Lua 5.1"

-- Hold `h` enters q for its cohort. If enter raises (a driver's rule:
-- line.lua re-raises it, our node gone), whoever waits leads instead.
local function enter(h, q, timeout)
    if not PROTECT then
        local ok, err = q:enter(timeout)
        h.leading = nil
        return ok, err
    end
    local ok, res, err = pcall(q.enter, q, timeout)
    local rec = h.leading
    h.leading = nil
    if not ok then
        if rec.cohort and rec.cohort.rec == rec then
            pass_lead(rec.cohort)
        elseif rec.gen and rec.gen.rec == rec then
            gen_pass_lead(rec.gen)
        end
        error(res, 0)
    end
    return res, err
end

-- Owner hold `h` joins the line for the cohort (until `deadline`).
local function lead(c, h, deadline)
    while true do
        c.state = "entering"
        local q = line.new(c.client, c.path, c.driver, h.opts.data)
        local rec = { q = q, cohort = c }
        c.rec, h.leading = rec, rec
        if #h.lost_fns > 0 then
            rec.lost_watched = true
            q:on_lost(node_lost, rec)
        end
        local ok, err = enter(h, q, remaining(deadline))
        if not ok then
            pass_lead(c)
            return nil, err
        end
        untrack(c.client, q)
        c.state, c.holder, h.rec = "held", h, rec
        c.n, c.since, c.remote = 0, now(), true
        h.q, h.n, h.cohort = q, 0, c
        if c.tail >= c.head then
            start_watching(c)     -- owners queued while we joined
        end
        if c.holder == h then
            return true
        end
        h.relead = nil            -- lost at once (start_watching saw it): again
    end
end


-- Hold `h` was handed node h.rec locally: it holds once the node is
-- confirmed (header). Returns true, "lead" (the node is not to be had:
-- h joins the line itself) or nil, err (out of time: passed on).
local function handed(c, h, deadline)
    local rec = h.rec
    if c.holder == h then
        wait_confirmed(rec, c.client, deadline)
    end
    if c.holder == h and rec.confirmed and h.q:is_through() then  -- may run node_lost
        return true
    end
    if c.holder ~= h then
        h.relead = nil    -- node_lost made us lead
        return "lead"
    end
    if rec.confirmed == nil and not rec.lost then
        release_exclusive(h)     -- out of time: to the next, or the node goes
        return nil, contract.is_closed(c.client) and "closed" or "timeout"
    end
    c.rec, c.holder, c.state = nil, nil, "entering"   -- not confirmed: a new node
    h.q:leave()
    return "lead"
end


-- The exclusive form of _M.acquire.
local function acquire_exclusive(client, path, driver, h, timeout)
    local c = cohort_of(client, path, driver)
    check_held(c)
    if c.state == "idle" then
        return lead(c, h, util.deadline(timeout))
    end
    if timeout == 0 then
        return nil, "timeout"     -- try once: an owner of this process has it
    end
    local deadline = util.deadline(timeout)
    local e = enqueue(c, c.client, h)
    h.entry = e
    if c.state == "held" then
        start_watching(c)
    end
    local how, err = await(e, c.client, deadline)
    h.entry = nil
    if how == "held" then
        how, err = handed(c, h, deadline)
    end
    if how == "lead" then
        return lead(c, h, deadline)
    end
    return how and true, err
end


-- May the holder pass the node on locally now?
local function within_bound(c, opts)
    if c.n >= LOCAL_MAX then
        return false
    end
    if not c.remote then
        return true
    end
    return c.n < (opts.cohort_handoffs or _M.DEFAULT_HANDOFFS)
           and now() - c.since < (opts.cohort_time or _M.DEFAULT_TIME)
end


-- The last release of hold `h` (or its release after a loss): hands the
-- node to the next local owner, or deletes it (without waiting); a lost
-- node goes to no one, the next local owner joins the line again.
function release_exclusive(h)
    local c = h.cohort
    if c.holder ~= h then
        return     -- the node was lost meanwhile: the cohort moved on
    end
    local rec, q = c.rec, h.q
    if not q:is_through() then     -- may run node_lost: then the cohort moved on
        if c.holder == h then
            pass_lead(c)           -- lost unwatched: the releaser needs no telling
        end
        q:leave()
        return
    end
    if c.head <= c.tail and not rec.revoked and within_bound(c, h.opts) then
        local e = pop(c)
        if e then
            c.n = c.n + 1
            local nh = e.h
            nh.q, nh.n, nh.cohort, nh.rec = q, c.n, c, rec
            c.holder = nh
            e.state = "held"
            e.ev:set()
            return
        end
    end
    pass_lead(c)
    q:leave()
end


-- ---------------------------------------------------------------------------
-- Shared cohorts (an rwlock's readers): the readers of one client share
-- one read node, a "generation". A reader joins the open generation at
-- once (no request) while its node is through and, with a node behind it
-- in line (a writer may wait there), fewer than cohort_handoffs joins and
-- less than cohort_time went by since it was granted; otherwise it opens a
-- new generation (a new node, behind that writer). Readers that arrive
-- while a generation's node is being entered wait for it and all hold when
-- it is through. The node goes when its last reader releases.

local SHARED = setmetatable({}, { __mode = "k" })   -- drivers of shared lines

--- Makes the lines of `driver` shared (readers hold together).
function _M.shared(driver)
    SHARED[driver] = true
end


local function gen_lost(reason, rec)
    if rec.lost then
        return
    end
    rec.lost = true
    wake(rec)
    local g = rec.gen
    if g.c.open == g then
        g.c.open = nil
    end
    for h in pairs(g.holds) do
        if not h.confirming then     -- not granted yet: it opens a new generation
            util.call_all(g.c.client, h.lost_fns, "lock on_lost", reason, h.owner)
        end
    end
end

local function gen_watch_lost(g)
    local rec = g.rec
    if not rec then
        return
    end
    if g.state == "held" then
        watch_loss(rec, gen_lost, g.c.client)
    elseif not rec.lost_watched then
        rec.lost_watched = true       -- set when the node is through
        rec.q:on_lost(gen_lost, rec)
    end
end

local function gen_line_changed(rec)
    return function()
        rec.changed = true
        rec.gen.remote = true
    end
end

local function gen_line_reply(rec)
    return function(names)
        if names and not rec.changed then
            rec.gen.remote = behind_us(rec, names)
        end
    end
end

local function join(g, h)
    local c = g.c
    h.q, h.n, h.cohort, h.gen = g.rec.q, g.joins, c, g
    g.joins = g.joins + 1
    g.holders = g.holders + 1
    g.holds[h] = true
    if g.holders == 2 then
        -- Several readers on one node: watch the line (writers behind) and
        -- the node (loss), once each.
        local rec = g.rec
        if not rec.line_watched then
            rec.line_watched = true
            c.client:send("children", c.path, gen_line_changed(rec)):on_done(gen_line_reply(rec))
        end
        gen_watch_lost(g)
    end
end

-- Generation `g`'s node is not being entered any more: the first reader
-- waiting for it enters one itself, or the generation closes.
function gen_pass_lead(g)
    g.rec = nil
    local e = pop(g)
    if e then
        e.state = "lead"
        e.ev:set()
    elseif g.c.open == g then
        g.c.open = nil
    end
end

local function joinable(g, opts)
    if g.state ~= "held" or g.rec.revoked or not g.rec.q:is_through() or g.joins > LOCAL_MAX then
        return false
    end
    if not g.remote then
        return true
    end
    return g.joins <= (opts.cohort_handoffs or _M.DEFAULT_HANDOFFS)
           and now() - g.since < (opts.cohort_time or _M.DEFAULT_TIME)
end

-- Reader `h` enters a node for generation `g`; on success every reader
-- waiting for `g` holds too.
local function lead_shared(g, h, timeout)
    local c = g.c
    local q = line.new(c.client, c.path, c.driver, h.opts.data)
    local rec = { q = q, gen = g }
    g.rec, h.leading = rec, rec
    if #h.lost_fns > 0 then
        gen_watch_lost(g)
    end
    local ok, err = enter(h, q, timeout)
    if not ok then
        gen_pass_lead(g)
        return nil, err
    end
    untrack(c.client, q)
    g.state, g.since = "held", now()
    join(g, h)
    local e = pop(g)
    while e do
        join(g, e.h)
        e.state = "held"
        e.ev:set()
        e = pop(g)
    end
    return true
end

local function acquire_shared(client, path, driver, h, timeout)
    local c = cohort_of(client, path, driver)
    local deadline = util.deadline(timeout)
    local g = c.open
    while g and g.state == "held" do
        local ok = joinable(g, h.opts)
        if ok and g.rec.confirmed then
            join(g, h)
            return true
        elseif ok and g.rec.confirmed == nil and remaining(deadline) ~= 0 then
            -- Granted only once confirmed (header): at most one wait per
            -- node. Meanwhile h counts as a holder, so the node stays.
            local rec = g.rec
            join(g, h)
            h.confirming = true
            gen_watch_lost(g)
            wait_confirmed(rec, client, deadline)
            h.confirming = nil
            if g.holds[h] and rec.confirmed and not rec.lost and rec.q:is_through() then
                return true
            end
            release_shared(h)
            g = c.open     -- anything may have changed meanwhile
        else
            c.open, g = nil, nil
        end
    end
    if not g then
        g = { c = c, state = "entering", holds = {}, holders = 0, joins = 0, since = 0,
              remote = true, waiting = {}, head = 1, tail = 0 }
        c.open = g
        return lead_shared(g, h, remaining(deadline))
    end
    if timeout == 0 then
        return nil, "timeout"     -- try once: a reader of this process is entering
    end
    h.entry = enqueue(g, client, h)
    local how, err = await(h.entry, client, deadline)
    h.entry = nil
    if how == "lead" then
        return lead_shared(g, h, remaining(deadline))
    end
    return how and true, err
end

function release_shared(h)
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
            c.home[c.path] = nil
        end
        g.rec.q:leave()
    end
end


-- ---------------------------------------------------------------------------
-- nginx: ties. A tie answers the waiter's contract for request-owned
-- nodes (node(), is_through(), leave(); client.nodes' own_node), for one
-- hold: through while the hold holds; leave() lets go of whatever the
-- hold has in the cohort, for a request that ended or a killed coroutine.

local Tie = {}
local tie_mt = { __index = Tie }

local function holds(h)
    if h.gen then
        return h.gen.holds[h] == true
    end
    return h.cohort ~= nil and h.cohort.holder == h
end

function Tie:node()
    return self.key
end

function Tie:is_through()
    return holds(self.h)
end

function Tie:leave()
    local h = self.h
    if holds(h) then
        if h.forget then
            h:forget()     -- its owner is gone: no release will come
        end
        return _M.release(h)
    end
    untie(h)
    local rec = h.leading
    if rec then       -- killed while joining the line for the cohort
        h.leading = nil
        if rec.cohort and rec.cohort.rec == rec then
            pass_lead(rec.cohort)
        elseif rec.gen and rec.gen.rec == rec then
            gen_pass_lead(rec.gen)
        end
        rec.q:leave()
        return
    end
    if h.relead then    -- its node lost, made to lead, never resumed
        h.relead = nil
        return pass_lead(h.cohort)
    end
    local e = h.entry
    if e and not e.gone then
        e.gone = true         -- pop skips it
        h.entry = nil
        if e.state == "lead" then     -- woken to join the line, never resumed
            if e.line.holds then
                gen_pass_lead(e.line)
            else
                pass_lead(e.line)
            end
        end
    end
end

local tie_seq = 0

-- Ties hold `h` to the current request (nginx; a no-op elsewhere).
function tie(client, path, h)
    local w = client:waiter()
    if not w.track then
        return
    end
    tie_seq = tie_seq + 1
    local t = setmetatable({ h = h, key = ("%s (lock cohort, hold %d)"):format(path, tie_seq) },
                           tie_mt)
    t.q = t
    w:track(t, t.key)
    -- Only the end of the request lets go, not the ticker's rule for a
    -- killed coroutine (matched by coroutine): that rule dropped ties of
    -- requests still waiting here (spec/ngx_spec.lua, "a node deleted
    -- under its holder": a waiter skipped, its acquire timed out).
    t.co = nil
    if t.scope then
        h.tie = t
    end
end

-- The hold no longer needs its request's watch.
function untie(h)
    local t = h.tie
    if t then
        h.tie = nil
        if t.scope and t.scope.nodes[t.key] == t then
            t.scope.nodes[t.key] = nil
        end
    end
end


--- Acquires for hold `h` ({ owner =, opts = the lock's options, lost_fns
--- = its on_lost callbacks }) on the line of `driver` under `path`: sets
--- h.q (the shared position), h.n (the grant number within the node),
--- h.cohort.
---@return true|nil ok, string? err
function _M.acquire(client, path, driver, h, timeout)
    tie(client, path, h)
    local ok, err
    if SHARED[driver] then
        ok, err = acquire_shared(client, path, driver, h, timeout)
    else
        ok, err = acquire_exclusive(client, path, driver, h, timeout)
    end
    if not ok then
        untie(h)
    end
    return ok, err
end


--- The last release of hold `h`, or its release after a loss.
function _M.release(h)
    untie(h)
    if h.gen then
        return release_shared(h)
    end
    return release_exclusive(h)
end


--- Hold `h` holds and its acquire returned (or on_revoke was registered
--- since): watch its node for revocation requests if its lock listens.
function _M.listen(h)
    h.granted = true
    if #h.revoke_fns == 0 or h.revoked then
        return
    end
    local rec
    if h.gen then
        rec = h.gen.holds[h] and h.gen.rec
    elseif h.cohort.holder == h then
        rec = h.cohort.rec
    end
    if not rec then
        return
    end
    if not rec.revoke_watched then
        watch_revoke(rec)
    elseif rec.revoked then
        -- Asked before this hold was ours to tell: tell it the way a
        -- new watch would, from the reply (not inside acquire).
        h.lock.client:send("get", rec.q:node()):on_done(function(data)
            if data == REVOKE and rec.q:is_through() then
                each_holder(rec, function(x) if x == h then tell_revoke(h, rec) end end)
            end
        end)
    end
end


--- on_lost was registered while hold `h` holds: watch its node now.
function _M.watch_lost(h)
    if h.gen then
        if h.gen.holds[h] then
            gen_watch_lost(h.gen)
        end
        return
    end
    return watch_lost_exclusive(h)
end


return _M
