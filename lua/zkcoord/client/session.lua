--- zkcoord.client.session: the session state machine (client methods).
--
-- Owns what the records from the C queue do to the client (a reply
-- completes its pending request, a watch event goes to its callback, a
-- session event moves the state), the states and their listeners
-- ("connecting", "connected", "suspended", "lost", "closed"), the timer
-- that counts a suspended session as lost, and what a lost session takes
-- along (its watches; a new session opens). Returns the hooks the pump
-- calls.
local core = require "zkcoord.core"
local _M = require "zkcoord.client.class"
local future = require "zkcoord.client.future"
local errname = require("zkcoord.errors").name
local contract = require "zkcoord.client.contract"

local C = core.c
local now = core.now
local complete = future.complete
local pairs, ipairs, tostring = pairs, ipairs, tostring

local REPLY, WATCH, SESSION = C.REPLY, C.WATCH, C.SESSION
local RC_OK, RC_NONODE = 0, -101

local EVENT_NAMES = {
    [C.CREATED_EVENT] = "created", [C.DELETED_EVENT] = "deleted",
    [C.CHANGED_EVENT] = "changed", [C.CHILD_EVENT] = "child",
    [C.NOTWATCHING_EVENT] = "notwatching",
}


-- One record from the queue (the pump's reused table: read it here, keep
-- none of it but its values).
function _M:_on_record(rec)
    local kind, id = rec.kind, rec.id
    if kind == REPLY then
        local pending = self._pending
        local p = pending[id]
        if p then
            pending[id] = nil
            local rc = rec.rc
            if p.watch and rc ~= RC_OK and not (p.watch == "exists" and rc == RC_NONODE) then
                -- ZooKeeper set no watch: forget it.
                self._watches[id] = nil
            end
            self._metrics:request(p.op, rc == RC_OK and "ok" or errname(rc), now() - p.sent, p.path)
            complete(p, rc, rec.value, rec.stat, rec.extra, self._waiter)
        end
    elseif kind == WATCH then
        local w = self._watches[id]
        if w then
            self._watches[id] = nil
            local t = rec.type
            self._waiter:defer(w.fn, { type = EVENT_NAMES[t] or tostring(t),
                                       path = w.path, state = self._state }, w.arg)
        end
    elseif kind == SESSION then
        if id == self._serial then
            self:_session_event(rec.state)
        elseif id < 0 then
            self:_ender_event(id, rec.state)     -- a side handle ending a left session
        end
    end
end


function _M:_lost_after()
    local t = self._negotiated_timeout or self._opts.session_timeout
    local la = self._opts.lost_after
    return la and la < t and la or t
end


-- The clock rule (issue 21): the server expires a session `timeout` after
-- it last heard from us. The core stamps when that was at the latest (the
-- send time of the newest request the server answered, s:last_heard()) and
-- keeps it fresh with a heartbeat every HEARTBEAT of the timeout while
-- idle. Past `last heard + timeout`, the session counts as lost whatever
-- libzookeeper says: a stopped process stops its threads too, so only a
-- clock knows. MARGIN covers the two monotonic clocks' rates (NTP slews
-- each by at most 500 ppm). The server's expiry also rounds up to its tick,
-- so the rule errs on the safe side.
--
-- How far on the safe side is the heartbeat's choice (issue 28): when an
-- outage begins, "last heard" is up to one period (and a round trip) old,
-- and the client must be connected again before the rest of the timeout
-- runs out. An outage of SURVIVE of the timeout leaves 1 - SURVIVE: half
-- of it for the stamp's age, half for reconnecting (libzookeeper's retry,
-- the handshake; 77-258 ms measured on loopback). With a third, as before,
-- an outage of 70 % lost sessions the server kept.
local SURVIVE = 0.8
local HEARTBEAT = (1 - SURVIVE) / 2      -- a tenth: one small read while idle
local MARGIN = 0.001

-- The monotonic time until which the session is known to be alive, for a
-- session that has been connected (nil otherwise), and the timeout used.
function _M:_alive_until()
    local st, s, t = self._state, self._s, self._negotiated_timeout
    if not s or not t or (st ~= "connected" and st ~= "suspended") then
        return nil
    end
    return s:last_heard() + t * (1 - MARGIN), t
end


