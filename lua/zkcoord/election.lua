--- zkcoord.election: leader election among processes (Curator LeaderLatch).
--
--   local e = client:election("/services/indexer", { id = "host-a:8080" })
--   e:on_lost(function(reason) stop_leading() end)
--   if e:campaign(30) then lead() end        -- nil: wait forever, 0: try once
--   print(e:leader())                       -- the leader's id
--   e:resign()
--
-- Algorithm (ZooKeeper's election recipe, a driver on zkcoord.line with
-- the rule rules.first): every candidate creates an ephemeral-sequential node; the
-- lowest is the leader; every other watches only the node just below its
-- own (no herd), and re-checks when it goes. Before we call ourselves
-- leader we check that our node's ephemeral owner is our current session
-- (CURATOR-696: a node left by an older session must never make us leader).
--
-- Node layout: <path>/_c_<uuid>-latch-<seq>, data = our id (opts.id,
-- default "<hostname>:<pid>"): Curator LeaderLatch's names, so Java
-- services running a LeaderLatch on the same path take part in the same
-- election (both sort by the number after the last "latch-").
-- opts.layout = "kazoo": kazoo's Election (a Lock with the identifier as
-- data, zkcoord.layout.kazoo): <path>/<uuid hex>__lock__<seq>, so Python
-- services running a kazoo Election on the same path take part; kazoo's
-- contenders() lists our id.
--
-- Connection loss ("suspended"): we stay leader, is_leader() stays true:
-- the session may still be alive and nobody else can be elected while it
-- is. Leadership is uncertain though: a leader that must never overlap with
-- another should pause its work while client:state() ~= "connected".
-- Session loss ("lost", or suspended for the whole session timeout), or
-- our node deleted by someone else: is_leader() turns false at once and
-- on_lost callbacks run. A candidate still waiting in campaign() joins
-- the line again by itself in the new session.
--
-- Rejoin (Curator's LeaderLatch resets after a lost session, and when it
-- finds its node gone): a leadership that ended unasked ("sessionexpired"
-- or "deleted"; never after resign()) joins the line again by itself, as
-- a candidate at the back of the line, and on_elected callbacks run when
-- it wins (is_leader() is true from then). It runs in the client's
-- callbacks (a step is queued when the loss is reported, and at every
-- "connected"): in plain Lua inside whichever client call runs them next
-- (dispatch(), process(), any request, or a state question: is_leader()
-- and the like run queued callbacks first, and then take a step's round
-- trips), in nginx in the client's callback timer. Each step waits at most a session timeout (its
-- round trips, a few milliseconds when connected); the wait for the node
-- below ours is a watch, so no call waits for leadership. A step that
-- fails on the connection goes on at the next "connected"; any other error
-- is logged and ends the rejoin (its node deleted). resign() ends a rejoin and deletes its node;
-- so does campaign(), which then joins afresh; client:close() ends it
-- (the node goes with the session). opts.rejoin = false turns it off:
-- call campaign() again after a loss. run() rejoins by its own loop (by
-- default as the election's rejoin says), not by this one while fn runs.
--
-- Fencing: token() is the czxid of our node while we lead, as the lock's
-- token(): it grows with every leadership, so a resource that refuses a
-- token lower than the last it saw refuses a leader deposed meanwhile.
--
-- Scoped leadership: run(fn, timeout, ...) campaigns, runs fn(e, ...) while
-- leader and resigns when fn returns (kazoo's Election.run, Curator's
-- LeaderSelector); the election's opts.requeue (Curator's autoRequeue)
-- campaigns again after each round.
--
-- Deprecated, kept for one release (each logs a warning once per process,
-- util.deprecated): on_revoked(fn), the old name of on_lost; run(fn, {
-- timeout =, requeue =, rejoin = }), the table form of run.
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"
local util = require "zkcoord.util"
local errors = require "zkcoord.errors"
local kazoo = require "zkcoord.layout.kazoo"

