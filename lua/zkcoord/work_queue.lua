--- zkcoord.work_queue: items many producers put and many consumers take,
--- each taken by one live consumer at a time (kazoo's LockingQueue).
--
--   local q = client:work_queue("/jobs")
--   q:put("resize img-42", { priority = 10 })      -- lower first, FIFO within a priority
--   local item, err = q:take(30)                    -- waits without polling
--   if item then work(item.data) item:ack() end     -- or item:release(): back to the queue
--
-- Node layout (kazoo's LockingQueue, so kazoo consumers take our items and
-- we take theirs): items are persistent-sequential nodes under
-- <path>/entries, named and ordered as work_queue/names.lua says; a put
-- makes its item with a receipt under <path>/puts (work_queue/put.lua).
--
-- A consumer claims an item by creating the ephemeral <path>/taken/<item
-- name> (data: its id); ack() deletes claim and item in one multi,
-- release() the claim; only the claim's session deletes it, so a lost
-- reply is decided by the claim. A consumer whose session ends loses its
-- claims, and their items go back to the queue.
--
-- Waiting: take() lists entries and claims with one watch each (one round
-- trip, pipelined); a new item or a claim going wakes it. Every waiting
-- consumer wakes on every change: consumers are few next to items.
--
-- Connection loss ("suspended"): claims, items and receipts stay; take()
-- waits for the connection within its timeout. Session loss ("lost"): our
-- claims are gone; item:ack() and item:release() on them return nil,
-- "lost", except an ack whose outcome the session did not live to tell:
-- the item decides it (ack_after_loss).
local core = require "zkcoord.core"
local util = require "zkcoord.util"
-- A write whose reply was lost may have happened (unknown_outcome): look
-- before sending it again; a transient error leaves it to be looked at once
-- connected.
local errors = require "zkcoord.errors"
local names = require "zkcoord.work_queue.names"
local puts = require "zkcoord.work_queue.put"
local unknown_outcome, transient = errors.unknown_outcome, errors.transient

local now = core.now
local type, ipairs, tostring = type, ipairs, tostring
local setmetatable = setmetatable
local argerror, remaining, retry = util.argerror, util.remaining, util.retry
local UNTIL_DEADLINE = util.UNTIL_DEADLINE

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local Item = {}
local item_mt = { __index = Item }
local Claim = {}
local claim_mt = { __index = Claim }
local check_self = util.self_checker(mt, "work queue", "q")
local check_item = util.self_checker(item_mt, "taken item", "item")

local OPT_KEYS = { "id" }
local PUT_KEYS = { "priority", "timeout" }


---@class zkcoord.work_queue_opts
---@field id string? this consumer's id, the data of its claims (default "<hostname>:<pid>")

--- client:work_queue(path, opts) -> q (no server state until put or take).
function _M.new(client, path, opts)
    client.check_path(path, "work_queue", 1)
    opts = util.check_opts(opts, OPT_KEYS, "work_queue", 2)
    if opts.id ~= nil and type(opts.id) ~= "string" then
        argerror(2, "work_queue", "id must be a string, got " .. type(opts.id))
    end
    local base = path == "/" and "" or path
    return setmetatable({
        client = client,
        path = path,
        entries = base .. "/entries",
        taken = base .. "/taken",
        puts = base .. "/puts",
        id = opts.id or util.default_id(),
    }, mt)
end


-- Once connected again in session `sid` (never, if it ends first): fn().
-- For what a write whose outcome we never learnt may have left behind. If
-- the session ends first (not by close()), gone() when given.
local function when_back(client, sid, fn, gone)
    local listener
    local function try(state)
        if client:session_id() ~= sid or state == "closed" or state == "lost" then
            client:remove_listener(listener)
            if gone and state ~= "closed" then
                gone()
            end
        elseif state == "connected" then
            client:remove_listener(listener)
            fn()
        end
    end
    listener = client:on_state(try)
    try(client:state())
end


--- Puts an item. opts.priority: 0..999, lower first (default 100);
--- opts.timeout: seconds (default the session timeout).
---@return true|nil ok, string? err
function _M:put(data, opts)
    check_self(self, "put")
    util.check_string(data, "put", 1, "data")
    opts = util.check_opts(opts, PUT_KEYS, "put", 2)
    local prio = opts.priority or names.DEFAULT_PRIORITY
    if not names.is_priority(prio) then
        argerror(2, "put", "priority must be an integer from 0 to 999, got " .. tostring(prio))
    end
    local timeout = util.check_timeout(opts.timeout, "put", 2)
    local client = self.client
    if timeout == nil then
        timeout = client:session_timeout()
    elseif timeout == 0 then
        timeout = client:request_timeout()    -- 0: one try, bounded like a request
    end
    return puts.put(self, data, prio, now() + timeout)
end


--- How many items are in the queue (taken ones included, until acked).
---@return integer|nil n, string? err
function _M:len()
    check_self(self, "len")
    local listed, err = self.client:children(self.entries)
    if not listed then
        return err == "nonode" and 0 or nil, err ~= "nonode" and err or nil
    end
    return names.count(listed)
end


-- Gives our claim back. Only session `sid`, which made it, may delete it:
-- once that session is gone, so is our claim, and the path may hold
-- another consumer's by then (the client's registry forgets claims for
-- the same reason: own_node's `shared`).
local function give_back(client, claim, sid)
    if client:session_id() == sid then
        client:delete_guaranteed(claim)
    end
end


-- A claim whose create reply was lost, and which we could not look at in
-- time, may exist in our session and hold its item until the session ends:
-- once connected again in that session, delete it if it is ours.
local function drop_if_ours(client, claim, sid)
    when_back(client, sid, function()
        client:send("exists", claim):on_done(function(st)
            if st and st.ephemeral_owner == sid then
                give_back(client, claim, sid)
            end
        end)
    end)
end


-- The hold ended, not by a write of ours (none in flight or undecided:
-- that ack() or release() answers for itself): tell the item's on_lost
-- callbacks, once. "deleted": someone deleted our claim; "sessionexpired":
-- it went with our session.
local function tell_lost(self, reason)
    if self.claim == nil or self._writing or self._unsure or self._lost_told then
        return
    end
    self._lost_told = true
    if self._lost_fns then
        util.call_all(self.queue.client, self._lost_fns, "work_queue item on_lost", reason)
    end
end


-- The claim went while held, not by a write of ours (none in flight or
-- undecided): someone deleted it. The item is lost, as with the session:
-- held() is false, ack() and release() return "lost" and delete nothing
-- (the path may hold another consumer's claim by now).
local function claim_gone(self)
    if self.claim and not self._writing and not self._unsure then
        -- given back by the client's registry (nginx: its request ended), as
        -- a lock is released then: no loss to tell
        local given_back = self._held:node() == nil
        self._deleted = true
        self._held:forget()
        if not given_back then
            tell_lost(self, "deleted")
        end
    end
end


-- The claim went with our session (unless the registry gave it back before).
local function session_ended(self)
    if self._held:node() ~= nil then
        tell_lost(self, "sessionexpired")
    end
end


-- Our claim is watched while held (line/node.lua's _watch_own): a delete
-- by someone else must reach held() and stop ack() from deleting the item.
-- Static handlers; the item travels as the watch's and the reply's context.
local watch_claim

local function claim_watch_fired(ev, self)
    if self.claim ~= ev.path or self._deleted then
        return
    end
    if ev.type == "deleted" then
        claim_gone(self)
    elseif ev.type == "changed" then
        watch_claim(self)     -- re-arm
    elseif ev.type == "session" then
        -- the claim went with the session; claimed() sees the new id
        session_ended(self)
    end
end


-- The session ended while no watch of ours was set (after a connection loss).
local function session_gone(self)
    return function() session_ended(self) end
end


local function claim_watch_reply(p, self)
    if self.claim == nil or self._deleted or p.rc == 0 then
        return
    end
    local e = errors.name(p.rc)
    if e == "nonode" then
        claim_gone(self)      -- gone before the watch was set
    elseif (transient[e] or unknown_outcome[e]) and e ~= "sessionexpired" then
        -- no watch was set (connection loss): again once back in our session
        when_back(self.queue.client, self._sid, function() watch_claim(self) end,
                  session_gone(self))
    end
end


watch_claim = function(self)
    local client = self.queue.client
    if self.claim == nil then
        return
    elseif client:session_id() ~= self._sid then
        return session_ended(self)
    end
    local f = client:send("exists", self.claim, claim_watch_fired, self)
    if not f:on_late(claim_watch_reply, self) then
        when_back(client, self._sid, function() watch_claim(self) end, session_gone(self))
    end
end


-- Tries to claim one item; returns the item, false (taken by another, or
-- acked meanwhile), or nil, err.
function _M:_claim(e, deadline)
    local client = self.client
    local claim = self.taken .. "/" .. e.name
    local path = self.entries .. "/" .. e.name
    local sid = client:session_id()
    local fc = client:send("create", claim, self.id, { ephemeral = true })
    local fg = client:send("get", path)
    local created, cerr = fc:wait(remaining(deadline))
    local cstat = created and cerr     -- a create answers path, stat
    if not created and cerr == "timeout" then
        -- We stop waiting; a claim its late reply made is not wanted.
        fc:on_done(function(made, err)
            if made then
                give_back(client, claim, sid)
            elseif unknown_outcome[err] then
                drop_if_ours(client, claim, sid)
            end
        end)
        return nil, "timeout"
    end
    local data, stat = fg:wait(remaining(deadline))
    if not created and unknown_outcome[cerr] then
        -- Did our create happen? Only our own session's claim is ours; one
        -- made by an ended session went with it.
        if client:session_id() ~= sid then
            return nil, "sessionexpired"
        end
        if not client:wait_connected(remaining(deadline)) or client:session_id() ~= sid then
            drop_if_ours(client, claim, sid)
            return nil, "timeout"
        end
        local st, serr = client:exists(claim)
        if st == nil then
            -- Not learnt: a claim our create made would lock the item
            -- until the session ends.
            drop_if_ours(client, claim, sid)
            return nil, serr
        elseif not (st and st.ephemeral_owner == sid) then
            return false
        end
        cstat = st
        data, stat = client:get(path)    -- ours: the create did happen
    elseif not created then
        if cerr == "nodeexists" then
            return false
        elseif cerr == "nonode" then
            -- no taken/ parent yet: make it, then try again
            local ok, perr = client:create(self.taken, nil, { parents = true })
            if ok or perr == "nodeexists" then
                return self:_claim(e, deadline)
            end
            return nil, perr
        end
        return nil, cerr
    end
    if data == nil then
        -- Acked by someone else meanwhile (nonode), or not read: give the
        -- claim back either way (not waited for; retried until done).
        give_back(client, claim, sid)
        if stat == "nonode" then
            return false
        end
        return nil, stat
    end
    -- Registered like a queue position (in nginx a request that ends
    -- holding the item gives it back), but shared: a new session does not
    -- delete a lost session's claims, which may be other consumers' by then.
    local held = setmetatable({ client = client, _node = claim, _sid = sid, _through = true },
                              claim_mt)
    client:own_node(claim, held, true)
    local item = setmetatable({
        _held = held,
        queue = self, data = data, path = path, priority = e.priority, claim = claim,
        stat = stat, _sid = sid,
        _czxid = cstat.czxid,    -- token(): our claim's
    }, item_mt)
    watch_claim(item)
    return item
end


function _M:_unwatch(wake)
    self.client:remove_watches(self.entries, wake)
    self.client:remove_watches(self.taken, wake)
end


-- Lists entries and claims, both with the watch `wake` (one round trip):
-- names, taken; or nil, err with the watches removed.
function _M:_list(wake, deadline)
    local client = self.client
    local fe = client:send("children", self.entries, wake)
    local ft = client:send("children", self.taken, wake)
    local listed, err = fe:wait(remaining(deadline))
    local taken, terr = ft:wait(remaining(deadline))
    if listed and taken then
        return listed, taken
    end
    self:_unwatch(wake)
    return nil, listed and terr or err
end


-- One look: lists (setting `wake`), then claims the first item nobody
-- holds. The item; false when none is free (wait for `wake`); or nil, err
-- with the watches removed. Retried as a whole on a transient error.
function _M:_try_take(wake, deadline)
    local listed, taken = self:_list(wake, deadline)
    if not listed and taken == "nonode" then
        local ok, err = names.make_paths(self.client, deadline, self.entries, self.taken)
        if not ok then
            return nil, err
        end
        listed, taken = self:_list(wake, deadline)
    end
    if not listed then
        return nil, taken
    end
    local held = {}
    for _, n in ipairs(taken) do held[n] = true end
    for _, e in ipairs(names.sorted(listed)) do
        if not held[e.name] then
            local item, err = self:_claim(e, deadline)
            if item ~= false then
                self:_unwatch(wake)
                return item, err
            end
        end
    end
    return false
end


--- Takes the first item nobody holds, waiting at most `timeout` seconds
--- (nil: as long as it takes; 0: only what is there now).
---@return table|nil item, string? err "timeout" | "closed" | a ZooKeeper code
function _M:take(timeout)
    check_self(self, "take")
    util.check_timeout(timeout, "take", 1)
    local client = self.client
    local deadline = timeout and now() + timeout or math.huge
    local down = timeout == 0 and errors.of_state(client:state(), client:link_silent())
    if down then
        return nil, down    -- only looks, and no look can go out now
    end
    -- take(0) waits for no item, but for the round trips of its look.
    local look = timeout == 0 and now() + client:request_timeout() or deadline
    while true do
        if client:is_closed() then
            return nil, "closed"
        end
        -- Both listings carry a watch: a new item or a claim going wakes us.
        local ev = client:waiter():event()
        local wake = util.waker(ev)
        local item, err = retry(client, look, UNTIL_DEADLINE, self._try_take, self, wake, look)
        if item ~= false then
            return item, err
        end
        if remaining(deadline) == 0 or not ev:wait(remaining(deadline)) then
            self:_unwatch(wake)
            return nil, client:is_closed() and "closed" or "timeout"
        end
    end
end


-- After process()'s fn: ack when it returned, else give the item back.
local function settle_item(item, ok)
    if ok then
        return item:ack()
    end
    return item:release()
end


--- Takes an item (as take(timeout)) and runs fn(data, item) protected:
--- when fn returns, the item is acked, when it raises, given back (and the
--- error raised again, with its traceback, after that). fn's results;
--- nil, err when no item came ("timeout" ...) or the ack failed ("lost":
--- our session ended, the item is back in the queue for another; "unknown":
--- see Item:ack).
---@param fn function fn(data, item)
---@param timeout number? as take's
---@return any ... fn's results, or nil, err
function _M:process(fn, timeout)
    check_self(self, "process")
    util.check_fn(fn, "process", 1)
    util.check_timeout(timeout, "process", 2)
    local item, err, detail = self:take(timeout)
    if not item then
        return nil, err, detail
    end
    return util.run_held(settle_item, item, fn, item.data, item)
end


-- ---------------------------------------------------------------------------
-- Claims: what the client's registry holds for a taken item (own_node). In
-- nginx a request that ends holding the item gives it back. A lost
-- session's claims went with it on the server; the path is anybody's
-- then, so a new session forgets them rather than deleting them (it
-- would delete the claim of the consumer that took the item since). A
-- claim answers as a queue position does (node, is_through, leave).

--- The claim node's path (nil once let go).
--- @local
function Claim:node()
    return self._node
end


--- A claim is held from the start: there is no line to wait in.
--- @local
function Claim:is_through()
    return self._node ~= nil
end


--- Gives the item back (not waited for; retried until done), while the
--- session that took it lives.
--- @local
function Claim:leave()
    local node = self._node
    if node then
        self:forget()
        give_back(self.client, node, self._sid)
    end
    return true
end


--- The claim node is gone (acked, released, or with its session).
--- @local
function Claim:forget()
    if self._node then
        self.client:disown_node(self._node)
        self._node = nil
    end
end


-- ---------------------------------------------------------------------------
-- Items.

-- Is our claim still ours? It lives as long as the session that made it,
-- unless someone deleted it (the watch, claim_gone).
local function claimed(self)
    if self.claim == nil or self._sid == nil or self._deleted then
        return false
    end
    local client = self.queue.client
    client:current_state()     -- what reached the process, and the clock rule, first
    return self._sid == client:session_id()
end


-- true while the claim is ours; else nil, "notheld" (given back already)
-- or nil, "lost" (it went with our session).
local function check_claim(self)
    if not self.claim then
        return nil, "notheld"
    end
    if not claimed(self) then
        self.claim = nil
        return nil, "lost"
    end
    return true
end


-- The claim is gone: forget it here and in the client's registry.
local function let_go(self)
    self._held:forget()
    self.claim = nil
    return true
end


-- nil, "lost" when our session ended (the claim went with it), else nil, err.
local function failed(self, err)
    local held, why = check_claim(self)
    return nil, held and err or why
end


-- An ack's multi failed with "nonode" before any try of ours could have
-- happened. results[1] (the claim) nonode: it was deleted under us, the
-- item is lost, nothing was deleted. Else the item went (someone deleted
-- it): our claim now locks nothing; give it back.
local function ack_found_nonode(self, results)
    if results and results[1] and results[1].err == "nonode" then
        self._deleted = true
        let_go(self)
        return nil, "lost"
    end
    give_back(self.queue.client, self.claim, self._sid)
    let_go(self)
    return nil, "nonode"
end


-- An ack of ours whose outcome we did not learn before its session ended
-- is decided by what the server shows, read in the session we have after
-- a sync (its server may not have applied our ack yet). First our claim:
-- while it is there, the server still holds our old session (the client
-- ends it as soon as a server answers, or the server expires it) and a
-- write of it may still be applied: wait for the claim to go (a watch).
-- Gone, our ack can no longer happen later, and the item decides: our ack
-- deletes claim and item in one multi, so the item there means it did not
-- happen ("lost": the item is back in the queue, or another's); the item
-- gone, that it is acked (true): by our ack, or, only if the server ended
-- our session before the ack reached it, by a consumer that took the item
-- since (delivered twice, as at least once allows), or deleted by someone
-- else: once the item is gone nothing on the server tells these apart.
-- Not learnt by the deadline: "unknown", and the next ack() decides it.
local function ack_after_loss(self, deadline)
    local client = self.queue.client
    local ok, err = client:wait_connected(remaining(deadline))
    if ok then
        ok, err = client:read_until(deadline, "sync", self.claim)
    end
    while ok do
        local ev = client:waiter():event()
        local wake = util.waker(ev)
        local claim, cerr = client:read_until(deadline, "exists", self.claim, wake)
        if not (claim and claim.ephemeral_owner == self._sid) then
            client:remove_watches(self.claim, wake)  -- set on a missing node too
            if claim == nil then
                err = cerr
                break
            end
            local item, ierr = client:read_until(deadline, "exists", self.path)
            if item == nil then
                err = ierr
                break
            end
            self._unsure = nil
            let_go(self)
            if item then
                return nil, "lost"
            end
            return true
        end
        if not ev:wait(remaining(deadline)) then
            client:remove_watches(self.claim, wake)
            err = "timeout"
            break
        end
    end
    self._unsure = "ack"
    if err == "timeout" or transient[err] or unknown_outcome[err] then
        return nil, "unknown"
    end
    return nil, err
end


-- Deletes our claim with `ops` (an ack's multi, a release's delete),
-- within the request timeout. A write whose reply was lost is decided by
-- the claim once connected again: only our session deletes it while the
-- session lives, so it is gone exactly when the write happened (an ack's
-- multi deletes the item with it). Once the session ended, an ack is
-- decided by the item (ack_after_loss); a release needs no deciding (the
-- claim went with the session: "lost", the item is back either way).
-- A write still undecided at the deadline is reported "unknown", never
-- "timeout": it may have happened. The next ack() or release() decides it
-- (the claim gone while our session lives: it did).
local function drop_claim_now(self, ops)
    local client = self.queue.client
    local deadline = now() + client:request_timeout()
    local is_ack = #ops == 2
    local sent = self._unsure ~= nil    -- an earlier try of ours may have happened
    local look = sent                   -- then the claim decides before we write again
    while true do
        if not look then
            local res, err, results = client:send("multi", ops):wait(remaining(deadline))
            if res or err == "nonode" and not is_ack then
                self._unsure = nil
                return let_go(self)    -- a release whose claim is gone: given back
            elseif err == "nonode" and not sent then
                return ack_found_nonode(self, results)
            elseif err == "sessionexpired" and not is_ack then
                self._unsure = nil
                return failed(self, err)    -- "lost": the claim went with the session
            elseif unknown_outcome[err] then
                sent = true    -- it may have happened (an ack: before its session ended too)
            elseif not (transient[err] or err == "nonode" and sent) then
                self._unsure = nil
                return failed(self, err)
            end
        end
        look = false
        if not (client:wait_connected(remaining(deadline)) and claimed(self)) then
            break
        end
        local st, serr = client:read_until(deadline, "exists", self.claim)
        if st == false then
            self._unsure = nil
            return let_go(self)
        elseif st == nil then
            if not unknown_outcome[serr] then
                self._unsure = nil
                return failed(self, serr)
            end
            break
        end
        sent = false    -- the claim is there: no write of ours happened; again
    end
    if sent and is_ack and self.claim and not claimed(self) then
        return ack_after_loss(self, deadline)    -- our session ended meanwhile
    end
    -- The deadline: "unknown" if a write of ours may have happened.
    self._unsure = sent and claimed(self) and (is_ack and "ack" or "release") or nil
    return failed(self, sent and "unknown" or "timeout")
end


local function drop_claim(self, ops)
    -- While a write of ours may delete the claim, its watch cannot tell
    -- our delete from another's (claim_gone).
    self._writing = true
    local ok, err = drop_claim_now(self, ops)
    self._writing = nil
    if not ok and self.claim and not self._unsure then
        watch_claim(self)    -- a delete by another meanwhile was not told apart
    end
    return ok, err
end


--- Done with the item: it is removed from the queue (claim and item in one
--- multi).
---@return true|nil ok, string? err "lost" (not done: our session ended, the item
---   is back in the queue) | "notheld" | "unknown" (the reply was lost and no server
---   answered in time: ack() again decides) | a code
function Item:ack()
    check_item(self, "ack")
    if self._unsure == "ack" and self.claim and not claimed(self) then
        -- an ack of ours was undecided when our session ended
        return ack_after_loss(self, now() + self.queue.client:request_timeout())
    end
    local held, why = check_claim(self)
    if not held then
        return nil, why
    end
    return drop_claim(self, {
        { op = "delete", path = self.claim }, { op = "delete", path = self.path },
    })
end


--- Gives the item back to the queue, for another consumer (or us) to take.
---@return true|nil ok, string? err "lost" | "notheld" | "unknown" | a code
function Item:release()
    check_item(self, "release")
    local held, why = check_claim(self)
    if not held then
        return nil, why
    end
    return drop_claim(self, { { op = "delete", path = self.claim } })
end


--- The fencing token of our hold on the item: our claim node's czxid (as
--- lock:token()), while held; another consumer's later claim of the item
--- has a higher one.
---@return number|nil token, string? err "notheld" (acked, given back or lost)
function Item:token()
    check_item(self, "token")
    if not claimed(self) then
        return nil, "notheld"
    end
    return self._czxid
end


--- fn(reason) runs when the held item is lost: "sessionexpired" (our claim
--- went with our session: the item is back in the queue) or "deleted"
--- (someone deleted our claim); held() is false then. Not after ack() or
--- release(), nor for a loss that an ack() or release() in flight or
--- undecided answers itself ("lost", "unknown"). Once per item.
function Item:on_lost(fn)
    check_item(self, "on_lost")
    local fns = self._lost_fns or {}
    self._lost_fns = fns
    return util.add_fn(fns, fn, "on_lost")
end


--- Is the item still held by us (claim alive in our session)?
function Item:held()
    check_item(self, "held")
    return claimed(self)
end


_M.mt = mt
_M.item_mt = item_mt
return _M
