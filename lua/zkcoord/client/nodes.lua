--- zkcoord.client.nodes: guaranteed deletes and the nodes recipes own
--- (client methods).
--
-- Owns `delete_guaranteed` (a delete sent again after a connection loss
-- until it succeeds or its session ends), and the registry of nodes
-- recipes created (`own_node`, `disown_node`): when a new session
-- replaces a lost one, the lost one's nodes are deleted at once instead of
-- blocking every other contender until the server expires that session
-- (not a node whose path others create once ours is gone: it may be theirs).
local errors = require "zkcoord.errors"
local _M = require "zkcoord.client.class"
local checks = require "zkcoord.client.checks"
local ops = require "zkcoord.client.ops"

local errname, transient = errors.name, errors.transient
local check_self, check_path, check_version = checks.check_self, checks.check_path,
                                              checks.check_version
local pairs, next = pairs, next
local send_delete = ops.send.delete

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


return {}
