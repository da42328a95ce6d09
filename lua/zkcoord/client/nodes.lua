--- zkcoord.client.nodes: guaranteed deletes and the nodes recipes own
--- (client methods).
--
-- Owns `delete_guaranteed` (a delete sent again after a connection loss
-- until it succeeds or its session ends), and the registry of nodes
-- recipes created (`own_node`, `disown_node`): when a new session
-- replaces a lost one, the lost one's nodes are deleted at once instead of
-- blocking every other contender until the server expires that session
-- (not a node whose path others create once ours is gone: it may be theirs).
--
-- Also owns ending a session we stopped using while the server may still
-- hold it (`_end_session`): a session we counted lost on our own timer, or
-- one close() could not reach a server to close. The server keeps such a
-- session (and a restarted server restores it, for a whole session timeout
-- more); its ephemeral nodes, and the deletes we queued for nodes given up
-- while cut off, would block other processes that long. A side handle
-- resumes it by id and password and closes it as soon as a server answers:
-- the server deletes its ephemeral nodes, which are ours by definition.
local core = require "zkcoord.core"
local errors = require "zkcoord.errors"
local _M = require "zkcoord.client.class"
local checks = require "zkcoord.client.checks"
local ops = require "zkcoord.client.ops"

local errname, transient = errors.name, errors.transient
local check_self, check_path, check_version = checks.check_self, checks.check_path,
                                              checks.check_version
local pairs, ipairs, next, tostring = pairs, ipairs, next, tostring
local send_delete = ops.send.delete
local C = core.c

local RC_OK = 0

local delete_attempt

-- Late handler of a guaranteed delete (static: its context is the
-- attempt { client, path, version, persistent, serial }).
local function delete_done(p, a)
    local self = a.client
    local e = errname(p.rc)
    if p.rc ~= RC_OK and e ~= "nonode" and e ~= "closed" then
        if transient[e] or e == "sessionexpired" then
            self._retry_deletes[a.path] = { a.version, a.persistent, a.serial }
            if self._state == "connected" then self:_resend_deletes() end  -- reconnect handled before us
        else
            self._log("error", "delete of " .. a.path .. " failed: " .. e)
        end
    end
end


