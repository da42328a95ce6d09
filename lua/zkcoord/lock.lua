--- zkcoord.lock: a fair, herd-free, reentrant distributed lock.
--
--   local lock = client:lock("/locks/job")
--   local ok, err = lock:acquire(5)      -- nil: wait forever, 0: try once
--   if ok then ... lock:release() end
--
-- Algorithm (ZooKeeper's lock recipe, a driver on zkcoord.line): each
-- contender creates an ephemeral-sequential node; the lowest holds the
-- lock; every other watches only the node just below its own, so a release
-- wakes one contender, never the herd. Grants follow arrival order.
--
-- Node layout: <path>/_c_<uuid>-lock-<seq>, Curator's InterProcessMutex
-- names, so a Java service locking the same path with Curator is excluded
-- too (both sort by the number after the last "lock-"). Children of <path>
-- without that shape are ignored. opts.layout = "kazoo" names them as
-- kazoo's Lock does instead (zkcoord.layout.kazoo): <uuid hex>__lock__<seq>,
-- so a Python service locking the same path with kazoo is excluded.
--
-- Owners: the lock is reentrant per owner. The owner is opts.owner if
-- given; else, inside nginx, the request (its ngx.ctx: acquire in access,
-- release in log works, and two requests are two owners); else the running
-- coroutine. Each owner has its own node.
--
-- Fencing: token() is the czxid of the owner's node. It grows with every
-- grant of this lock, so a resource that refuses a token lower than the
-- last one it saw refuses a holder whose lock was lost meanwhile.
--
-- Revocation (Curator's protocol, so Curator's Revoker and ours revoke each
-- other's holders): anyone asks a holder to give the lock up by writing
-- "__REVOKE__" into its node (zkcoord.lock.revoke(client, node)); a holder
-- that registered lock:on_revoke(fn) watches its node's data and fn runs
-- (zkcoord.revocation). Releasing is the holder's decision.
--
-- Connection loss ("suspended"): the lock stays held; the session may
-- still be alive. Session loss ("lost", or suspended for longer than the
-- session timeout), or our node deleted by someone else: held() turns false
-- at once and on_lost callbacks run. Act on it: another process may hold
-- the lock now.
--
-- Driver (Curator's InterProcessMutex takes a LockInternalsDriver the same
-- way): lock.new(client, path, opts, driver, pick) makes a lock over another
-- line. `driver` is a zkcoord.line driver (default: marker "lock-", rule
-- rules.first); contenders() lists with it. `pick`, optional, is a hook
-- function(lock) -> driver|nil that runs in acquire() when an owner joins
-- the line (not on a reentrant acquire), before any request: it may raise
-- to refuse (error(msg, 3) blames the caller of acquire), or return the
-- driver this owner's node is made with (nil: `driver`). rwlock's sides
-- are two such locks.
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"
local util = require "zkcoord.util"
local cohort = require "zkcoord.cohort"
local kazoo = require "zkcoord.layout.kazoo"
local contract = require "zkcoord.contract"
local revocation = require "zkcoord.revocation"

local type, pairs, setmetatable = type, pairs, setmetatable
local tostring = tostring
local argerror = util.argerror
local now = require("zkcoord.core").now
local count_lost    -- metrics: a hold's loss, counted once

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }

local MAIN = {}   -- owner key of the main coroutine (LuaJIT returns nil there)

local OPT_KEYS = { "owner", "data", "reentrant", "cohort", "cohort_handoffs", "cohort_time",
                   "layout" }

-- The lock's driver by opts.layout.
local LOCKS = { curator = line.driver { marker = "lock-", rule = rules.first },
                kazoo = kazoo.lock }
local WEAK_KEYS = { __mode = "k" }


local check_self = util.self_checker(mt, "lock", "lock")


---@class zkcoord.lock_opts
---@field owner any?        fixed owner token (default: the nginx request, else the running coroutine)
---@field data string?      data of our lock node (who holds it, for humans; default "<hostname>:<pid>")
---@field reentrant boolean? default true; false makes a second acquire by the owner fail with "invalid"
---@field cohort boolean? default false; true: this process's owners share one node (zkcoord.cohort)
---@field cohort_handoffs integer? local handoffs per node while a remote waiter is in line (16)
---@field cohort_time number? seconds a node is passed on locally while a remote waiter is in line (0.01)
---@field layout "curator"|"kazoo"|nil node names: Curator's InterProcessMutex (default) or kazoo's Lock

--- client:lock(path, opts) -> lock object (no server state until acquire).
---@param client table
---@param path string the lock's node
---@param opts zkcoord.lock_opts?
---@param driver table? the line's driver (see the header)
---@param pick function? pick(lock) -> driver|nil, before an owner joins (see the header)
function _M.new(client, path, opts, driver, pick)
    opts = util.check_opts(opts, OPT_KEYS, "lock", 2)
    contract.check_path(path, "lock", 1)
    if opts.data ~= nil and type(opts.data) ~= "string" then
        argerror(2, "lock", "data must be a string")
    end
    if opts.reentrant ~= nil and type(opts.reentrant) ~= "boolean" then
        argerror(2, "lock", "reentrant must be a boolean")   -- "no" was taken for true
    end
    local layout = util.check_layout(opts.layout, "lock", 2)
    driver = driver or LOCKS[layout]
    if not line.is_driver(driver) then
        argerror(4, "lock", "driver must be a zkcoord.line driver")
    end
    if pick ~= nil and type(pick) ~= "function" then
        argerror(5, "lock", "pick must be a function or nil")
    end
    if opts.data == nil then
        -- who holds it, for `zkcoord locks` (as the command's nodes); a
        -- copy: the caller's table stays as it was
        local copy = {}
        for k, v in pairs(opts) do copy[k] = v end
        copy.data = util.default_id()
        opts = copy
    end
    cohort.check_opts(opts, "lock")
    return setmetatable({
        client = client,
        path = path,
        _opts = opts,
        _driver = driver,
        _pick = pick,
        -- function(client, path, driver, opts) -> a position for one
        -- acquire: a line position, or with cohort = true a cohort seat
        _positions = cohort.positions(opts, driver),
        -- owner -> { q = position, count = n }; weak: an owner that
        -- is gone (an ended request) cannot release, its node goes anyway.
        -- A lost hold stays until its owner's next release (which answers
        -- "lost") or acquire (which replaces it).
        _holds = setmetatable({}, WEAK_KEYS),
        _lost_fns = {},
        _revoke_fns = {},
        _metrics = client:metrics(),     -- zkcoord.metrics: grants, waits, holds, losses
    }, mt)
end


function _M:_owner()
    local o = self._opts.owner
    if o ~= nil then
        return o
    end
    local w = self.client:waiter()
    if w.owner then
        o = w.owner()
        if o ~= nil then
            return o
        end
    end
    return util.running() or MAIN    -- util: inside run()'s fn on Lua 5.1 too
end


-- The owner's hold while it is through; nil for none or a lost one.
local function live_hold(self, owner)
    local h = self._holds[owner]
    if h and not h.q:is_through() then
        return nil
    end
    return h
end


-- Metrics (zkcoord.metrics): an acquire's end, and a loss counted once.
local function count_acquire(self, t0, ok, err)
    self._metrics:lock_acquire(self.path, ok and "ok" or tostring(err), now() - t0)
end

count_lost = function(h, reason)
    if not h.counted_lost then
        h.counted_lost = true
        h.lock._metrics:lock_lost(h.lock.path, reason)  -- same class
    end
end


-- The position of hold `h` was lost (static: no closure per acquire). The
-- hold stays in _holds: the owner's next release() answers "lost".
local function hold_lost(reason, h)
    local self = h.lock
    count_lost(h, reason)
    util.call_all(self.client, self._lost_fns, "lock on_lost", reason, h.owner)
end


-- A revocation request for hold `h` (its node's data is REVOKE): tell
-- (static: zkcoord.revocation calls it with the hold).
local function revoke_requested(h)
    local self = h.lock
    if self._holds[h.owner] ~= h or h.revoked then
        return
    end
    h.revoked = true
    util.call_all(self.client, self._revoke_fns, "lock on_revoke", h.owner, h.q:node())
end

-- Watches hold `h`'s node for revocation requests (zkcoord.revocation:
-- no round trip added to acquire; the node's delete ends the watch), only
-- while someone listens, as on_lost is. A position that watches them
-- itself (a cohort seat: one watch per node for all its holders) is asked
-- to tell instead.
local function watch_revoke(h)
    local q = h.q
    if q.on_revoke then
        return q:on_revoke(revoke_requested, h)
    end
    local node = q:node()
    if node then
        revocation.watch(h.lock.client, node, revoke_requested, h)
    end
end


--- Acquires the lock for the current owner.
---@param timeout number? seconds; nil waits as long as it takes, 0 tries once
---@return true|nil ok, string? err "timeout" | "closed" | "invalid" | a ZooKeeper code
function _M:acquire(timeout)
    check_self(self, "acquire")
    util.check_timeout(timeout, "acquire", 1)
    local owner = self:_owner()
    local h = live_hold(self, owner)
    if h then
        if self._opts.reentrant == false then
            return nil, "invalid", "already held by this owner (lock is not reentrant)"
        end
        h.count = h.count + 1
        return true
    end
    local t0 = now()
    local d, pick = self._driver, self._pick
    if pick then
        d = pick(self) or d    -- may raise: error(msg, 3) blames our caller
    end
    local q = self._positions(self.client, self.path, d, self._opts)
    h = { q = q, count = 1, lock = self, owner = owner }
    if #self._lost_fns > 0 then
        h.watched = true
        -- Only then is the node watched (one request per grant): held()
        -- notices a lost session by itself, a deleted node needs the watch.
        q:on_lost(hold_lost, h)
    end
    local ok, err = q:enter(timeout)
    count_acquire(self, t0, ok, err)
    if not ok then
        return nil, err
    end
    h.held_since = now()
    if not h.watched and #self._lost_fns > 0 then
        h.watched = true     -- on_lost was registered while we waited
        q:on_lost(hold_lost, h)
    end
    self._holds[owner] = h
    if #self._revoke_fns > 0 then
        h.revoke_watched = true
        watch_revoke(h)
    end
    return true
end


--- Releases one acquire of the current owner; the last one deletes the
--- node (without waiting: the delete is ordered before this session's next
--- request and retried until done). After a loss (session ended, node
--- deleted) the owner's first release returns nil, "lost", whether or not
--- on_lost callbacks are registered, and forgets the hold: a further
--- release returns nil, "notheld". After client:close(), nil, "closed"
--- instead of "lost" (on_lost has heard "closed").
---@return true|nil ok, string? err "notheld" | "lost" | "closed"
function _M:release()
    check_self(self, "release")
    local owner = self:_owner()
    local h = self._holds[owner]
    if not h then
        return nil, "notheld"
    end
    if not h.q:is_through() then
        self._holds[owner] = nil
        count_lost(h, "lost")
        h.q:leave()    -- nothing for a lost line position; a cohort learns it too
        return nil, contract.is_closed(self.client) and "closed" or "lost"
    end
    h.count = h.count - 1
    if h.count > 0 then
        return true
    end
    self._holds[owner] = nil
    self._metrics:lock_hold(self.path, now() - h.held_since)
    h.q:leave()    -- a cohort seat: to the next local owner, or the node goes
    return true
end


--- Runs fn(...) holding the lock: acquire(timeout), then fn protected,
--- then release, whatever fn did. Returns fn's results; nil, err when the
--- acquire failed ("timeout" ...) or the hold was lost while fn ran
--- ("lost": fn ran, but another process may have held the lock meanwhile).
--- An error in fn is raised again after the release, with its traceback.
--- Inside fn, held() and token() answer for the hold (same owner).
---@param fn function
---@param timeout number? as acquire's
---@return any ... fn's results, or nil, err
function _M:run(fn, timeout, ...)
    check_self(self, "run")
    return util.acquire_run(self, self.release, false, fn, timeout, ...)
end


--- Is the lock held by the current owner, in a live session?
function _M:held()
    check_self(self, "held")
    return live_hold(self, self:_owner()) ~= nil
end


--- The fencing token of the current owner's grant (the node's czxid); with
--- `cohort`, a second value n, the grant's number within the node: compare
--- (czxid, n) pairs (zkcoord.cohort's header).
---@return number|nil token, string|integer|nil err_or_n
function _M:token()
    check_self(self, "token")
    local h = self._holds[self:_owner()]
    if not h then
        return nil, "notheld"
    end
    return h.q:token()    -- nil, "notheld" once it is not through (one check)
end


--- The path of the current owner's lock node.
function _M:node()
    check_self(self, "node")
    local h = live_hold(self, self:_owner())
    return h and h.q:node()
end


--- How many times the current owner holds it (reentrancy depth).
function _M:count()
    check_self(self, "count")
    local h = live_hold(self, self:_owner())
    return h and h.count or 0
end


--- fn(reason, owner) runs when a held lock is lost: reason "sessionexpired",
--- "deleted" or "closed" (client:close(), in it). held() is already false then.
function _M:on_lost(fn)
    check_self(self, "on_lost")
    util.add_fn(self._lost_fns, fn, "on_lost")
    -- Holds granted before: watch their nodes from now on.
    for _, h in pairs(self._holds) do
        if not h.watched then
            h.watched = true
            h.q:on_lost(hold_lost, h)
        end
    end
    return fn
end


--- fn(owner, node) runs when someone asks the holder `owner` to give the
--- lock up (zkcoord.lock.revoke, or Curator's Revoker, wrote "__REVOKE__"
--- into its node). Releasing is up to the holder: the release must come
--- from the owner (opts.owner lets any coroutine release). Register it
--- before acquire: the node's data is watched only while someone listens.
function _M:on_revoke(fn)
    check_self(self, "on_revoke")
    util.add_fn(self._revoke_fns, fn, "on_revoke")
    for _, h in pairs(self._holds) do
        if not h.revoke_watched then
            h.revoke_watched = true
            watch_revoke(h)
        end
    end
    return fn
end


--- Asks the holder of lock node `node` to give it up (Curator's protocol:
--- "__REVOKE__" is written into the node). Works on Curator's and
--- zkcoord's lock and rwlock nodes whose holder listens for it.
---@return true|nil ok, string? err "nonode" (no such holder) | a code
function _M.revoke(client, node)
    return revocation.request(client, node, "revoke")
end


--- The participants (held first, then waiters in order).
---@return table[]|nil entries { name =, path =, seq = }, string? err
function _M:contenders()
    check_self(self, "contenders")
    return line.new(self.client, self.path, self._driver):entries()
end


_M.mt = mt
return _M
