--- zkcoord.client.lifecycle: the client's own public methods beyond the
--- operations (client methods).
--
-- Owns waiting for a connection, the state and its listeners, the log,
-- driving the pump from outside (dispatch, process, fd, spawn, run), the
-- session's id, password and timeout, the waiter, the contract accessors
-- for what builds on the client (zkcoord.contract: serial, connection,
-- current_state, is_closed, request_timeout, pump), stats, and close.
local core = require "zkcoord.core"
local _M = require "zkcoord.client.class"
local checks = require "zkcoord.client.checks"
local args = require "zkcoord.util.args"
local future = require "zkcoord.client.future"
local contract = require "zkcoord.client.contract"
local deprecated = require("zkcoord.util.deprecated").deprecated

local now = core.now
local argerror, check_timeout = args.argerror, args.check_timeout
local check_self, check_client = checks.check_self, checks.check_client
local complete = future.complete
local type, pairs, ipairs, next, error = type, pairs, ipairs, next, error
local min = math.min

local RC_CLOSING = -116

local function connected_or_closed(st)
    return st == "connected" or st == "closed"
end


--- Waits until the client is connected, at most `timeout` seconds
--- (default the request timeout).
---@return true|nil ok, string? err "timeout" | "closed"
function _M:wait_connected(timeout)
    check_self(self, "wait_connected")
    check_timeout(timeout, "wait_connected", 1)
    if contract.wait_state(self, connected_or_closed, timeout) and self._state == "connected" then
        return true
    end
    return nil, self._closed and "closed" or "timeout"
end


local LOG_LEVELS = { error = true, warn = true, info = true, debug = true }

--- Writes through the client's logger ("error", "warn", "info", "debug").
function _M:log(level, msg)
    check_self(self, "log")
    if not LOG_LEVELS[level] then
        argerror(1, "log", "level must be 'error', 'warn', 'info' or 'debug'")
    end
    if type(msg) ~= "string" then
        argerror(2, "log", "message must be a string, got " .. type(msg))
    end
    self._log(level, msg)
end


--- The state now: what has already reached the process is taken first
--- (without blocking), and a session not heard from for its timeout is
--- lost (the clock rule, README "Sessions").
---@return string state "connecting" | "connected" | "suspended" | "lost" | "closed"
function _M:state()
    check_self(self, "state")
    self:_catch_up()
    return self._state
end


--- Calls fn(new_state, old_state) on every transition. Returns fn, which
--- `remove_listener` takes.
function _M:on_state(fn)
    check_self(self, "on_state")
    return args.add_fn(self._listeners, fn, "on_state")
end


--- Removes a function `on_state` added. Returns true if it was there.
function _M:remove_listener(fn)
    check_self(self, "remove_listener")
    args.check_fn(fn, "remove_listener")
    for i, f in ipairs(self._listeners) do
        if f == fn then
            table.remove(self._listeners, i)
            return true
        end
    end
    return false
end


-- One turn of the pump from the client's side (dispatch, process, close):
-- callbacks run here only for a waiter that runs them inline (blocking);
-- the nginx waiter runs them in a timer of its own.
function _M:_turn()
    self._pump:step()
    if self._waiter.inline_callbacks then
        self._pump:run_callbacks()
    end
end


--- Waits up to `timeout` seconds for events and runs their callbacks.
--- Returns true if the client is still open.
function _M:dispatch(timeout)
    check_self(self, "dispatch")
    check_timeout(timeout, "dispatch", 1)
    if self._closed then
        return nil, "closed"
    end
    self._waiter:sleep(timeout or 0)
    self:_turn()
    return true
end


--- Starts fn(...) in a coroutine of its own: a wait inside it (any client
--- call or recipe) lets the other spawned coroutines run instead of blocking
--- the thread. Drive them with client:run(). In nginx: ngx.thread.spawn.
function _M:spawn(fn, ...)
    check_self(self, "spawn")
    args.check_fn(fn, "spawn")
    if type(fn) ~= "function" then
        -- a coroutine's (or light thread's) body must be a function
        local callable = fn
        fn = function(...) return callable(...) end
    end
    local w = self._waiter
    if not w.spawn then
        error("this client's waiter cannot spawn coroutines", 2)
    end
    return w:spawn(fn, ...)
end


--- Runs the spawned coroutines until all finished, at most `timeout`
--- seconds. Returns true when all finished, false on timeout.
function _M:run(timeout)
    check_self(self, "run")
    check_timeout(timeout, "run", 1)
    return self._waiter:run(timeout)
end


--- For custom event loops: the fd that turns readable when events arrive
--- (an eventfd). Call client:process() when it does.
function _M:fd()
    check_self(self, "fd")
    return self._pump:fd()
end


--- Handles whatever has arrived, without waiting.
function _M:process()
    check_self(self, "process")
    self._pump:clear_fd()
    self:_turn()
end


---@return string|nil session id (16 hex digits) of the current session
function _M:session_id()
    check_self(self, "session_id")
    return self._session_id
end


--- The password of the current session (binary, 16 bytes): with
--- session_id it lets another handle resume the session (tests use it to
--- expire sessions).
function _M:session_password()
    check_self(self, "session_password")
    if self._s and self._session_id then
        local _, pw = self._s:client_id()
        return pw
    end
    return nil
end


--- The session timeout the server granted, in seconds.
function _M:session_timeout()
    check_self(self, "session_timeout")
    return self._negotiated_timeout or self._opts.session_timeout
end