local type, setmetatable, ipairs, tostring = type, setmetatable, ipairs, tostring
local remaining, argerror, call_all = util.remaining, util.argerror, util.call_all
local select, unpack = select, require("zkcoord.compat").unpack

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }

local check_self = util.self_checker(mt, "election", "e")

local OPT_KEYS = { "id", "rejoin", "requeue", "layout" }
-- By opts.layout: the campaign's driver, and a rejoin's: the same nodes,
-- through as soon as ours is in the line (the rejoin watches the node
-- below itself, without a wait).
local DRIVERS = {
    curator = { campaign = line.driver { marker = "latch-", rule = rules.first },
                join = line.driver { marker = "latch-", rule = rules.always } },
    kazoo = { campaign = kazoo.lock, join = kazoo.join },
}


--- "<hostname>:<pid>", the default id of a candidate (util.default_id).
_M.default_id = util.default_id


---@class zkcoord.election_opts
---@field id string? our identifier, stored as our node's data (default "<hostname>:<pid>")
---@field rejoin boolean? default true: a leadership lost unasked (session, node deleted)
---   joins the line again by itself (see the header); false: call campaign() again
---@field layout "curator"|"kazoo"|nil node names: Curator's LeaderLatch (default) or kazoo's Election
---@field requeue boolean|integer? run() campaigns again after fn returns: true as long
---   as the client is open, n: n more rounds (default false: one round)

