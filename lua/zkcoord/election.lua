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
-- Rejoin (zkcoord.election.rejoin; Curator's LeaderLatch resets): a
-- leadership that ended unasked ("sessionexpired" or "deleted", never
-- after resign()) joins the line again by itself, in the client's
-- callbacks, and on_elected callbacks run when it wins. resign() and
-- campaign() end it, client:close() too; opts.rejoin = false turns it off
-- (call campaign() again after a loss). run() rejoins by its own loop.
--
-- Fencing: token() is the czxid of our node while we lead, as the lock's
-- token(): it grows with every leadership, so a resource that refuses a
-- token lower than the last it saw refuses a leader deposed meanwhile.
--
-- Scoped leadership: run(fn, timeout, ...) (kazoo's Election.run, Curator's
-- LeaderSelector; opts.requeue is Curator's autoRequeue).
--
-- Deprecated, kept for one release (each logs a warning once per process,
-- util.deprecated): on_revoked(fn), the old name of on_lost; run(fn, {
-- timeout =, requeue =, rejoin = }), the table form of run.
--
-- Files: this one (the object, campaign, leadership and its loss),
-- election/state.lua (the one state: idle, campaigning, checking, leading,
-- rejoining, and its transitions), election/rejoin.lua (the rejoin, on
-- the position's enter_step()), election/run.lua (run()'s rounds).
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"
local util = require "zkcoord.util"
local kazoo = require "zkcoord.layout.kazoo"
local state = require "zkcoord.election.state"
local rejoin = require "zkcoord.election.rejoin"
local run = require "zkcoord.election.run"

local type, setmetatable = type, setmetatable
local remaining, argerror, call_all = util.remaining, util.argerror, util.call_all

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }

local check_self = util.self_checker(mt, "election", "e")

local OPT_KEYS = { "id", "rejoin", "requeue", "layout" }
-- By opts.layout: the line's driver (a campaign's and a rejoin's).
local DRIVERS = {
    curator = line.driver { marker = "latch-", rule = rules.first },
    kazoo = kazoo.lock,
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
    local requeue = run.check_requeue(opts.requeue, "election")
    client.check_path(path, "election", 1)
    return setmetatable({
        client = client,
        path = path,
        id = opts.id or util.default_id(),
        rejoin = opts.rejoin ~= false,
        requeue = requeue,    -- run()'s further rounds (math.huge: until closed)
        _driver = DRIVERS[util.check_layout(opts.layout, "election", 2)],
        _state = state.INITIAL,   -- zkcoord.election.state
        _q = nil,             -- our line position unless idle
        _rejoin = nil,        -- the rejoin's record while rejoining (election.rejoin)
        _electing = nil,      -- the position whose on_elected callbacks run
        _held_revoke = nil,   -- { reason, no_rejoin }: a loss told after them
        _lost = nil,          -- a leadership ended unasked: resign() answers "lost"
        _in_run = nil,        -- run()'s fn runs (election.run)
        _run_lost = nil,      -- and its leadership was lost
        _elected_fns = {},
        _lost_fns = {},
    }, mt)
end


-- CURATOR-696: only a node whose ephemeral owner is our current session
-- makes us leader (position q's). Returns true, false (not ours), or nil, err.
function _M:_owned(q)
    local client = self.client
    local st, err = client:exists(q:node())
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
    local deadline = util.deadline(timeout)
    if self._state == "leading" then
        -- Leadership lost (session) and not reported yet: report it now,
        -- so that a late report cannot hit the new campaign.
        self:_flush_revoke(self._q)
        self:_lose(self._q, "sessionexpired", true)
    end
    local rq = rejoin.stop(self)    -- we campaign instead (it may have begun just now)
    if rq then
        rq:interrupt()
    end
    local q = line.new(self.client, self.path, self._driver, self.id)
    self._q = q
    state.set(self, "campaigning")
    local ok, err = self:_campaign(q, deadline)
    if ok then
        self:_elected(q)
    end
    return ok, err
end


-- Ends campaign()'s q unelected (unless another campaign() took over).
function _M:_unelected(q, ...)
    if self._q == q then
        self._q = nil
        state.set(self, "idle")
    end
    return nil, ...
end


-- campaign()'s line: enter, then check the node is our session's (the
-- state "checking": through is not yet leader, whoever asks meanwhile).
function _M:_campaign(q, deadline)
    -- Our node is not ours only when the session changed between the
    -- create and the look: join again, a bounded number of times.
    for _ = 1, util.MAX_RACES do
        local ok, err = q:enter(remaining(deadline))
        if not ok then
            return self:_unelected(q, err)
        elseif self._q ~= q then
            -- resign() or another campaign() came meanwhile: not leader.
            q:leave()
            return nil, "interrupted"
        end
        state.set(self, "checking")
        local mine, oerr = util.retry(self.client, deadline, util.UNTIL_DEADLINE, self._owned,
                                      self, q)
        if self._q ~= q then
            q:leave()      -- resign() came during the check (it left q)
            return nil, "interrupted"
        elseif mine then
            return true
        end
        q:leave()
        if mine == nil then    -- could not look: closed, timeout, or a lasting error
            return self:_unelected(q, oerr)
        end
        state.set(self, "campaigning")
    end
    return self:_unelected(q, deadline and "timeout" or "invalid")
end


-- The position's on_lost: ctx = { election, position }.
local function position_lost(reason, ctx)
    ctx[1]:_lose(ctx[2], reason, false)
end


-- We lead with position q: its loss is reported (_lose), and the
-- on_elected callbacks told. A loss reported while they run (their client
-- calls run queued callbacks) is told after they return: on_lost, and a
-- rejoin that could win, never run nested inside on_elected.
function _M:_elected(q)
    self._q = q
    state.set(self, "leading")
    self._electing = q
    q:on_lost(position_lost, { self, q })
    call_all(self.client, self._elected_fns, "election on_elected")
    self:_flush_revoke(q)
end


-- Ends the on_elected phase of q: tells a loss held back meanwhile.
function _M:_flush_revoke(q)
    if self._electing ~= q then
        return
    end
    self._electing = nil
    local held = self._held_revoke
    if held then
        self._held_revoke = nil
        self:_lose(q, held[1], held[2])
    end
end


-- Reports the end of the leadership of q once: the position reports a
-- lost session or a deleted node; resign() reports "resigned". no_rejoin:
-- the caller (campaign(), resign()) answers the loss itself.
function _M:_lose(q, reason, no_rejoin)
    if self._q ~= q or self._state ~= "leading" then
        return
    elseif self._electing == q and reason ~= "resigned" then
        self._held_revoke = { reason, no_rejoin }   -- told after on_elected
        return
    end
    self._q = nil
    state.set(self, "idle")
    -- resign() answers "lost" once for a leadership that ended unasked
    self._lost = reason ~= "resigned" or nil
    if self._in_run and self._lost then
        self._run_lost = true     -- run() campaigns again (a resign in fn does not)
    end
    local client = self.client
    call_all(client, self._lost_fns, "election on_lost", reason)
    if self._lost and not no_rejoin and self.rejoin and not self._in_run
       and self._state == "idle" and not client:is_closed() then
        rejoin.start(self)
    end
end


--- Is a rejoin running (see the header: after a leadership lost unasked,
--- until we lead again, resign() or the client closes)?
---@return boolean
function _M:is_rejoining()
    check_self(self, "is_rejoining")
    return self._state == "rejoining" and not self.client:is_closed()
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
    if self._state == "leading" then
        self:_flush_revoke(self._q)   -- inside on_elected: a loss held back is told first
    end
    local st, q = self._state, self._q
    if st == "leading" then
        local was = q:is_through()     -- first: a loss found now is reported
        q:interrupt()
        self:_lose(q, was and "resigned" or "sessionexpired", true)
    elseif st == "campaigning" or st == "checking" then
        q:interrupt()                  -- the campaign() waiting in it ends too
        self:_unelected(q)
    end
    -- A rejoin (running before, or started by a loss is_through() found)
    -- ends with its node.
    q = rejoin.stop(self)
    if q then
        q:interrupt()
    end
    if self._lost then
        self._lost = nil
        return nil, self.client:is_closed() and "closed" or "lost"
    end
    return true
end


--- Are we the leader, in a live session? Asks our position too: is it
--- through in our current session, after what reached the process (the
--- clock rule, client:current_state())?
---@return boolean
function _M:is_leader()
    check_self(self, "is_leader")
    if self._state ~= "leading" then
        return false
    end
    local q = self._q
    if q:is_through() then
        return true
    end
    -- The callbacks is_through() ran may have made a new position ours (a
    -- rejoin that won): answer for it.
    local now = self._q
    return self._state == "leading" and now ~= q and now:is_through()
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
    return run.run(self, fn, timeout, ...)
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