-- A link gone silent (black-holed, its server stopped) is noticed by
-- libzookeeper only once nothing came for 2/3 of the session timeout;
-- link_silent() says sooner that it may be (issue 28; a hint, which
-- try-onces no longer act on: contract.wait_once). The link counts as
-- silent once a request has waited for its answer longer than a few round
-- trips:
-- TCP's retransmission timeout (RFC 6298: the smoothed round trip and four
-- deviations, of the server's answers, src/heartbeat.c) with the round
-- trip counted twice (on a steady slow link the deviation tends to 0, and
-- a reply queued behind another's is late by a fraction of one), at least
-- SILENT_MIN (Linux's minimum RTO: below it, a busy machine's scheduling
-- looks like loss).
local SILENT_MIN = 0.2

-- Seconds until the link counts as silent (0: silent now), or nil when
-- not connected.
function _M:_try_wait()
    local s = self._s
    if not s or self._state ~= "connected" then
        return nil
    end
    local since, srtt, rttvar = s:link()
    local limit = 2 * srtt + 4 * rttvar
    if limit < SILENT_MIN then
        limit = SILENT_MIN
    end
    if not since then
        return limit
    end
    local left = since + limit - now()
    return left > 0 and left or 0
end


--- True when the session is connected but the link left a request
--- unanswered for longer than a few round trips: a hint that it may be
--- gone (ask state() first, which takes in what reached the process). Not
--- a verdict: a slow server or a busy machine looks the same for a while,
--- so try-onces do not act on it (contract.wait_once).
---@return boolean
function _M:link_silent()
    return self:_try_wait() == 0
end


-- Contract, for try-onces: the results of `fut`, waited for while the
-- connection lives, at most the request timeout; nil, "connectionloss" if
-- no reply came by then. "Once" means not waiting for others, not giving
-- up on a live connection's slow reply (Curator's and kazoo's try-once wait
-- for it too): a link silent for a few round trips (link_silent) is not a
-- lost one (TCP retransmits after one RTO, it does not give up), and at
-- load 30 a server's reply can be 0.2 s late. A silent link ends the wait
-- when libzookeeper gives the connection up (2/3 of the session timeout),
-- or the clock rule the session.
function contract.wait_once(self, fut)
    local a, b, c = fut:wait(self._request_timeout)
    if a == nil and b == "timeout" and not self._closed then
        return nil, "connectionloss"
    end
    return a, b, c
end


-- When the session counts as lost at the latest (monotonic), or nil: the
-- clock rule, and for a suspended session lost_after.
function _M:_lost_at()
    local due = self:_alive_until()
    if due and self._state == "suspended" and self._suspended_at then
        local d = self._suspended_at + self:_lost_after()
        if d < due then
            due = d
        end
    end
    return due
end


--- How long a waiter may sleep: at most `left`, and no longer than the next
--- session timer (the clock rule, or the loss of a suspended session).
function _M:_timer_cap(left)
    local due = self:_lost_at()
    if due then
        due = due - now()
        return due < left and (due > 0.001 and due or 0.001) or left
    end
    return left
end


-- A loss our own clock declares: the server may still hold the session (a
-- restarted server restores it for a session timeout more), so it is ended
-- once a server answers, and its nodes with it (nodes.lua).
function _M:_lost_by_clock(detail)
    local sid, password = self._session_id, self:session_password()
    self:_session_lost("sessionexpired", detail)
    self:_end_session(sid, password)
end


function _M:_check_timers()
    local due, t = self:_alive_until()
    if not due then
        return
    end
    local at = now()
    if at >= due then
        return self:_lost_by_clock(("the server was last heard from %.2fs ago;"
                                    .. " the session timeout is %gs"):format(
                                    at - self._s:last_heard(), t))
    end
    -- Curator's lesson (TN12): a client cut off from every server never hears
    -- that its session expired. Once it has been suspended for lost_after
    -- (at most the session timeout) act as if we were told.
    if self._state == "suspended" and self._suspended_at
            and at - self._suspended_at >= self:_lost_after() then
        self:_lost_by_clock(self._opts.lost_after
                            and "suspended for longer than lost_after"
                            or "suspended for longer than the session timeout")
    end
end


--- Contract (state answers): takes what has already reached the process,
--- without blocking: drains the queue and applies the clock rule, so a loss
--- that reached the process, or a pause past the session timeout, is
--- counted before the answer. Then, for a waiter that runs callbacks inline
--- (blocking), runs the callbacks queued (on_lost first of all: they were
--- queued by the loss). Not called while records are being handled.
function _M:_catch_up(callbacks)
    if self._closed then
        return
    end
    local p = self._pump
    p:step()
    if callbacks and self._waiter.inline_callbacks then
        p:run_callbacks()
    end
