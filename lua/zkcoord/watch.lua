--- zkcoord.watch: a watch that re-arms itself and always reports the latest state.
--
--   local w = client:watch("/config/db", function(data, stat)
--       print(data or "(deleted)")
--   end)                                   -- fn already ran once: the state now
--   ...
--   w:cancel()
--
-- Algorithm (kazoo DataWatch/ChildrenWatch, Curator NodeCache): read the
-- node and set a ZooKeeper watch in the same request (get while the node
-- exists, exists while it is missing, children for kind "children"); a
-- watch fires once, so every event starts a new read that sets the next one.
-- One read at a time: events that arrive while reading mark it dirty and are
-- coalesced into one more read, so deliveries follow server order and the
-- last one is the latest state. fn runs only when the state changed (mzxid
-- for data, pzxid for children; kazoo's rule), and never with an older
-- zxid than it already saw.
--
-- Node layout: none of its own; watches <path> as it is.
--
-- Connection loss ("suspended"): nothing to do, the C client keeps this
-- session's watches and re-sends them on reconnect (events that happened
-- meanwhile fire then). Once connected again we read once more to be safe;
-- fn runs only if the state changed. Session loss ("lost"): every watch of
-- the old session is gone. Once the new session is connected we sync, read
-- and arm again, and fn runs with the current state even if it looks
-- unchanged (something may have happened in between that we cannot see).
--
-- All reads are asynchronous: the watch never blocks the program, except
-- new() (bounded) which waits for the first delivery, and cancel() which
-- waits (bounded, normally one round trip) for a read still in flight so
-- that the server-side watch it sets can be removed too.
local args = require "zkcoord.util.args"
local retries = require "zkcoord.util.retry"
local callbacks = require "zkcoord.util.callbacks"
local transient = require("zkcoord.errors").transient
local contract = require "zkcoord.contract"

local type, tostring = type, tostring
local setmetatable = setmetatable
local sort = table.sort
local min = math.min

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = args.self_checker(mt, "watch", "w")

local OPT_KEYS = { "kind", "timeout" }

-- A failed read is sent again at once while "connected", as many times as
-- a retry's policy allows (the reads are asynchronous: no backoff sleep
-- here); then the next state change reads.
local MAX_QUICK_RETRIES = retries.DEFAULT_POLICY.max_tries
local MAX_STALE = 5            -- older-zxid reads in a row before we give up until the next event


-- Runs fn(results of fut) once the reply is there, without waiting for it.
local function on_reply(_, fut, fn)
    fut:on_done(fn)
end


---@class zkcoord.watch_opts
---@field kind "data"|"children"|nil  what to watch (default "data")
---@field timeout number? seconds new() waits for the first delivery (default: the session timeout)

--- client:watch(path, fn, opts) -> watch. fn(data, stat) for kind "data",
--- fn(names, stat) for kind "children" (names sorted); the first argument is
--- nil while the node does not exist. fn has run once with the current
--- state when this returns.
---@param client table
---@param path string
---@param fn fun(value: string|string[]|nil, stat: table|nil)
---@param opts zkcoord.watch_opts?
---@return table|nil watch, string? err "timeout" | "closed" | a ZooKeeper code
function _M.new(client, path, fn, opts)
    if type(client) ~= "table" or type(client.send) ~= "function" then
        args.argerror(1, "watch", "a zkcoord client expected")
    end
    contract.check_path(path, "watch", 1)
    args.check_fn(fn, "watch", 2)
    opts = args.check_opts(opts, OPT_KEYS, "watch", 3)
    local kind = opts.kind or "data"
    if kind ~= "data" and kind ~= "children" then
        args.argerror(3, "watch", "kind must be \"data\" or \"children\"")
    end
    local timeout = args.check_timeout(opts.timeout, "watch", 3)
    if client:state() == "closed" then
        return nil, "closed"
    end

    local self = setmetatable({
        client = client,
        path = path,
        kind = kind,
        fn = fn,
        _cancelled = false,
        _busy = false,        -- a read chain is in flight
        _dirty = false,       -- something happened while reading: read again after
        _waiting = false,     -- a read is owed once connected
        _armed = nil,         -- session id in which our watch is known to be set
        _synced = nil,        -- session id in which we sent sync
        _inflight = nil,      -- future of the request of the chain in flight
        _retries = 0,
        _stale = 0,
        _key = nil,           -- what the last delivery showed ("none", "d<mzxid>", "c<pzxid>")
        _zxid = -1,           -- highest zxid delivered
        _force = true,        -- deliver the next state even if unchanged
        _dseq = 0,
        _delivered = false,   -- fn has run at least once
        _error = nil,
    }, mt)
    self._on_event = function(ev)
        self:_event(ev)
    end
    self._on_state = function(new)
        self:_state_change(new)
    end
    client:on_state(self._on_state)

    local first = client:waiter():event()
    self._first = first
    self:_read()
    first:wait(timeout or client:session_timeout())
    self._first = nil
    if not self._delivered then
        local err = self._error or (client:state() == "closed" and "closed") or "timeout"
        self:cancel()
        return nil, err
    end
    return self
