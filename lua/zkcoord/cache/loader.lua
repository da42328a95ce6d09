--- zkcoord.cache.loader: the mirror's reads and their replies.
--
-- Owns sending the reads (get with a data watch, children with a child
-- watch, exists for a missing root), the bookkeeping of reads in flight,
-- owed and failed, and handling each reply as it comes.
-- Rules: replies are handled in future:on_done, never waited for, so the
-- reads of one level go out together (one round trip per level). One read
-- of each kind per node at a time; what asks for another meanwhile marks
-- the node dirty and gets one more read after the reply. A watch is set
-- only when the node has none in this session. A new session syncs before
-- its first read. A read holds nothing in the session: one that fails
-- with a transient error (errors.transient), "sessionexpired" (it goes on
-- in the new session) or "timeout" (our wait ran out) is sent again at
-- once while connected, as many times as a retry's policy allows
-- (util.DEFAULT_POLICY.max_tries; the reads are asynchronous: no backoff
-- sleep here), then once connected again. One that fails with "closed" is
-- not (the client is closing). Another error is logged once per node and
-- error (the next event or session reads again).
-- Part of the cache's class: these are its private methods (see
-- zkcoord.cache), called through self.
local retries = require "zkcoord.util.retry"
local transient = require("zkcoord.errors").transient

local tostring = tostring

local _M = {}

local MAX_QUICK_RETRIES = retries.DEFAULT_POLICY.max_tries  -- at once while "connected"; then once connected
local MAX_STALE = 5            -- older replies in a row for a node before we wait for an event


-- The futures' callbacks are made here, in small frames that never wait
-- (in nginx a waiting coroutine may be gone, locals and all, when they run).

local function data_reply(self, node, sid, watched)
    return function(data, stat) self:_data_reply(node, sid, watched, data, stat) end
end

local function exists_reply(self, node, sid)
    return function(stat, err) self:_exists_reply(node, sid, stat, err) end
end

local function children_reply(self, node, sid, watched)
    return function(names, stat) self:_children_reply(node, sid, watched, names, stat) end
end


-- The two kinds of read and the node's fields for each: busy (a read in
-- flight), dirty (one more read wanted after it), sid (the session our
-- watch is set in), owed (a read owed once connected).
local KINDS = {
    data = { busy = "dbusy", dirty = "ddirty", sid = "dsid", owed = "dowed",
             op = "get", watcher = "_on_data", reply = data_reply },
    children = { busy = "cbusy", dirty = "cdirty", sid = "csid", owed = "cowed",
                 op = "children", watcher = "_on_child", reply = children_reply },
}


function _M:_send_sync(sid)
    if self._synced ~= sid then
        -- A new session may land on a server behind the one we read from
        -- before: its reads are served after this sync. Fire and forget.
        self.client:send("sync", self.path)
        self._synced = sid
    end
end