-- ---------------------------------------------------------------------------
-- The contract with what builds on the client (recipes, the waiting-line
-- engine, waiters), beyond the operations: the accessors below and
-- `read_until`, `wait_state`, `wait_once`, `own_node`, `disown_node`, all
-- called as zkcoord.contract's functions (contract.serial(client)), and
-- `future:on_late`. Nothing outside zkcoord/client/ reads or writes a
-- client's `_` fields.

--- The waiter the client waits through (zkcoord.wait.*).
function _M:waiter()
    check_self(self, "waiter")
    return self._waiter
end


-- The pump a waiter drives (zkcoord.client.pump): drain, wait, kick,
-- check_timers, run_callbacks, enqueue_callback, fd.
function contract.pump(self)
    check_client(self, "contract.pump")
    return self._pump
end


-- Serial number of the current session: it grows by one each time a new
-- session replaces a lost one, so a recipe can tell whether a node it
-- created belongs to the session that is live now.
-- @return integer
function contract.serial(self)
    return self._serial
end


-- Contract, for recipes: how many times this client has connected (a
-- new connection, in the same session or a new one). Watch events of one
-- connection arrive in the order of the changes; across a reconnection
-- they may not (zkcoord.line.walk's proof needs one connection).
-- @return integer
function contract.connection(self)
    return self._connections
end


-- The state for a state answer (`held()`, `is_leader()` ...): like
-- `state()`, and with a waiter that runs callbacks inline (blocking) the
-- callbacks already queued run first, so that what reached the process
-- (a deleted node, an ended session) has been told (on_lost) before the
-- answer. Never blocks.
-- @return string state
function contract.current_state(self)
    check_client(self, "contract.current_state")
    self:_catch_up(true)
    return self._state
end


-- True once `close()` was called.
-- @return boolean
function contract.is_closed(self)
    return self._closed
end


-- The bound in seconds of one synchronous operation (`request_timeout`).
-- @return number
function contract.request_timeout(self)
    return self._request_timeout
end


-- Deprecated: `client:current_state()`, `client:is_closed()` and
-- `client:request_timeout()` were on the reference's client page before
-- they moved to zkcoord.contract; they keep working for this release and
-- say so once.
for _, name in ipairs({ "current_state", "is_closed", "request_timeout" }) do
    local fn = contract[name]
    _M[name] = function(self)
        check_self(self, name)
        deprecated(self, "client:" .. name .. "()", "zkcoord.contract." .. name .. "(client)")
        return fn(self)
    end
end


--- What the client holds now, for leak checks and monitoring: `pending`
--- (requests waiting for a reply), `watches`, `listeners` (on_state),
--- `callbacks` (queued to run), `serial` (the current session's number), `state`,
--- `handshakes_dropped` (attempts the handshake watchdog made again, this session),
--- `requests` (operation name -> requests sent over the client's life: what a
--- recipe costs the server, e.g. `requests.children`, the listings).
function _M:stats()
    check_self(self, "stats")
    local np, nw = 0, 0
    for _ in pairs(self._pending) do np = np + 1 end
    for _ in pairs(self._watches) do nw = nw + 1 end
    local sent = {}
    for op, n in pairs(self._sent) do sent[op] = n end
    return { pending = np, watches = nw, listeners = #self._listeners, requests = sent,
             callbacks = self._pump:queued_callbacks(),
             serial = self._serial, state = self._state,
             -- connection attempts the handshake watchdog dropped (this session's handle)
             handshakes_dropped = self._s and self._s:reconnects() or 0 }
end


--- This client's metrics registry (zkcoord.metrics: `metrics.prometheus(client)`
--- makes the text; the registry's `samples(client)` the plain tables).
function _M:metrics()
    check_self(self, "metrics")
    return self._metrics
end


-- Blocks (at most `timeout` seconds) until no request waits for a reply.
-- For close(), which blocks anyway, and exit paths that cannot yield.
function _M:_quiesce(timeout)
    local deadline = now() + timeout
    while next(self._pending) ~= nil do
        local left = deadline - now()
        if left <= 0 then
            return false
        end
        self._pump:wait(min(left, 0.05))
        self._pump:drain()
    end
    return true
end


--- Closes the session (its ephemeral nodes go at once). Idempotent.
function _M:close()
    check_self(self, "close")
    if self._closed then
        return true
    end
    self._closed = true
    local s = self._s
    self._s = nil
    local left_sid, left_password    -- a session no server was there to close
    if s then
        if self._state == "connected" then
            -- libzookeeper sends no close request while its IO thread is
            -- handling replies: the session (and its ephemeral nodes) would
            -- outlive us by the session timeout. Let the replies in first.
            self:_quiesce(min(self._request_timeout, 2))
        elseif self._session_id then
            left_sid = self._session_id
            left_password = select(2, s:client_id())
        end
        s:close()    -- blocks until the close request is sent; fails what is in flight
    end
    self:_hand_over_sessions(left_sid, left_password)
    self._pump:drain()
    for id, p in pairs(self._pending) do
        self._pending[id] = nil
        if not p.done then
            complete(p, RC_CLOSING, nil, nil, nil, self._waiter)
        end
    end
    self._watches = {}
    self:_set_state("closed")
    self:_tell_owners_closed()     -- holders' on_lost("closed"), before close() returns
    self._pump:close_doorbell()
    if self._waiter.on_close then
        self._waiter:on_close()
    end
    if self._waiter.inline_callbacks then
        self._pump:run_callbacks()
    end
    contract.live[self] = nil
    return true
end
contract.mt.__close = _M.close


return {}