-- opts.requeue (argument #2 of `fname`) as a number of further rounds.
local function check_requeue(requeue, fname)
    if requeue == true then
        return math.huge
    elseif requeue == nil or requeue == false then
        return 0
    elseif type(requeue) ~= "number" or requeue < 0 or requeue % 1 ~= 0 then
        argerror(2, fname, "requeue must be a boolean or an integer >= 0")
    end
    return requeue
end


--- client:election(path, opts) -> election object (no server state until campaign()).
---@param client table
---@param path string
---@param opts zkcoord.election_opts?
function _M.new(client, path, opts)
    opts = util.check_opts(opts, OPT_KEYS, "election", 2)
    if opts.id ~= nil and type(opts.id) ~= "string" then
        argerror(2, "election", "id must be a string")
    end
    if opts.rejoin ~= nil and type(opts.rejoin) ~= "boolean" then
        argerror(2, "election", "rejoin must be a boolean")
    end
    local requeue = check_requeue(opts.requeue, "election")
    client.check_path(path, "election", 1)
    local drivers = DRIVERS[util.check_layout(opts.layout, "election", 2)]
    return setmetatable({
        client = client,
        path = path,
        id = opts.id or util.default_id(),
        rejoin = opts.rejoin ~= false,
        _driver = drivers.campaign,
        _join = drivers.join,
        requeue = requeue,    -- run()'s further rounds (math.huge: until closed)
        _q = nil,             -- our line position while campaigning, leading or rejoining
        _rejoin = nil,        -- the position the rejoin drives, while it runs
        _checking = nil,      -- campaign()'s position until its owner check passed
        _elected_fns = {},
        _lost_fns = {},
    }, mt)
end


-- CURATOR-696: only a node whose ephemeral owner is our current session
-- makes us leader. Returns true, false (not ours), or nil, err.
local function owned(client, node)
    local st, err = client:exists(node)
    if st == nil then
        return nil, err
    end
    return st and st.ephemeral_owner ~= nil and st.ephemeral_owner == client:session_id()
end


--- Joins the election and waits until we are the leader (a rejoin running
--- ends first, its node deleted: we join afresh).
---@param timeout number? seconds; nil waits as long as it takes, 0 tries once
--- resign() from another coroutine ends it: nil, "interrupted".
---@return true|nil ok, string? err "timeout" | "closed" | "interrupted" | a ZooKeeper code
function _M:campaign(timeout)
    check_self(self, "campaign")
    util.check_timeout(timeout, "campaign", 1)
    if self:is_leader() then
        return true
    end
    self._lost = nil        -- campaigning again acknowledges an earlier loss
    local client = self.client
    local deadline = util.deadline(timeout)
    if self._q then
        -- Leadership lost (session) and not reported yet: report it now,
        -- so that a late report cannot hit the new campaign.
        if self._revoke_q == self._q then
            self._revoke("sessionexpired", true)
        end
        self._q = nil
    end
    local rq = self:_stop_rejoin()    -- we campaign instead (it may have begun just now)
    if rq then
        rq:interrupt()
        self._q = nil
    end
    local q = line.new(client, self.path, self._driver, self.id)
    self._q = q
    -- Through is not yet leader: not before the owner check (another
    -- coroutine or request may ask meanwhile).
    self._checking = q
    local ok, err = self:_campaign(q, deadline)
    if self._checking == q then
        self._checking = nil
    end
    if ok then
        self:_elected(q)
    end
    return ok, err
end


-- campaign()'s line: enter, then check the node is our session's.
function _M:_campaign(q, deadline)
    local client = self.client
    local won = false
    -- Our node is not ours only when the session changed between the
    -- create and the look: join again, a bounded number of times.
    for _ = 1, util.MAX_RACES do
        local ok, err = q:enter(remaining(deadline))
        if not ok then
            if self._q == q then self._q = nil end
            return nil, err
        end
        local mine, oerr = util.retry(client, deadline, util.UNTIL_DEADLINE, owned, client,
                                      q:node())
        if self._q ~= q then
            -- resign() came during the check (it left q): not leader.
            q:leave()
            return nil, "interrupted"
        elseif mine then
            won = true
            break
        end
        q:leave()
        if mine == nil then    -- could not look: closed, timeout, or a lasting error
            self._q = nil
            return nil, oerr
        end
    end
    if not won then
        self._q = nil
        return nil, deadline and "timeout" or "invalid"
    end
    return true
end


-- We lead with position q: watch it, and tell the on_elected callbacks.
-- A loss reported while they run (their client calls run queued
-- callbacks) is told after they return: on_lost, and a rejoin that
-- could win, never run nested inside on_elected.
function _M:_elected(q)
    self._q = q
    self._electing = q
    self:_supervise(q)
    call_all(self.client, self._elected_fns, "election on_elected")
    self:_flush_revoke(q)
end


-- Ends the on_elected phase of q: runs a revoke held back meanwhile.
function _M:_flush_revoke(q)
    if self._electing ~= q then
        return
    end
    self._electing = nil
    local held = self._held_revoke
    if held then
        self._held_revoke = nil
        self._revoke(held[1], held[2])
    end
end


-- Reports the end of leadership once (the line reports a lost session or
-- a deleted node; resign() reports "resigned").
function _M:_supervise(q)
    local client = self.client
    -- no_rejoin: campaign() reports a loss it is about to answer itself
    local function revoke(reason, no_rejoin)
        if self._revoke_q ~= q then
            return
        elseif self._electing == q and reason ~= "resigned" then
            self._held_revoke = { reason, no_rejoin }   -- told after on_elected
            return
        end
        self._revoke_q = nil
        if self._q == q then
            self._q = nil
        end
        -- resign() answers "lost" once for a leadership that ended unasked
        self._lost = reason ~= "resigned" or nil
        if self._in_run and self._lost then
            self._run_lost = true     -- run() campaigns again (a resign in fn does not)
        end
        call_all(client, self._lost_fns, "election on_lost", reason)
        if self._lost and not no_rejoin and self.rejoin and not self._in_run
           and not self._q and not client:is_closed() then
            self:_start_rejoin()
        end
    end
    self._revoke_q = q
    self._revoke = revoke
    q:on_lost(revoke)
end


-- ---------------------------------------------------------------------------
-- The rejoin (see the header). Each step runs in the client's callbacks and
-- ends in one of: leader, watching the node below ours, waiting for the
-- next "connected", or stopped. self._rejoin == q while it runs: resign(),
-- campaign() and a new rejoin end it by clearing it, and every step looks
-- again after each of its waits (callbacks, user code included, run in
-- them).

local step

-- Watch closures are made outside the frames that wait (in nginx a waiting
-- coroutine may be gone when the watch fires).
local function below_watcher(self, q)
    return function() step(self, q) end
end


-- Stops waiting for the node below ours (fire and forget).
local function unwatch_below(self)
    local below = self._below
    if below then
        self._below = nil
        self.client:remove_watches(below[1], below[2])
    end
end


-- Ends the rejoin for good after an error that no new session mends: its
-- node deleted, the error logged.
local function give_up(self, q, err)
    self.client:log("error", "election " .. self.path .. ": rejoin failed: " .. tostring(err))
    if self._q == q then
        self._q = nil
    end
    self:_stop_rejoin()
    q:leave()
end


-- A step failed with err: the connection's errors (and a step's timeout)
-- wait for the next "connected"; "closed" ends it (nothing is left on the
-- server); anything else gives up.
local function failed(self, q, err)
    if err == "closed" then
        self:_stop_rejoin()
    elseif not (errors.transient[err] or errors.unknown_outcome[err]
                or err == "sessionexpired" or err == "timeout") then
        give_up(self, q, err)
    end
