--- zkcoord.owned_node: one ephemeral node of ours at a fixed path: created,
--- watched until it goes, and deleted only while provably ours.
--
--   local n = owned_node.new(client, "/jobs/owners/4", { data = "host-a",
--                            on_gone = function(reason) ... end })
--   local ok, err = n:create()     -- true: ours; false: someone else's node is there
--   n:held()                       -- true while the node we made is there
--   n:delete()                     -- deletes it if it is still ours, never a path
--   n:adopt(stat)                  -- a node our own create made (sent with other requests)
--   n:delete_with(ops, deadline)   -- one multi: our node (only while ours) and ops
--   n:delete_soon()                -- delete() without waiting
--
-- Paths like these are shared: when our node goes, another session
-- creates the very same path. So:
--
-- * Our claim is the node WE created in the CURRENT session (its create
--   succeeded, or after a lost reply the node there has our session as its
--   ephemeral owner), never a listing or an older session's node.
-- * A delete is never a plain delete of the path. We read the node's stat
--   and delete only if its ephemeral owner is our current session, with
--   the version we read: an ephemeral node of our session goes only by our
--   own delete or the end of our session (every user of this piece deletes
--   only its own), so that delete cannot hit another session's node. A
--   delete that fails on a connection loss is tried again, the same way,
--   once connected in the same session; a session that ends takes the node
--   with it.
-- * The node is watched while held: on_gone(reason) runs once when it goes
--   without our delete ("deleted": someone else deleted it; "sessionexpired":
--   our session ended or counted lost).
local util = require "zkcoord.util"
local errors = require "zkcoord.errors"

local type, setmetatable = type, setmetatable
local transient, unknown_outcome = errors.transient, errors.unknown_outcome

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }


--- owned_node.new(client, path, opts) -> n (no server state until create()).
--- opts: data (string?), parents (create's parents option, default
--- "container"), on_gone (fn(reason, n)?).
function _M.new(client, path, opts)
    opts = opts or {}
    return setmetatable({
        client = client,
        path = path,
        data = opts.data,
        parents = opts.parents == nil and "container" or opts.parents,
        on_gone = opts.on_gone,
        _serial = nil,       -- the session (client:serial()) whose node we hold
        _gen = 0,            -- one per node we took: a watch of an earlier one is stale
        _sid = nil,          -- its session id (the node's ephemeral owner)
        _stat = nil,         -- the stat we last saw of our node
        _listener = nil,     -- on_state while held or while a delete is owed
        _delete_owed = nil,  -- the serial of a delete to finish once connected
    }, mt)
end


--- Is `stat` (of a node at our path) our current session's node? `sid`,
--- when given, must be that session too (the one we created it in).
local function ours_now(client, stat, sid)
    local owner = type(stat) == "table" and stat.ephemeral_owner
    return owner ~= nil and owner == client:session_id() and (sid == nil or owner == sid)
end
_M.ours_now = ours_now


-- Deletes the node at `path` if it is our current session's (a stat read,
-- then a delete with its version). true: gone (deleted, or not ours: there
-- is nothing of ours to delete); nil, err: could not tell or not done (a
-- connection loss: the caller tries again once connected).
local function delete_if_ours(client, path, sid)
    for _ = 1, util.MAX_RACES do    -- again only when our own data changed in between
        local stat, err = client:exists(path)
        if stat == false or (stat and not ours_now(client, stat, sid)) then
            return true
        elseif not stat then
            return nil, err
        end
        local ok, derr = client:delete(path, stat.version)
        if ok or derr == "nonode" then
            return true
        elseif derr ~= "badversion" then
            return nil, derr
        end
    end
    return nil, "badversion"
end
_M.delete_if_ours = delete_if_ours


--- Is the node we created in the current session still there (as far as
--- this process has been told: current_state() runs what reached it first)?
function _M:held()
    local client = self.client
    local state = client:current_state()
    return self._serial ~= nil and self._serial == client:serial()
        and state ~= "lost" and state ~= "closed"
end


--- The stat of our node as we last saw it (nil while not held).
function _M:stat()
    return self._serial and self._stat or nil
end


