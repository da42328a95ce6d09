--- zkcoord.revocation: hears a request to give up a node we hold
--- (Curator's protocol: "__REVOKE__" written into the node), for the lock
--- and the cohort: revocation lives here only.
--
--   local revocation = require "zkcoord.revocation"
--   local w = revocation.watch(client, node, fn, arg)  -- fn(arg, node), once
--   w:requested()                     -- true once a request was seen (fn ran)
--   w:stop()                          -- no fn after it; its watch is removed
--   revocation.request(client, node)  -- asks the holder: true | nil, err
--
-- Watching: one get with a watch on the node, from its holder only (no
-- herd), sent without waiting (no round trip added to an acquire). fn runs
-- once, protected (util.callbacks.call), when a reply shows the request;
-- the watcher is done then: a holder asked stays asked. A data change
-- reads again (a watch fires once). A get that failed on a connection loss
-- (sent while suspended, or in flight when the link dropped: the server set
-- no watch) is sent again once "connected" in the same session; a watch
-- already set is kept by the C client across a reconnection (events
-- meanwhile fire then). A get that failed while connected (a transient
-- code) is sent again at once, at most DEFAULT_POLICY.max_tries times, then
-- at the next "connected". The watcher ends, with no fn, when the node is
-- deleted (its delete fires the watch: a holder that deletes its node need
-- not stop), when the session it started in ends or the client closes (the
-- holder lost the node), on stop(), or on another error (logged). Nothing
-- is left behind: no state listener outside a wait for "connected", and
-- stop() removes the watch (a request only while one is set).
--
-- The cohort watches its node with one watcher for all its holders
-- (fn = its own function telling the holders of the time; requested()
-- for a holder that comes after the request).
local errors = require "zkcoord.errors"
local contract = require "zkcoord.contract"
local args = require "zkcoord.util.args"
local retries = require "zkcoord.util.retry"
local callbacks = require "zkcoord.util.callbacks"

local getmetatable, setmetatable, type, tostring = getmetatable, setmetatable, type, tostring
local transient = errors.transient

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = args.self_checker(mt, "revocation watcher", "w")

--- The request (Curator's LockInternals.REVOKE_MESSAGE).
_M.REVOKE = "__REVOKE__"
local REVOKE = _M.REVOKE

-- Gets sent again at once after a transient failure while connected.
local MAX_QUICK = retries.DEFAULT_POLICY.max_tries


local function check_client(client, what)
    if getmetatable(client) ~= contract.mt then
        args.argerror(1, what, "zkcoord client expected, got " .. type(client))
    end
end


--- Asks the holder of `node` to give it up: writes the request into it
--- (any version). Works on Curator's and zkcoord's lock and rwlock nodes
--- whose holder listens. `what` names the caller in argument errors.
---@return true|nil ok, string? err "nonode" (no such holder) | a code
function _M.request(client, node, what)
    what = what or "revocation.request"
    check_client(client, what)
    contract.check_path(node, what, 2)
    local stat, err = client:set(node, REVOKE)
    if not stat then
        return nil, err
    end
    return true
end


-- Ends the watcher: no fn from now on, no listener left.
local function finish(self)
    self._done = true
    local l = self._listener
    if l then
        self._listener = nil
        self.client:remove_listener(l)
    end
end


local arm

-- The reply of a get: the request, a watch set, or why none is.
local function replied(self, data, err)
    if self._done then
        return
    end
    if data == REVOKE then
        self._requested = true
        finish(self)
        callbacks.call(self.client, self.fn, "revocation", self.arg, self.node)
        return
    elseif data ~= nil then
        self._tries = 0    -- the watch is set
        return
    end
    local client = self.client
    if err == "nonode" or err == "sessionexpired" or err == "closed"
            or contract.serial(client) ~= self._serial then
        return finish(self)    -- gone, with the node or the session it was held in
    elseif not transient[err] then
        client:log("warn", ("revocation: no watch on %s (%s): requests go unheard")
                           :format(self.node, tostring(err)))
        return finish(self)
    end
    self._tries = self._tries + 1
    if self._tries < MAX_QUICK and client:state() == "connected" then
        return arm(self)
    end
    -- Once connected again (a transition: the C client keeps nothing of
    -- a get that failed).
    if not self._listener then
        self._listener = function(new)
            if self._done then
                return
            elseif new == "connected" then
                client:remove_listener(self._listener)
                self._listener, self._tries = nil, 0
                arm(self)
            elseif new == "lost" or new == "closed" then
                finish(self)
            end
        end
        client:on_state(self._listener)
    end
end


-- Made outside any waiting frame (in nginx a waiting coroutine may be gone
-- when the reply comes).
local function on_reply(self)
    return function(data, err)
        replied(self, data, err)
    end
end


-- Reads the node's data with our watch, without waiting.
arm = function(self)
    local client = self.client
    if contract.is_closed(client) or contract.serial(client) ~= self._serial then
        return finish(self)
    end
    client:send("get", self.node, self._on_event):on_done(on_reply(self))
end


-- The watch fired: a change reads again; a delete, the session's end or a
-- removed watch end the watcher.
local function fired(self, ev)
    if self._done then
        return
    elseif ev.type == "changed" then
        arm(self)
    else
        finish(self)
    end
end


--- Watches `node` (ours, in the client's current session) for a request:
--- fn(arg, node) runs once when one is seen. Sends one get now, without
--- waiting.
---@param client table
---@param node string the node's full path
---@param fn function fn(arg, node)
---@param arg any passed to fn first
---@return table watcher w (w:requested(), w:stop())
function _M.watch(client, node, fn, arg)
    check_client(client, "revocation.watch")
    contract.check_path(node, "revocation.watch", 2)
    args.check_fn(fn, "revocation.watch", 3)
    local self = setmetatable({
        client = client,
        node = node,
        fn = fn,
        arg = arg,
        _serial = contract.serial(client),   -- the session the node is held in
        _done = false,
        _requested = false,
        _tries = 0,          -- transient failures in a row while connected
        _listener = nil,     -- while waiting for "connected"
        _on_event = nil,     -- our watch function (stop() removes the watch by it)
    }, mt)
    self._on_event = function(ev)
        fired(self, ev)
    end
    arm(self)
    return self
end


--- Was a request seen (fn has run)?
function _M:requested()
    check_self(self, "requested")
    return self._requested
end


--- Stops: fn is never called from now on; the watch is removed (fire and
--- forget), here and on the server. Idempotent.
function _M:stop()
    check_self(self, "stop")
    finish(self)
    local client = self.client
    if not contract.is_closed(client) then
        client:remove_watches(self.node, self._on_event)
    end
    return true
end


_M.mt = mt
return _M