end


-- Our place in the line: true (first), or the entry just below ours, or
-- false (our node is not in the listing: it went).
local function place(q, entries)
    local node = q:node()
    for i, e in ipairs(entries) do
        if e.path == node then
            return i == 1 or entries[i - 1]
        end
    end
    return false
end


-- One try: returns true to try again at once (our node went, or the node
-- below went before we could watch it), nothing otherwise. The position
-- is one of the join driver's (through once its node is in the line), so leading is
-- its node being first: no node sorts below one made before it.
local function try(self, q)
    local client = self.client
    if client:is_closed() then
        return failed(self, q, "closed")
    elseif client:state() ~= "connected" then
        return           -- the next "connected" steps again
    end
    if q:node() and not q:is_through() then
        q:leave()        -- it went with the session that created it
    end
    if not q:node() then
        local ok, err = q:enter(client:session_timeout())
        if self._rejoin ~= q then
            return q:leave()  -- ended while we waited (callbacks ran in it)
        elseif not ok then
            return failed(self, q, err)
        end
    end
    local entries, err = q:entries()
    if self._rejoin ~= q then
        return q:leave()
    elseif not entries then
        return failed(self, q, err)
    end
    local at = place(q, entries)
    if at == false then
        q:leave()
        return true
    elseif at ~= true then
        unwatch_below(self)
        local fn = below_watcher(self, q)
        local st, serr = client:exists(at.path, fn)
        if st == false or serr == "nonode" then
            return true
        elseif st == nil then
            return failed(self, q, serr)
        end
        self._below = { at.path, fn }
        return
    end
    local mine, oerr = owned(client, q:node())
    if self._rejoin ~= q then
        return q:leave()
    elseif not mine then
        q:leave()     -- CURATOR-696: made in a session that has ended meanwhile
        return mine == false or failed(self, q, oerr)
    end
    self:_stop_rejoin()
    self._lost = nil      -- leading again: resign() answers true
    self:_elected(q)
end


-- Runs tries until one settles (bounded: a node that goes every time).
-- A step asked for while one runs (from a callback in its waits) runs
-- after it.
function step(self, q)
    if self._rejoin ~= q then
        return
    end
    if self._stepping then
        self._step_again = true
        return
    end
    self._stepping = true
    local again = true
    for _ = 1, util.MAX_RACES do
        self._step_again = false
        again = try(self, q)
        if self._rejoin ~= q or not (again or self._step_again) then
            break
        end
    end
    self._stepping = false
    if self._rejoin == q and (again or self._step_again) then
        self.client:waiter():defer(step, self, q)   -- later, not in a loop
    end
end


-- Starts rejoining: a new position, stepped from the client's callback
-- queue (not inside the code that reported the loss) and at every
-- "connected".
function _M:_start_rejoin()
    self:_stop_rejoin()
    local q = line.new(self.client, self.path, self._join, self.id)
    self._q, self._rejoin = q, q
    self._on_state = function(state)
        if state == "connected" then
            step(self, q)
        end
    end
    self.client:on_state(self._on_state)
    self.client:waiter():defer(step, self, q)
