--- zkcoord.line.node: a position's own node (internal part of zkcoord.line).
--
-- Creating it (pipelined with a listing of the line), finding it again
-- when a create's reply was lost, deleting what a create we gave up on may
-- have made, and watching it while through so that a delete or the end of
-- the session is reported to on_lost. Functions of a position (zkcoord.line
-- calls them as node.create(q, ...)), not methods: no mixin.
--
-- Protection (Curator's protected mode, CURATOR-498): our node is named
-- <prefix><marker><seq>, the prefix made of a fresh uuid (the driver's
-- prefix(uuid): Curator's _c_<uuid>- by default, kazoo's <uuid hex> for
-- zkcoord.layout.kazoo), so a create whose reply was lost can be found by
-- the name it was sent with, <prefix><marker>, as kazoo finds its own
-- (Curator's by _c_<uuid>-: the same node, the uuid being fresh). We adopt
-- such a node only if it is ours: an ephemeral node when
-- its ephemeral owner is our current session, a node that outlives
-- sessions (driver mode "persistent" or "ttl") by the uuid alone. Any wait
-- that gives up deletes our node (guaranteed: retried until it succeeds or
-- the session ends), and a create that completes after we stopped waiting
-- for it is deleted when its reply arrives.
local core = require "zkcoord.core"
local errors = require "zkcoord.errors"
local deadlines = require "zkcoord.util.deadline"
local retries = require "zkcoord.util.retry"
local callbacks = require "zkcoord.util.callbacks"
local join = require "zkcoord.line.join"
local walk = require "zkcoord.line.walk"
local contract = require "zkcoord.contract"

local errname, unknown_outcome = errors.name, errors.unknown_outcome
local remaining = deadlines.remaining

local ipairs = ipairs
local match, sub = string.match, string.sub
local uuid = core.uuid

local _M = {}


-- Ownership of a node named with our uuid prefix: an ephemeral one is ours
-- when its ephemeral owner is our current session; one that outlives
-- sessions (persistent, TTL) by the uuid alone: no session owns it.
local function ours(q, stat, sid)
    if q.persistent then
        return true
    end
    return stat.ephemeral_owner ~= nil and stat.ephemeral_owner == sid
end




-- Forgets our node locally. The watch on it (if any) is left to fire on
-- the delete that follows, and is ignored then: no extra request.
function _M:forget()
    local node = self._node
    self._node, self._name, self._stat, self._through = nil, nil, nil, false
    if node then
        contract.disown_node(self.client, node)
    end
    return node
end


-- A position that was through is lost: tell on_lost, once per node. Each
-- callback runs protected (util.call): one that raises stops no other.
function _M:lost(reason)
    if not self._through then
        return
    end
    _M.forget(self)
    local fns, client = self._lost_fns, self.client
    for i = 1, #fns, 2 do
        callbacks.call(client, fns[i], "line on_lost", reason, fns[i + 1])
    end
end


-- Watch our own node while through: a delete by someone else, or the end of
-- the session, is reported to on_lost. Sent without waiting (no round trip
-- added), but its reply is not ignored: if ZooKeeper set no watch (the
-- connection dropped first), the session's end would go unreported.
-- Both handlers are static functions whose context (the position) travels
-- with the request.
local function own_watch_fired(ev, self)
    if self._node ~= ev.path then
        return
    end
    if ev.type == "deleted" then
        _M.lost(self, "deleted")
    elseif ev.type == "session" then
        if self.persistent then
            _M.rewatch_when_connected(self, ev.path)   -- the node outlives the session
        else
            _M.lost(self, "sessionexpired")
        end
    elseif ev.type == "changed" then
        _M.watch_own(self)    -- re-arm (data writes, e.g. revocation)
    end
end


local function own_watch_reply(p, ctx)
    local self, node = ctx.q, ctx.node
    if self._node ~= node or p.rc == 0 then
        return
    end
    local e = errname(p.rc)
    if e == "nonode" then
        _M.lost(self, "deleted")          -- gone before the watch was set
    elseif e == "closed" and self.persistent then
        return
    elseif (p.lost or e == "sessionexpired" or e == "closed") and not self.persistent then
        -- "closed" without p.lost: client:close() failed it, not a lost session
        _M.lost(self, (e == "closed" and not p.lost) and "closed" or "sessionexpired")
    else
        _M.rewatch_when_connected(self, node)
    end
end


function _M:watch_own()
    local node = self._node
    local f = self.client:send("exists", node, own_watch_fired, self)
    if not f:on_late(own_watch_reply, { q = self, node = node }) then
        return _M.rewatch_when_connected(self, node)
    end
end


-- The watch request failed on a connection loss: set it again once
-- connected in the same session, or report the loss if the session ended.
function _M:rewatch_when_connected(node)
    local client = self.client
    local listener
    listener = client:on_state(function(new)
        if new ~= "connected" and new ~= "lost" and new ~= "closed" then
            return
        end
        if new == "lost" and self.persistent then
            return    -- the node outlives the session: watch it again in the next
        end
        client:remove_listener(listener)
        if self._node ~= node or (new == "closed" and self.persistent) then
            return
        end
        if new == "connected" and self:_owns_node() then
            _M.watch_own(self)
        else
            _M.lost(self, new == "closed" and self:_owns_node() and "closed" or "sessionexpired")
        end
    end)
    if client:state() == "connected" and self:_owns_node() then
        -- Already back (or never left): no transition will come.
        client:remove_listener(listener)
        _M.watch_own(self)
    end
end


-- Creates the parents of our node (one pipelined round trip).
function _M:create_parents()
    if self.path == "/" then
        return true
    end
    local container = self.driver.parents == "container"
    local ok, err = self.client:create(self.path, nil, { container = container or nil,
                                                         parents = container and "container"
                                                                   or true })
    if ok or err == "nodeexists" then
        return true
    end
    return nil, err
end


-- Protected mode: after a lost create reply, find our node by its uuid and
-- adopt it only if it is ours (see the header).
function _M:find_own(prefix, deadline)
    local client = self.client
    deadline = self:_read_deadline(deadline)
    local names, err = contract.read_until(client, deadline, "children", self.path)
    if not names then
        return nil, err
    end
    local sid = client:session_id()
    for _, name in ipairs(names) do
        if sub(name, 1, #prefix) == prefix then
            local path = (self.path == "/" and "" or self.path) .. "/" .. name
            local stat, serr = contract.read_until(client, deadline, "exists", path)
            if stat and ours(self, stat, sid) then
                return path, stat, names
            elseif stat == nil then
                return nil, serr
            elseif stat then
                client:delete_guaranteed(path)   -- an older session's: not ours to keep
            end
        end
    end
    return false
end


-- A create whose outcome we will never learn (its reply was lost to a
-- connection loss, or we had stopped waiting and the reply then was a
-- connection loss) may have made our node: nobody knows its name, and it
-- would block every other contender until our session ends. Find it by its
-- uuid prefix once connected again in the same session, and delete it if
-- it is ours (Curator's findAndDeleteProtectedNodeInBackground).
-- Asynchronous (it may start from a late-reply callback, which must not
-- block); tried again at every state change until one listing succeeds or
-- the session ends (its ephemeral nodes go with it). Rare: the closures
-- made here cost nothing on the common path.

-- Deletes, from listing `names`, the nodes with our prefix that are ours;
-- done(failed) once every look is answered.
local function delete_ours(q, names, prefix, serial, done)
    local client, persistent = q.client, q.persistent
    local base = q.path == "/" and "" or q.path
    local left, failed = 1, false
    local function one_done()
        left = left - 1
        if left == 0 then
            done(failed)
        end
    end
    for _, name in ipairs(names) do
        if sub(name, 1, #prefix) == prefix then
            local path = base .. "/" .. name
            left = left + 1
            client:send("exists", path):on_done(function(stat, serr)
                if stat and persistent then
                    client:delete_guaranteed(path, nil, true)
                elseif stat and contract.serial(client) == serial
                        and ours(q, stat, client:session_id()) then
                    client:delete_guaranteed(path)
                elseif stat == nil and serr ~= "nonode" then
                    failed = true
                end
                one_done()
            end)
        end
    end
    one_done()
end


local function delete_by_prefix(q, prefix, serial)
    local client, parent, persistent = q.client, q.path, q.persistent
    local listener, busy, done = nil, false, false
    local try
    local function finish()
        done = true
        if listener then
            client:remove_listener(listener)
            listener = nil
        end
    end
    local function looked(failed)
        busy = false
        if failed then try() else finish() end
    end
    local function listed(names, err)
        if not names then
            busy = false
            if err == "nonode" then
                return finish()
            end
            return try()    -- after a loss: again once connected (the listener)
        end
        delete_ours(q, names, prefix, serial, looked)
    end
    try = function()
        if done or busy then
            return
        end
        if contract.is_closed(client) or (contract.serial(client) ~= serial and not persistent) then
            return finish()
        end
        if client:state() ~= "connected" then
            return    -- again at the next state change
        end
        busy = true
        client:send("children", parent):on_done(listed)
    end
    listener = client:on_state(function() try() end)
    try()
end


local function delete_late_create(p, ctx)
    local q = ctx.q
    if p.rc == 0 and p.value then
        q.client:delete_guaranteed(p.value, nil, q.persistent)
    elseif (not p.lost or q.persistent) and unknown_outcome[errname(p.rc)] then
        -- An ephemeral node made in a session that is gone went with it
        -- (p.lost); delete_by_prefix also stops once the session changed.
        delete_by_prefix(q, ctx.prefix, p.serial)
    end
end


-- An ephemeral node is registered with the client, which deletes it when a
-- new session replaces ours and, in nginx, when the request ends. A node
-- that outlives sessions (a work item, a TTL lease) must outlive both:
-- never registered.
function _M:register(node)
    if not self.persistent then
        contract.own_node(self.client, node, self)
    end
end


-- Takes `node` (created or found) as ours.
function _M:adopt(node, stat)
    self._node, self._stat, self._serial = node, stat, contract.serial(self.client)
    self._name = match(node, ".*/(.*)")    -- anchored: one pass, not one per position
    _M.register(self, node)
    walk.register(node, self)
end


-- After a create failed on a connection loss or expiry: once connected,
-- adopt the node if it was made after all. Returns "adopted", names; or
-- "again" (create anew); or nil, err.
function _M:recover_create(err, prefix, serial, deadline)
    if self._try then
        -- One try: no wait for the connection. What the create may have
        -- made is deleted once connected (in the same session).
        if err ~= "sessionexpired" or self.persistent then
            delete_by_prefix(self, prefix, serial)
        end
        -- libzookeeper's name for a link that went silent: a connection loss
        return nil, err == "operationtimeout" and "connectionloss" or err
    end
    local connected, werr = deadlines.wait_connected(self.client, deadline)
    if not connected then
        if err ~= "sessionexpired" or self.persistent then
            delete_by_prefix(self, prefix, serial)   -- it may exist
        end
        return nil, werr    -- "timeout", "closed"
    end
    if err ~= "sessionexpired" or self.persistent then
        local path, fstat, fnames = _M.find_own(self, prefix, deadline)
        if path then
            _M.adopt(self, path, fstat)
            return "adopted", fnames
        elseif path == nil then
            delete_by_prefix(self, prefix, serial)   -- could not look: it may exist
        end
    end
    if not self._try and remaining(deadline) == 0 then
        return nil, "timeout"    -- no new create once the time is up
    end
    return "again"
end


-- The name a create sends, before the server's sequence number: the
-- driver's prefix of a fresh uuid, then its marker. A child whose name
-- starts with it is that create's node.
local function protected_name(d)
    return d.prefix(uuid()) .. d.marker
end


-- One create of our node with a listing of the parent, for util.retry.
-- After a reply that leaves the outcome unknown, finds the node once
-- connected and adopts it if it was made; else the error, with a new
-- prefix in `try` for the next create. Returns true, the listing (nil when
-- it failed) and the join batch it came from (zkcoord.line.join; nil for a
-- listing of our own), or nil, err ("nonode": the parent is missing).
-- A try-once sends its own listing right behind its create: it waits for
-- nobody.
local function create_once(self, deadline, try)
    local client, d = self.client, self.driver
    local base = self.path == "/" and "" or self.path
    local prefix = try.prefix
    local fc = client:send("create", base .. "/" .. prefix, self.data, d.create_flags)
    local fl, b
    if self._try then
        fl = client:send("children", self.path)
    else
        b = join.batch(client, self.path)
    end
    local serial = contract.serial(client)
    -- A reply that arrives after we gave up: delete what it created, or
    -- what it may have created when the reply was lost.
    fc:on_late(delete_late_create, { q = self, prefix = prefix })
    local node, stat = self:_reply(fc, deadline)
    if node then
        -- Ours before the next wait: a caller that never comes back from it
        -- (an aborted nginx request) still has its node deleted.
        _M.adopt(self, node, stat)
        if b then
            return true, (join.names(b, self:_reply_wait(deadline))), b
        end
        return true, (self:_reply(fl, deadline))
    end
    if fl then
        self:_reply(fl, deadline)
    end
    local err = stat
    if contract.is_closed(client) and err ~= "nonode" then
        return nil, "closed"
    elseif not (errors.transient[err] or err == "sessionexpired") then
        return nil, err
    end
    local how, fnames = _M.recover_create(self, err, prefix, serial, deadline)
    if how == "adopted" then
        return true, fnames
    elseif not how then
        return nil, fnames
    end
    try.prefix = protected_name(d)
    return nil, err
end


--- Step 1 of enter(): create our node, listing the parent in the same
--- round trip. Returns true, the listing (nil when it failed) and its join
--- batch (or nil), or nil, err.
--- A create is tried again after a connection loss or expiry (until the
--- deadline), and after creating the parents when they were missing (a
--- container parent may go between our two requests: MAX_RACES rounds).
function _M:create(deadline)
    -- A waiter may queue joins first (nginx's, a busy worker's); a try-once waits for nobody.
    local w = self.client:waiter()
    if w.admit and not self._try and not w:admit(remaining(deadline)) then
        return nil, "timeout"
    end
    local try = { prefix = protected_name(self.driver) }
    local ok, res, b
    for _ = 1, retries.MAX_RACES do
        ok, res, b = retries.retry(self.client, deadline, self:_policy(), create_once, self,
                                deadline, try)
        if ok or res ~= "nonode" then
            return ok, res, b
        end
        local pok, perr = _M.create_parents(self)
        if not pok and perr ~= "nonode" then
            return nil, perr
        end
    end
    return nil, res
end


return _M
