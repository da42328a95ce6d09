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


--- How long a waiter may sleep: at most `left`, and no longer than the next
--- session timer (the simulated loss of a suspended session).
function _M:_timer_cap(left)
    if self._state == "suspended" and self._suspended_at then
        local due = self._suspended_at + self:_lost_after() - now()
        return due < left and (due > 0.001 and due or 0.001) or left
    end
    return left
end


function _M:_check_timers()
    -- Curator's lesson (TN12): a client cut off from every server never hears
    -- that its session expired. Once it has been suspended for the whole
    -- session timeout the server has expired it: act as if we were told.
    if self._state == "suspended" and self._suspended_at
            and now() - self._suspended_at >= self:_lost_after() then
        -- The server may still hold it (a restarted server restores it for a
        -- session timeout more): end it once a server answers (nodes.lua).
        local sid, password = self._session_id, self:session_password()
        self:_session_lost("sessionexpired", self._opts.lost_after
                           and "suspended for longer than lost_after"
                           or "suspended for longer than the session timeout")
        self:_end_session(sid, password)
    end
end


function _M:_set_state(new)
    local old = self._state
    if old == new then
        return
    end
    self._state = new
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
        self._negotiated_timeout = s:timeout()
        self._session_id = s:client_id()
        self._suspended_at = nil
        self:_set_state("connected")
        self:_resend_deletes()
        self:_delete_lost_nodes()
    elseif state == C.CONNECTING_STATE or state == C.ASSOCIATING_STATE then
        if self._state == "connected" then
            self._suspended_at = now()
            self:_set_state("suspended")
        end
    elseif state == C.EXPIRED_SESSION_STATE then
        self:_session_lost("sessionexpired")
    elseif state == C.AUTH_FAILED_STATE then
        self._log("error", "authentication failed: the session is closed")
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


--- Contract: waits (bounded: at most `timeout`, default the request
--- timeout) until pred(state) is true. Returns true if it is.
function _M:wait_state(pred, timeout)
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