end


-- Ends the rejoin (its node stays: the caller leaves it or takes it over).
-- Returns its position, or nil.
function _M:_stop_rejoin()
    local q = self._rejoin
    if not q then
        return nil
    end
    self._rejoin = nil
    self.client:remove_listener(self._on_state)
    self._on_state = nil
    if not self.client:is_closed() then
        unwatch_below(self)
    end
    self._below = nil
    return q
end


--- Is a rejoin running (see the header: after a leadership lost unasked,
--- until we lead again, resign() or the client closes)?
---@return boolean
function _M:is_rejoining()
    check_self(self, "is_rejoining")
    return self._rejoin ~= nil and not self.client:is_closed()
end


--- Gives up leadership, or stops campaigning or rejoining. The node is
--- deleted without waiting (ordered before this session's next request,
--- retried until done). on_lost callbacks run with reason "resigned" if
--- we were leader. After leadership was lost (session ended, node deleted,
--- or the session not heard from for its timeout) the first resign()
--- returns nil, "lost" (on_lost has run with the reason before), unless
--- a rejoin has made us leader again; after client:close(), nil, "closed"
--- (on_lost has heard "closed").
---@return true|nil ok, string? err "lost" | "closed"
function _M:resign()
    check_self(self, "resign")
    local q = self._q
    if q then
        self:_flush_revoke(q)     -- inside on_elected: a loss held back is told first
        q = self._q
    end
    if q then
        local was = q:is_through()     -- first: a loss found now is reported
        q:interrupt()                  -- a campaign() waiting in it ends too
        if self._revoke_q == q then
            self._revoke(was and "resigned" or "sessionexpired", true)
        end
        self._q = nil
    end
    -- A rejoin (running before, or started by a loss is_through() found)
    -- ends with its node.
    q = self:_stop_rejoin()
    if q then
        q:interrupt()
    end
    if self._lost then
        self._lost = nil
        return nil, self.client:is_closed() and "closed" or "lost"
    end
    return true
end


--- Are we the leader, in a live session?
---@return boolean
function _M:is_leader()
    check_self(self, "is_leader")
    local q = self._q
    if q == nil or self._rejoin == q or self._checking == q then
        return false
    elseif q:is_through() then
        return true
    end
    -- The callbacks is_through() ran may have made a new position ours (a
    -- rejoin that won): answer for it.
    local now = self._q
    return now ~= nil and now ~= q and self._rejoin ~= now and self._checking ~= now
           and now:is_through()
end


--- The fencing token of our leadership: our node's czxid (see the header).
---@return number|nil token, string? err "notleader"
function _M:token()
    check_self(self, "token")
    if not self:is_leader() then
        return nil, "notleader"
    end
    return self._q:stat().czxid
end


--- The path of our node while we lead (nil otherwise).
---@return string|nil
function _M:node()
    check_self(self, "node")
    if not self:is_leader() then
        return nil
    end
    return self._q:node()
end


local RUN_KEYS = { "timeout", "requeue", "rejoin" }


-- run()'s give-back. A loss not reported yet is found by resign() and
-- noted by revoke (_run_lost), so that run() may rejoin; is_leader() can't
-- tell it: it is false too after fn resigned, which ends the round.
local function resign_after(self)
    local ok, err = self:resign()
    self._in_run = nil
    return ok, err
end


local function pack(...)
    return { n = select("#", ...), ... }
end


-- The deprecated table form run(fn, { timeout =, requeue =, rejoin = }):
-- its timeout, and its requeue and rejoin over the election's.
local function run_opts(self, opts)
    opts = util.check_opts(opts, RUN_KEYS, "run", 2)
    util.check_timeout(opts.timeout, "run", 2)
    local requeue, rejoin = self.requeue, self.rejoin
    if opts.requeue ~= nil then
        requeue = check_requeue(opts.requeue, "run")
    end
    if opts.rejoin ~= nil then
        if type(opts.rejoin) ~= "boolean" then
            argerror(2, "run", "rejoin must be a boolean")   -- "no" was taken for true
        end
        rejoin = opts.rejoin
    end
    util.deprecated(self.client, "election:run(fn, { timeout = })",
                    "election:run(fn, timeout?, ...) and the election's opts.requeue")
    return opts.timeout, requeue, rejoin