-- Our node went without our delete: forget it, tell on_gone once.
function _M:_gone(reason)
    if not self._serial then
        return
    end
    self._serial, self._sid, self._stat = nil, nil, nil
    self:_unlisten()
    if self.on_gone then
        util.call(self.client, self.on_gone, "owned node " .. self.path, reason, self)
    end
end


function _M:_unlisten()
    if self._listener and not self._delete_owed then
        self.client:remove_listener(self._listener)
        self._listener = nil
    end
end


-- One listener per node, while held or while a delete is owed: a lost
-- session took our node; a connection back in the same session re-arms a
-- watch that could not be set, or finishes a delete. Listeners run
-- deferred: the state now decides, not the one passed (a node taken
-- since in a new session is not the lost one's).
local function state_listener(self)
    return function()
        local client = self.client
        local state = client:state()
        if self._delete_owed then
            if state == "connected" and client:serial() == self._delete_owed then
                self:_finish_delete()
            elseif state == "lost" or state == "closed" or client:serial() ~= self._delete_owed then
                self._delete_owed = nil      -- the node went with the session
                self:_unlisten()
            end
        end
        if not self._serial then
            return
        end
        if state == "lost" or state == "closed" or client:serial() ~= self._serial then
            self:_gone("sessionexpired")
        elseif state == "connected" and self._rewatch then
            self:_watch()
        end
    end
end


function _M:_listen()
    if not self._listener then
        self._listener = self.client:on_state(state_listener(self))
    end
end


-- The watch on our node (made outside any waiting frame).
local function node_watcher(self, gen)
    return function(ev)
        if self._gen ~= gen or not self._serial then
            return
        end
        if ev.type == "deleted" then
            self:_gone("deleted")
        elseif ev.type == "session" then
            self:_gone("sessionexpired")
        elseif ev.type == "changed" then
            self:_watch()              -- our own data write: watch again
        end
    end
end


local function watch_reply(self, gen)
    return function(stat, err)
        if self._gen ~= gen or not self._serial then
            return
        end
        if stat then
            if ours_now(self.client, stat, self._sid) then
                self._stat = stat
            else
                self:_gone("deleted")  -- another session's node is there now
            end
        elseif stat == false or err == "nonode" then
            self:_gone("deleted")
        elseif transient[err] and self.client:state() == "connected" then
            self:_watch()              -- connected again already: no transition will come
        else
            self._rewatch = true       -- set again at the next "connected" (the listener)
        end
    end
end


-- Watches our node: sent without waiting; its reply is not ignored.
function _M:_watch()
    self._rewatch = false
    local gen = self._gen
    self.client:send("exists", self.path, node_watcher(self, gen))
        :on_done(watch_reply(self, gen))
end


-- Takes the node at our path as ours (created, or found ours).
function _M:_take(stat)
    local client = self.client
    self._serial, self._sid, self._stat = client:serial(), client:session_id(), stat
    self._gen = self._gen + 1      -- our own delete of an earlier node fires its watch later
    self._delete_owed, self._owed_sid = nil, nil   -- ours again: a delete still owed is not
    self:_listen()
    self:_watch()
end


--- Creates our node. true: ours now (created, or already ours in this
--- session: a lost create reply); false, stat: another session's node is
--- there (watch it yourself if you want it when it goes); false, nil: it
--- went between our create and our look (create again); nil, err.
function _M:create()
    local client = self.client
    if self:held() then
        return true
    end
    local serial = client:serial()
    local path, res = client:create(self.path, self.data, { ephemeral = true,
                                                            parents = self.parents })
    if path then
        if client:serial() ~= serial then
            return nil, "sessionexpired"   -- made in a session that is gone
        end
        self:_take(res)
        return true
    elseif res ~= "nodeexists" and not unknown_outcome[res] then
        return nil, res
    end
    if client:state() ~= "connected" then
        return nil, res         -- may have been made: the next create finds it
    end
    local stat, err = client:exists(self.path)
    if stat and ours_now(client, stat) and client:serial() == serial then
        self:_take(stat)        -- ours already (a lost create reply)
        return true
    elseif stat then
        return false, stat
    elseif stat == false then
        return false            -- gone meanwhile: create again
    end
    return nil, err
end


--- Takes the node at our path as ours, given its `stat` (from a create of
--- ours sent by the caller, or a look after its reply was lost): watched
--- until it goes. true; false when `stat` is not our current session's.
function _M:adopt(stat)
    if not ours_now(self.client, stat) then
        return false
    end
    self:_take(stat)
    return true
end


-- Our own write deleted our node: forget it (no on_gone; its watch's
-- event is stale).
function _M:_forget()
    self._serial, self._sid, self._stat = nil, nil, nil
    self._gen = self._gen + 1
    self:_unlisten()
end


--- One try at deleting our node together with `ops` (one multi: all or
--- nothing), only while it is the node of session `sid` (default: the one
--- we took it in) and that session is our current one: a read of its stat,
--- then the multi with the version read (the node first), both by
--- `deadline`. Not tried again: a lost reply is the caller's to decide.
--- true: done (forgotten: no on_gone); false: not ours (gone, or another
--- session's: nothing written); nil, err, results: the read failed
--- (results nil) or the multi did (results: one per op, empty when no
--- reply came).
function _M:delete_with(ops, deadline, sid)
    local client = self.client
    sid = sid or self._sid
    local stat, err = client:read_until(deadline, "exists", self.path)
    if stat == nil then
        return nil, err
    elseif not (stat and ours_now(client, stat, sid)) then
        return false
    end
    local all = { { op = "delete", path = self.path, version = stat.version } }
    for i = 1, #ops do
        all[i + 1] = ops[i]
    end
    local held = self._serial ~= nil and self._sid == sid
    if held then
        self._gen = self._gen + 1      -- the event of our own delete is not a loss
    end
    local ok, merr, results = client:send("multi", all):wait(util.remaining(deadline))
    if ok then
        if held and self._serial then
            self:_forget()
        end
        return true
    end
    if held and self._serial then
        self:_watch()                  -- not deleted by us: watched again
    end
    return nil, merr, results or {}
end


-- A delete owed, tried from the callback runner (a factory: no closure
-- in a waiting frame).
local function owed_delete(self, serial)
    return function()
        local client = self.client
        if self._delete_owed == serial and client:state() == "connected"
                and client:serial() == serial then
            self:_finish_delete()
        end
    end
end


--- Deletes our node without waiting (as delete(): only while ours, again
--- once connected when cut off, gone with the session), from the callback
--- runner. With `serial` and `sid`: a node we never took, which a create
--- of ours in that session may have made (its reply lost or come after we
--- gave up), deleted if it is that session's.
function _M:delete_soon(serial, sid)
    local client = self.client
    if self._serial then
        serial, sid = self._serial, self._sid
        self:_forget()
    end
    if not serial or client:serial() ~= serial then
        return    -- nothing of ours, or it went with its session
    end
    self._delete_owed, self._owed_sid = serial, sid
    self:_listen()
    client:waiter():defer(owed_delete(self, serial))
end


function _M:_finish_delete()
    local ok = delete_if_ours(self.client, self.path, self._owed_sid)
    if ok then
        self._delete_owed, self._owed_sid = nil, nil
        self:_unlisten()
    end
end


--- Deletes our node if it is still ours; never another session's node at
--- our path. true: not ours any more; nil, err: a delete is owed and runs
--- again once connected in the same session (or goes with the session).
function _M:delete()
    local client = self.client
    if not self:held() then
        self._serial, self._sid, self._stat = nil, nil, nil
        self:_unlisten()
        return true
    end
    local serial, sid = self._serial, self._sid
    self._serial, self._sid, self._stat = nil, nil, nil    -- on_gone: not for our delete
    local ok, err = delete_if_ours(client, self.path, sid)
    if ok or not (transient[err] or unknown_outcome[err]) then
        self:_unlisten()
        return ok, err
    end
    self._delete_owed, self._owed_sid = serial, sid
    self:_listen()
    if client:state() == "connected" and client:serial() == serial then
        self:_finish_delete()      -- back already: no transition will come
    end
    return nil, err
end


--- Sets our node's data (only while held) and keeps it for the next create.
---@return table|nil stat, string? err
function _M:set(data)
    self.data = data
    if not self:held() then
        return nil, "nonode"
    end
    return self.client:set(self.path, data)
end


_M.mt = mt
return _M