delete_attempt = function(self, path, version, persistent, serial)
    if self._closed or (not persistent and self._serial ~= serial) then
        return
    end
    local fut = send_delete(self, path, version)
    local ctx = { client = self, path = path, version = version, persistent = persistent,
                  serial = serial }
    if fut:on_late(delete_done, ctx) then
        return
    end
    local _, err, detail = fut:wait(0)
    if err == "toolarge" then
        self._log("error", "delete of a path of " .. #path .. " bytes failed: " .. detail)
    else
        self._retry_deletes[path] = { version, persistent, serial }  -- no session: once connected
    end
end


--- Deletes `path` without waiting for the reply. On connection loss the
--- delete is sent again once connected, until it succeeds or the node is
--- gone; for an ephemeral node (the default) it stops when the session that
--- owned the node ends, since the node went with it. The delete is ordered
--- before every later request of this session.
---@param path string
---@param version integer? expected version (-1 or nil: any)
---@param persistent boolean? true: keep trying in later sessions too
function _M:delete_guaranteed(path, version, persistent)
    check_self(self, "delete_guaranteed")
    check_path(path, "delete_guaranteed", 1)
    version = check_version(version, "delete_guaranteed", 2)
    delete_attempt(self, path, version, persistent, self._serial)
    return true
end


function _M:_resend_deletes()
    local retry = self._retry_deletes
    if next(retry) == nil then
        return
    end
    self._retry_deletes = {}
    for path, a in pairs(retry) do
        delete_attempt(self, path, a[1], a[2], a[3])
    end
end


--- Contract, for recipes: `path` was created by this session for `q`, a
--- position that answers node() (its node's path), is_through() and
--- leave() (the nginx waiter calls them when the request that made the
--- node ends or its thread is killed). `shared`: others create this very
--- path once our node is gone (a work-queue claim), so only this session
--- may delete it: a new session forgets it instead of deleting whoever's
--- node is there by then.
--- @local
function _M:own_node(path, q, shared)
    local e = { serial = self._serial, q = q, shared = shared or nil }
    self._owned[path] = e
    local w = self._waiter
    if w.track then
        w:track(e, path)    -- nginx: tied to the request, released when it ends
    end
end


--- Contract, for recipes: `path` was deleted or is being deleted. A node
--- of an earlier session stays listed until the new session deletes it.
--- @local
function _M:disown_node(path)
    local e = self._owned[path]
    if e and e.serial == self._serial then
        self._owned[path] = nil
        if e.scope then
            e.scope.nodes[path] = nil
        end
    end
end


-- At close(): every position that owns a node of the session just closed
-- is asked whether it is through; a line position answers no and tells
-- its on_lost "closed" (once: it forgets its node then), so every holder
-- hears of the close in close(), not at its next question. Collected
-- first: the callbacks disown nodes.
function _M:_tell_owners_closed()
    local qs = {}
    for _, e in pairs(self._owned) do
        qs[#qs + 1] = e.q
    end
    for i = 1, #qs do
        qs[i]:is_through()
    end
end


function _M:_delete_lost_nodes()
    local n = 0
    for path, e in pairs(self._owned) do
        if e.serial ~= self._serial then
            self._owned[path] = nil
            if e.scope then
                e.scope.nodes[path] = nil
            end
            if not e.shared then
                delete_attempt(self, path, -1, false, self._serial)
                n = n + 1
            end
        end
    end
    if n > 0 then
        self._log("info", ("deleting %d node(s) of the lost session"):format(n))
    end
end


-- A side handle's serial: negative, never that of one of our sessions
-- (session records carry it; session.lua hands them to _ender_event).
function _M:_end_session(sid, password)
    if not sid or not password then
        return
    end
    local n = self._ender_serial - 1
    self._ender_serial = n
    local s, err, detail = core.open(self._q, self._hosts, self._opts.session_timeout, n,
                                     sid, password, self._opts.resolve_interval,
                                     self._tls and self._tls.string, self._sasl)
    if not s then
        self._log("error", "cannot end session " .. sid .. ": " .. tostring(err) .. " "
                           .. tostring(detail))
        return
    end
    -- The main session's quick retry: a connection the restarting server
    -- leaves unanswered (ZOOKEEPER-5051) would keep the nodes 2/3 of the
    -- session timeout longer.
    self:_arm_watchdog(self._opts.session_timeout, s)
    self._enders[n] = { s = s, sid = sid, password = password }
end


function _M:_ender_event(serial, state)
    local e = self._enders[serial]
    if not e then
        return
    end
    if state == C.CONNECTED_STATE or state == C.READONLY_STATE then
        self._enders[serial] = nil
        e.s:close()     -- sends closeSession: the server deletes its ephemeral nodes
        self._log("info", "ended session " .. e.sid .. " (counted lost): its nodes are gone")
    elseif state == C.EXPIRED_SESSION_STATE or state == C.AUTH_FAILED_STATE then
        self._enders[serial] = nil   -- the server ended it already
        e.s:close()
    end
end


-- At close(): the session close() could not end (no server answered) and
-- the side handles still trying are handed to another open client of the
-- same servers, which ends them once a server answers. With none, the
-- server expires them a session timeout after it is back.
function _M:_hand_over_sessions(sid, password)
    local heir
    for c in pairs(_M.live) do
        if c ~= self and not c:is_closed() and c._hosts == self._hosts then  -- same class
            heir = c
            break
        end
    end
    local left = {}
    if sid then
        left[1] = { sid, password }
    end
    for n, e in pairs(self._enders) do
        self._enders[n] = nil
        e.s:close()
        left[#left + 1] = { e.sid, e.password }
    end
    for _, l in ipairs(left) do
        if heir then
            heir:_end_session(l[1], l[2])  -- same class
        else
            self._log("warn", "session " .. l[1] .. " could not be closed: the server "
                              .. "keeps its nodes until it expires it")
        end
    end
end


return {}