end


--- Campaigns, runs fn(e, ...) while leader and resigns when it returns,
--- whatever it did (fn should return soon after is_leader() turns false,
--- or watch on_lost). An error in fn is raised again after the resign,
--- with its traceback. With the election's opts.requeue it campaigns again
--- after each round; a round whose leadership was lost while fn ran
--- campaigns again (not counted as a requeue) unless opts.rejoin is false.
--- Returns the last round's fn results; nil, err when a campaign failed
--- ("timeout", "closed" ...), or "lost" for a lost leadership with
--- rejoin = false. A table as `timeout` is the deprecated form (its
--- timeout, requeue and rejoin; a warning logged once).
---@param fn function fn(e, ...)
---@param timeout number? each campaign's timeout (nil: as long as it takes, 0: try once)
---@return any ... fn's results, or nil, err
function _M:run(fn, timeout, ...)
    check_self(self, "run")
    util.check_fn(fn, "run", 1)
    local requeue, rejoin = self.requeue, self.rejoin
    if type(timeout) == "table" then
        timeout, requeue, rejoin = run_opts(self, timeout)
    end
    util.check_timeout(timeout, "run", 2)
    local args = pack(...)
    local rounds = 0
    while true do
        local ok, err, detail = self:campaign(timeout)
        if not ok then
            return nil, err, detail
        end
        self._in_run = true       -- a loss while fn runs is run()'s to rejoin
        self._run_lost = nil
        local res = pack(util.run_held(resign_after, self, fn, self, unpack(args, 1, args.n)))
        local lost = self._run_lost
        if lost and not rejoin then
            return nil, "lost"
        end
        if not lost then
            rounds = rounds + 1
            if rounds > requeue or self.client:is_closed() then
                return unpack(res, 1, res.n)
            end
        end
    end
end


--- The current leader's id (its node's data), or nil if there is none.
---@return string|nil id, string? err
function _M:leader()
    check_self(self, "leader")
    local client = self.client
    local probe = line.new(client, self.path, self._driver)
    -- The first node may go between the list and the read: look again (bounded).
    for _ = 1, util.MAX_RACES do
        local entries, err = probe:entries()
        if not entries then
            return nil, err
        end
        if #entries == 0 then
            return nil
        end
        local data, derr = client:get(entries[1].path)
        if data then
            return data
        elseif derr ~= "nonode" then
            return nil, derr
        end
    end
    return nil, "timeout"
end


--- The ids of all candidates, leader first.
---@return string[]|nil ids, string? err
function _M:participants()
    check_self(self, "participants")
    return line.new(self.client, self.path, self._driver):participants()
end


--- fn() runs when campaign() wins, before it returns, and when a rejoin
--- wins (see the header: after a leadership lost unasked).
function _M:on_elected(fn)
    check_self(self, "on_elected")
    return util.add_fn(self._elected_fns, fn, "on_elected")
end


--- fn(reason) runs when leadership ends: "sessionexpired", "deleted" (our
--- node was removed by someone else) or "resigned". is_leader() is false then.
function _M:on_lost(fn)
    check_self(self, "on_lost")
    return util.add_fn(self._lost_fns, fn, "on_lost")
end


--- Deprecated (one release): the old name of on_lost (a loss, not a
--- request to give up: that is a lock's on_revoke). Logs a warning once.
function _M:on_revoked(fn)
    check_self(self, "on_revoked")
    util.check_fn(fn, "on_revoked")
    util.deprecated(self.client, "election:on_revoked", "election:on_lost")
    return util.add_fn(self._lost_fns, fn, "on_revoked")
end


_M.mt = mt
return _M