end


--- Stops the watch: fn is never called again, the watches it set are
--- removed here and on the server. Idempotent.
---@return true
function _M:cancel()
    check_self(self, "cancel")
    if self._cancelled then
        return true
    end
    self._cancelled = true
    local client = self.client
    client:remove_listener(self._on_state)
    -- A read in flight sets its server-side watch when the server answers,
    -- and the C client only removes a watch it has registered: wait for it
    -- (one round trip; bounded) so remove_watches below catches it too.
    local f = self._inflight
    if f and not f:is_done() and client:state() == "connected" then
        f:wait(min(client:session_timeout(), 2))
    end
    self._inflight = nil
    if client:state() ~= "closed" then
        client:remove_watches(self.path, self._on_event)
    end
    self.fn = nil
    return true
end


--- Is the watch still running (not cancelled)?
function _M:is_active()
    check_self(self, "is_active")
    return not self._cancelled
end


-- ---------------------------------------------------------------------------
-- Events.

function _M:_event(ev)
    if self._cancelled or ev.type == "notwatching" then
        return
    end
    -- The watch that fired is used up (or, for "session", gone with the
    -- session): the next read must set a new one.
    self._armed = nil
    if ev.type == "session" then
        self._force = true
    end
    self:_read()
end


function _M:_state_change(new)
    if self._cancelled then
        return
    end
    if new == "lost" then
        self._armed = nil
        self._force = true
    elseif new == "connected" then
        -- After a reconnect (same session) the C client has re-sent our
        -- watches, so a plain read is enough; after a new session, _read
        -- arms again. Either way, read once to be safe.
        self._retries = 0
        self:_read()
    elseif new == "closed" then
        self._waiting = false
    end
end


-- ---------------------------------------------------------------------------
-- The read chain.

function _M:_read()
    if self._cancelled then
        return
    end
    if self._busy then
        self._dirty = true
        return
    end
    local client = self.client
    if client:state() ~= "connected" then
        self._waiting = true         -- _state_change reads once connected
        return
    end
    self._busy, self._dirty, self._waiting = true, false, false
    local sid = client:session_id()
    if self._synced ~= sid then
        -- A new session may land on a server that lags behind the one we
        -- read from before: sync first (reads of a session are served after
        -- its sync). Fire and forget: the read's reply orders after it.
        client:send("sync", self.path)
        self._synced = sid
    end
    local watch = self._armed ~= sid and self._on_event or nil
    self:_read_node(self.kind == "data" and "get" or "children", sid, watch)
end


function _M:_send(op, watch)
    local f = self.client:send(op, self.path, watch)
    self._inflight = f
    return f
end