end


function _M:_set_state(new)
    local old = self._state
    if old == new then
        return
    end
    self._state = new
    self._metrics:state(new, old)
    for _, ev in pairs(self._state_events) do
        ev:set()
    end
    for _, fn in ipairs(self._listeners) do
        self._waiter:defer(fn, new, old)
    end
end


function _M:_session_event(state)
    if self._closed or not self._s then
        return
    end
    if state == C.CONNECTED_STATE or state == C.READONLY_STATE then
        local s = self._s
        local t = s:timeout()
        if self:_not_zookeeper(state, s, t) then     -- connect.lua
            return
        end
        if t ~= self._negotiated_timeout then
            self:_arm_watchdog(t)
        end
        self._negotiated_timeout = t
        s:heartbeat(t * HEARTBEAT)
        self._session_id = s:client_id()
        local dropped = s:reconnects()
        if dropped ~= self._dropped then
            -- a server that accepts but never answers (ZOOKEEPER-5051)
            self._log("info", ("dropped %d connection attempt(s) left unanswered "
                               .. "for handshake_timeout"):format(dropped - self._dropped))
            self._dropped = dropped
        end
        if self._suspended_at then
            self._log("info", ("connected again after %.2fs, in the same session")
                              :format(now() - self._suspended_at))
        end
        self._suspended_at = nil
        self._connections = self._connections + 1
        self:_set_state("connected")
        self:_resend_deletes()
        self:_delete_lost_nodes()
    elseif state == C.CONNECTING_STATE or state == C.ASSOCIATING_STATE then
        if self._state == "connected" then
            local at = now()
            self._suspended_at = at
            self:_set_state("suspended")
            -- What the clock rule leaves the session (lost_after included).
            local left = self:_lost_at() - at
            self._log("warn", ("connection lost; the session counts as lost in %.2fs"
                               .. " unless a server answers first"):format(left > 0 and left or 0))
        end
    elseif state == C.EXPIRED_SESSION_STATE then
        self:_session_lost("sessionexpired")
    elseif state == C.AUTH_FAILED_STATE then
        -- with sasl, also the SASL exchange after a handshake (a wrong
        -- password; the build's patch makes it an event)
        self._auth_failed = true
        -- (while connect waits, its error says it: only "info" then)
        self._log(contract.live[self] and "error" or "info", (self._sasl and "SASL " or "")
                  .. "authentication failed: the session is closed")
        self:_session_lost("authfailed", nil, true)
    end
end


--- The session is gone: every watch it held is gone with it. Tell their
--- owners, report "lost", and open a new session unless told not to.
function _M:_session_lost(reason, detail, no_reconnect)
    local old = self._s
    local old_serial = self._serial
    self._s = nil
    self._session_id = nil
    self._suspended_at = nil
    local watches = self._watches
    self._watches = {}
    -- Requests of the old session fail with the reason, not "closed".
    for _, p in pairs(self._pending) do
        if p.serial == old_serial then
            p.lost = reason
        end
    end
    if old then
        old:close()      -- fails what was in flight (ZCLOSING), fast: not connected
    end
    self._log("warn", "session lost (" .. reason .. (detail and ": " .. detail or "") .. ")")
    self:_set_state("lost")
    for _, w in pairs(watches) do
        self._waiter:defer(w.fn, { type = "session", state = "lost", path = w.path }, w.arg)
    end
    if self._opts.reconnect and not no_reconnect and not self._closed then
        local ok, err, why = self:_open_session()
        if not ok then
            self._log("error", "could not open a new session: " .. tostring(err)
                               .. " " .. tostring(why))
        end
    end
end


-- Contract: waits (bounded: at most `timeout`, default the request
-- timeout) until pred(state) is true. Returns true if it is.
function contract.wait_state(self, pred, timeout)
    local deadline = now() + (timeout or self._request_timeout)
    while not pred(self._state) do
        if self._closed then
            return pred(self._state)
        end
        local left = deadline - now()
        if left <= 0 then
            return false
        end
        local ev = self._waiter:event()
        self._state_events[ev] = ev
        ev:wait(left)
        self._state_events[ev] = nil
    end
    return true
end


return {
    -- What the pump calls (zkcoord.client.pump.new's hooks).
    pump_hooks = {
        record = _M._on_record,
        check_timers = _M._check_timers,
        timer_cap = _M._timer_cap,
    },
}