-- Marks a read of `kind` owed once connected.
function _M:_owe(node, kind)
    if not node.dowed and not node.cowed then
        self._owed[#self._owed + 1] = node
    end
    node[KINDS[kind].owed] = true
end


-- Reads `node`'s data or children ("data" | "children"): now, after the
-- read in flight, or once connected.
function _M:_read(node, kind)
    if self._closed or node.dead or (kind == "children" and not node.kids) then
        return
    end
    local k = KINDS[kind]
    if node[k.busy] then
        node[k.dirty] = true
        return
    end
    local client = self.client
    if client:state() ~= "connected" then
        return self:_owe(node, kind)
    end
    local sid = client:session_id()
    self:_send_sync(sid)
    node[k.busy], node[k.dirty] = true, nil
    local watch = node[k.sid] ~= sid and self[k.watcher] or nil
    self._inflight = self._inflight + 1
    client:send(k.op, node.path, watch):on_done(k.reply(self, node, sid, watch ~= nil))
end


-- A reply of `kind` came for `node`: bookkeeping common to all. Returns
-- true when it still matters (the cache open, the node alive).
function _M:_replied(node, kind)
    self._inflight = self._inflight - 1
    if self._drained and self._inflight == 0 then
        self._drained:set()
    end
    if self._closed then
        return false
    end
    node[KINDS[kind].busy] = nil
    if node.dead then
        self:_after()
        return false
    end
    return true
end


-- After a reply: the read asked for meanwhile, then what follows a handler.
function _M:_reread(node, kind)
    if node[KINDS[kind].dirty] and not node.dead then
        self:_read(node, kind)
    end
    self:_after()
end


function _M:_data_reply(node, sid, watched, data, stat)
    if not self:_replied(node, "data") then return end
    if data ~= nil then
        node.retries = nil
        if watched then node.dsid = sid end
        node = self:_apply_data(node, data, stat)
    elseif stat == "nonode" then
        node.retries = nil
        if node ~= self._root then
            self:_remove(node)
            return self:_after()
        end
        -- The root is missing: watch for its creation.
        node = self:_root_gone(node)
        node.dbusy, node.ddirty = true, nil
        self._inflight = self._inflight + 1
        self.client:send("exists", node.path, self._on_data):on_done(exists_reply(self, node, sid))
        return self:_after()
    else
        self:_failed(node, "data", stat)
    end
    self:_reread(node, "data")
end


function _M:_exists_reply(node, sid, stat, err)
    if not self:_replied(node, "data") then return end
    if stat == false then
        node.dsid = sid                 -- armed: fires on creation
    elseif stat then
        -- Created in between: the exists() watch is set on the live node
        -- (it fires on change and delete too); read its data.
        node.dsid = sid
        node.ddirty = true
    else
        self:_failed(node, "data", err)
    end
    self:_reread(node, "data")
end


function _M:_children_reply(node, sid, watched, names, stat)
    if not self:_replied(node, "children") then return end
    if names ~= nil then
        node.retries = nil
        if watched then node.csid = sid end
        if stat.czxid < node.ccz or (stat.czxid == node.ccz and stat.pzxid < node.cpz) then
            self:_stale(node, "children")
        else
            node.stale = nil
            self:_apply_children(node, names, stat)
        end
    elseif stat == "nonode" then
        node.retries = nil
        -- Gone: the data read (sent before this one) said so already, or
        -- will (a "deleted" event or the next read); only a live node is
        -- removed here, the root's exists() watch is the data side's.
        if node.stat and node ~= self._root then
            self:_remove(node)
        elseif node.stat then
            self:_read(node, "data")
        end
        return self:_after()
    else
        self:_failed(node, "children", stat)
    end
    self:_reread(node, "children")
end


-- A reply older than what the node holds: read again after a sync, at
-- most MAX_STALE times in a row (then the next event reads).
function _M:_stale(node, kind)
    node.stale = (node.stale or 0) + 1
    self._synced = nil            -- the next read syncs first
    if node.stale <= MAX_STALE then
        node[KINDS[kind].dirty] = true
    end
end


function _M:_failed(node, kind, err)
    local client = self.client
    local st = client:state()
    if st == "closed" or err == "closed" then
        self._error = self._error or "closed"
        return
    end
    if transient[err] or err == "sessionexpired" or err == "timeout" then
        node.retries = (node.retries or 0) + 1
        if st == "connected" and node.retries <= MAX_QUICK_RETRIES then
            node[KINDS[kind].dirty] = true
        else
            self:_owe(node, kind)      -- read once connected again
        end
        return
    end
    -- noauth and the like: no use retrying now; the next event or new
    -- session reads again.
    if node == self._root and self._first then
        self._error = err
        self._first:set()              -- new() reports it
        return
    end
    if node.err ~= err then            -- once per node and error, not per read
        node.err = err                 -- get(p) tells it while the node is not shown
        client:log("error", "cache " .. self.path .. ": reading " .. node.path .. " failed: "
                            .. tostring(err))
    end
end


-- The initial load is done when no read is in flight or owed and none
-- failed: "initialized", and new() returns.
function _M:_check_idle()
    if not self._initialized and self._inflight == 0 and #self._owed == 0
            and not self._error then
        self._initialized = true
        self:_emit("initialized", nil)
        if self._first then
            self._first:set()
        end
    end
end

return _M