-- One read of the node with `op` ("get" or "children"), watched when
-- `watch` is set. A missing node is watched with exists(), which fires
-- when it is created.
function _M:_read_node(op, sid, watch)
    local client = self.client
    local data = op == "get"
    on_reply(client, self:_send(op, watch), function(value, stat)
        if self._cancelled then return end
        if value ~= nil then
            if watch then self._armed = sid end
            return self:_done(value, stat)
        elseif stat ~= "nonode" then
            return self:_failed(stat)
        elseif not watch then
            return self:_done(nil, nil)
        end
        on_reply(client, self:_send("exists", watch), function(st, err)
            if self._cancelled then return end
            if st == false then
                self._armed = sid
                return self:_done(nil, nil)
            elseif not st then
                return self:_failed(err)
            end
            -- Created in between. For data the exists() watch is set on the
            -- live node now (it fires on change and delete too): read its
            -- data unwatched. Child events need a children() watch (the
            -- exists() one stays set and may fire once more).
            if data then self._armed = sid end
            on_reply(client, self:_send(op, (not data) and watch or nil), function(v, s)
                if self._cancelled then return end
                if v ~= nil then
                    if not data then self._armed = sid end
                    return self:_done(v, s)
                elseif s == "nonode" then
                    return self:_done(nil, nil)   -- and the watch fires: read again
                end
                return self:_failed(s)
            end)
        end)
    end)
end


-- A read chain ended with a state: deliver it if it is new, then go on.
function _M:_done(value, stat)
    self._busy = false
    self._inflight = nil
    self._retries = 0
    local key, zxid = "none", nil
    if value ~= nil then
        if self.kind == "data" then
            zxid = stat.mzxid
            key = "d" .. tostring(zxid)
        else
            zxid = stat.pzxid
            key = "c" .. tostring(zxid)
        end
    end
    if zxid and zxid < self._zxid then
        -- Older than what fn already saw (a lagging server): never go
        -- back in time. Sync and read again, a bounded number of times.
        self._stale = self._stale + 1
        self._synced = nil
        if self._stale <= MAX_STALE then
            self._dirty = true
        end
    else
        self._stale = 0
        if zxid then
            self._zxid = zxid
        end
        if self._force or key ~= self._key then
            self._force = false
            self._key = key
            if value ~= nil and self.kind == "children" then
                sort(value)
            end
            self:_deliver(value, stat)
        end
    end
    if self._dirty or self._waiting then
        self:_read()
    end
end


function _M:_failed(err)
    self._busy = false
    self._inflight = nil
    local client = self.client
    local st = client:state()
    if st == "closed" then
        self._error = "closed"
        return
    end
    -- Reads hold nothing in the session: after an expiry they go on in the
    -- new one; a wait that ran out ("timeout") is tried again too.
    if transient[err] or err == "sessionexpired" or err == "timeout" then
        if st == "connected" then
            self._retries = self._retries + 1
            if self._retries <= MAX_QUICK_RETRIES or self._dirty then
                return self:_read()
            end
        end
        -- Not connected (or still failing): the next state change reads.
        self._waiting = true
        return
    end
    -- noauth and the like: no point in retrying now; the next event or
    -- state change tries again.
    self._error = err
    if self._first then
        self._first:set()      -- new() reports it
        return
    end
    if client.log then
        client:log("error", "watch on " .. self.path .. ": read failed: " .. tostring(err))
    end
    if self._dirty then
        return self:_read()     -- an event came meanwhile: one more try
    end
end


-- Runs fn outside our bookkeeping (deferred), protected: a failing fn is
-- logged and cannot stop the re-arming.
function _M:_deliver(value, stat)
    self._dseq = self._dseq + 1
    local n = self._dseq
    local first = self._first
    self.client:waiter():defer(function()
        -- A newer delivery is queued behind this one: let it speak.
        if self._cancelled or n ~= self._dseq then
            return
        end
        self._delivered = true
        if first then
            first:set()
        end
        callbacks.call(self.client, self.fn, "watch on " .. self.path, value, stat)
    end)
end


_M.mt = mt
return _M
