--- zkcoord.cache: a local mirror of a subtree (Curator's TreeCache).
--
--   local cache = assert(client:cache("/config", { depth = 2 }))
--   local data, stat = cache:get("/config/db")      -- from memory
--   local names = cache:children("/config")         -- sorted
--   cache:on_change(function(ev) print(ev.type, ev.path, ev.data) end)
--   cache:close()
--
-- Algorithm (TreeCache's, on one-shot watches): every mirrored node is read
-- with a data watch (get) and, above the depth limit, a child watch
-- (children). A listing that names a new child starts that child's reads;
-- a child missing from a listing, a "deleted" event or a read answering
-- nonode removes the node and its subtree (children first). The root,
-- while missing, has an exists() watch. Replies are handled as they come
-- (future:on_done), never waited for, so the reads of one level go out
-- together: one round trip per level, not per node. One read of each kind
-- per node at a time; events that arrive meanwhile fold into one more read.
--
-- Order: one session answers in order, and a watch event comes before any
-- reply that shows its change, so the mirror never goes back. Replies are
-- checked all the same (czxid, then mzxid for data, pzxid for listings): an
-- older one is dropped, and the node read again after a sync. Events of a
-- node follow its versions: "added", "updated" (mzxid grew), "removed";
-- a node found re-created (a newer czxid) is "removed" and "added" again.
--
-- Connection loss ("suspended"): the C client keeps the session's watches
-- and re-sends them on reconnect; reads that failed meanwhile are sent
-- again once connected. Session loss ("lost"): every watch is gone. Once
-- the new session is connected we sync, then read every node again with
-- new watches; only real differences are reported (nodes gone meanwhile
-- "removed", changed data "updated", new nodes "added").
--
-- Delivery: events are queued while the mirror changes and delivered
-- after, one listener call at a time, never nested (a callback that waits
-- lets replies in; what they change is delivered after it returns).
-- A read that keeps failing with a transient error while connected is
-- retried a few times at once, then at the next event of its node or the
-- next reconnect (the waiters have no timer to retry it later by itself).
--
-- Node layout: none of its own; mirrors <path> as it is.
local client_mod = require "zkcoord.client"

local type, error, pairs, ipairs, tostring, setmetatable, getmetatable =
    type, error, pairs, ipairs, tostring, setmetatable, getmetatable
local xpcall, traceback = require("zkcoord.compat").xpcall, debug.traceback
local sort = table.sort
local sub, gsub = string.sub, string.gsub
local huge, min = math.huge, math.min
local argerror, check_path = client_mod.argerror, client_mod.check_path

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }

local OPT_KEYS = { depth = true, timeout = true }

-- Errors after which the same read may work on a live connection.
local TRANSIENT = { connectionloss = true, operationtimeout = true, sessionexpired = true,
                    sessionmoved = true, throttledop = true, closed = true, timeout = true }

local MAX_QUICK_RETRIES = 3    -- a read retried at once while "connected"; then at the next connect
local MAX_STALE = 5            -- older replies in a row for a node before we wait for an event


local function check_self(self, name)
    if getmetatable(self) ~= mt then
        error(("'%s' must be called on a cache (use cache:%s(...))"):format(name, name), 3)
    end
end


-- ---------------------------------------------------------------------------
-- Closures handed to watches, futures and the client are made here, in
-- small frames that never wait (in nginx a waiting coroutine may be gone,
-- locals and all, when they run).

local function data_watcher(self)
    return function(ev) self:_data_event(ev) end
end

local function child_watcher(self)
    return function(ev) self:_child_event(ev) end
end

local function state_listener(self)
    return function(new) self:_state_change(new) end
end

local function data_reply(self, node, sid, watched)
    return function(data, stat) self:_data_reply(node, sid, watched, data, stat) end
end

local function exists_reply(self, node, sid)
    return function(stat, err) self:_exists_reply(node, sid, stat, err) end
end

local function children_reply(self, node, sid, watched)
    return function(names, stat) self:_children_reply(node, sid, watched, names, stat) end
end


-- A node of the mirror. `stat` is nil while it is pending (listed by its
-- parent, data not read yet): pending nodes are not shown. Only the fields
-- every node has are made here; the others (data, stat, dsid and csid: the
-- session in which our data / child watch is set; the flags dbusy, ddirty,
-- cbusy, cdirty, dowed, cowed, dead; the counts retries, stale; err: why
-- a listed node could not be read) are set
-- when needed and cleared to nil, so a node stays small.
local function new_node(self, path, depth, parent, name)
    local node = {
        path = path, name = name, depth = depth, parent = parent,
        kids = depth < self.depth and {} or nil,   -- name -> node
        ccz = -1, cpz = -1,       -- czxid and pzxid of the last listing applied
    }
    self._nodes[path] = node
    if parent then
        parent.kids[name] = node
    end
    return node
end


---@class zkcoord.cache_opts
---@field depth integer? levels below path that are mirrored (nil: all; 0: the node itself)
---@field timeout number? seconds new() waits for the initial load (default: the session timeout)

--- client:cache(path, opts) -> cache, once the initial load is done.
---@return table|nil cache, string? err "timeout" | "closed" | a ZooKeeper code
function _M.new(client, path, opts)
    check_path(path, "cache", 1)
    if opts == nil then
        opts = {}
    elseif type(opts) ~= "table" then
        argerror(2, "cache", "opts must be a table or nil, got " .. type(opts))
    end
    for k in pairs(opts) do
        if not OPT_KEYS[k] then
            argerror(2, "cache", "unknown option '" .. tostring(k) .. "'")
        end
    end
    local depth = opts.depth
    if depth ~= nil and (type(depth) ~= "number" or depth ~= depth or depth < 0
                         or depth % 1 ~= 0) then
        argerror(2, "cache", "depth must be an integer >= 0 or nil")
    end
    local timeout = opts.timeout
    if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout < 0) then
        argerror(2, "cache", "timeout must be a number >= 0 or nil")
    end
    if client:state() == "closed" then
        return nil, "closed"
    end

    local self = setmetatable({
        client = client,
        path = path,
        base = path == "/" and "" or path,   -- prefix of child paths
        depth = depth or huge,
        _nodes = {},           -- path -> node (pending ones too)
        _root = nil,
        _closed = false,
        _sid = client:session_id(),   -- session our watches belong to
        _synced = nil,         -- session in which we sent a sync
        _inflight = 0,         -- reads sent and not answered
        _owed = {},            -- nodes with a read owed once connected
        _initialized = false,
        _first = nil,          -- event new() waits on
        _error = nil,
        _listeners = {},       -- { fn =, from = }
        _evq = { head = 1, tail = 0 },
        _seq = 0,
        _flushing = false,
        _drained = nil,
    }, mt)
    self._on_data = data_watcher(self)
    self._on_child = child_watcher(self)
    self._on_state = state_listener(self)
    client:on_state(self._on_state)

    self._root = new_node(self, path, 0, nil, nil)
    local first = client:waiter():event()
    self._first = first
    self:_read_data(self._root)
    self:_read_children(self._root)
    self:_check_idle()
    first:wait(timeout or client:session_timeout())
    self._first = nil
    if not self._initialized then
        local err = self._error or (client:state() == "closed" and "closed") or "timeout"
        self:close()
        return nil, err
    end
    return self
end


-- ---------------------------------------------------------------------------
-- Reading.

function _M:_send_sync(sid)
    if self._synced ~= sid then
        -- A new session may land on a server behind the one we read from
        -- before: its reads are served after this sync. Fire and forget.
        self.client:send("sync", self.path)
        self._synced = sid
    end
end


-- Marks a read owed once connected.
function _M:_owe(node, kind)
    if not node.dowed and not node.cowed then
        self._owed[#self._owed + 1] = node
    end
    if kind == "data" then
        node.dowed = true
    else
        node.cowed = true
    end
end


function _M:_read_data(node)
    if self._closed or node.dead then
        return
    end
    if node.dbusy then
        node.ddirty = true
        return
    end
    local client = self.client
    if client:state() ~= "connected" then
        return self:_owe(node, "data")
    end
    local sid = client:session_id()
    self:_send_sync(sid)
    node.dbusy, node.ddirty = true, nil
    local watch = node.dsid ~= sid and self._on_data or nil
    self._inflight = self._inflight + 1
    client:send("get", node.path, watch):on_done(data_reply(self, node, sid, watch ~= nil))
end


function _M:_read_children(node)
    if self._closed or node.dead or not node.kids then
        return
    end
    if node.cbusy then
        node.cdirty = true
        return
    end
    local client = self.client
    if client:state() ~= "connected" then
        return self:_owe(node, "children")
    end
    local sid = client:session_id()
    self:_send_sync(sid)
    node.cbusy, node.cdirty = true, nil
    local watch = node.csid ~= sid and self._on_child or nil
    self._inflight = self._inflight + 1
    client:send("children", node.path, watch)
        :on_done(children_reply(self, node, sid, watch ~= nil))
end


-- A reply came: bookkeeping common to all. Returns true when it still matters.
function _M:_replied()
    self._inflight = self._inflight - 1
    if self._drained and self._inflight == 0 then
        self._drained:set()
    end
    return not self._closed
end


function _M:_data_reply(node, sid, watched, data, stat)
    if not self:_replied() then return end
    node.dbusy = nil
    if node.dead then
        return self:_after()
    end
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
        local client = self.client
        self._inflight = self._inflight + 1
        client:send("exists", node.path, self._on_data):on_done(exists_reply(self, node, sid))
        return self:_after()
    else
        self:_failed(node, "data", stat)
    end
    if node.ddirty and not node.dead then
        self:_read_data(node)
    end
    self:_after()
end


function _M:_exists_reply(node, sid, stat, err)
    if not self:_replied() then return end
    node.dbusy = nil
    if node.dead then
        return self:_after()
    end
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
    if node.ddirty then
        self:_read_data(node)
    end
    self:_after()
end


function _M:_children_reply(node, sid, watched, names, stat)
    if not self:_replied() then return end
    node.cbusy = nil
    if node.dead then
        return self:_after()
    end
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
            self:_read_data(node)
        end
        return self:_after()
    else
        self:_failed(node, "children", stat)
    end
    if node.cdirty and not node.dead then
        self:_read_children(node)
    end
    self:_after()
end


function _M:_stale(node, kind)
    node.stale = (node.stale or 0) + 1
    self._synced = nil            -- the next read syncs first
    if node.stale <= MAX_STALE then
        if kind == "data" then node.ddirty = true else node.cdirty = true end
    end
end


function _M:_failed(node, kind, err)
    local client = self.client
    local st = client:state()
    if st == "closed" then
        self._error = self._error or "closed"
        return
    end
    if TRANSIENT[err] then
        node.retries = (node.retries or 0) + 1
        if st == "connected" and node.retries <= MAX_QUICK_RETRIES then
            if kind == "data" then node.ddirty = true else node.cdirty = true end
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


-- ---------------------------------------------------------------------------
-- Applying replies.

-- Returns the node now at that path (a new one when it was re-created).
function _M:_apply_data(node, data, stat)
    local old = node.stat
    if old == nil then
        node.data, node.stat, node.stale, node.err = data, stat, nil, nil
        self:_emit("added", node)
        if node.kids and not node.cbusy and node.ccz ~= stat.czxid then
            self:_read_children(node)   -- the root, found (again)
        end
        return node
    end
    if stat.czxid < old.czxid or (stat.czxid == old.czxid and stat.mzxid < old.mzxid) then
        self:_stale(node, "data")
        return node
    end
    node.stale = nil
    if stat.czxid ~= old.czxid then
        -- Deleted and created again between two reads: the old one is
        -- gone (with its subtree), this is another node.
        local parent, name, dsid = node.parent, node.name, node.dsid
        local fresh
        if node == self._root then
            fresh = self:_root_gone(node)
        else
            self:_remove(node)
            fresh = new_node(self, node.path, node.depth, parent, name)
        end
        fresh.dsid = dsid
        fresh.data, fresh.stat = data, stat
        self:_emit("added", fresh)
        self:_read_children(fresh)
        return fresh
    end
    if stat.mzxid ~= old.mzxid then
        node.data, node.stat = data, stat
        self:_emit("updated", node)
    elseif stat.pzxid >= old.pzxid then
        node.stat = stat                -- same data, newer children counts
    end
    return node
end


function _M:_apply_children(node, names, stat)
    node.ccz, node.cpz = stat.czxid, stat.pzxid
    local kids = node.kids
    local present = {}
    for _, name in ipairs(names) do
        present[name] = true
    end
    -- Removed first (their deletes came first), in name order.
    local gone
    for name, kid in pairs(kids) do
        if not present[name] then
            gone = gone or {}
            gone[#gone + 1] = kid
        end
    end
    if gone then
        sort(gone, function(a, b) return a.name < b.name end)
        for _, kid in ipairs(gone) do
            self:_remove(kid)
        end
    end
    sort(names)
    local base = node.path == "/" and "" or node.path
    for _, name in ipairs(names) do
        if not kids[name] then
            local kid = new_node(self, base .. "/" .. name, node.depth + 1, node, name)
            self:_read_data(kid)
            self:_read_children(kid)
        end
    end
end


-- Removes a node and its subtree, children first; "removed" for those shown.
function _M:_remove(node)
    if node.dead then
        return
    end
    if node.kids then
        local names = {}
        for name in pairs(node.kids) do
            names[#names + 1] = name
        end
        sort(names)
        for _, name in ipairs(names) do
            self:_remove(node.kids[name])
        end
    end
    node.dead = true
    if self._nodes[node.path] == node then
        self._nodes[node.path] = nil
    end
    local parent = node.parent
    if parent and parent.kids[node.name] == node then
        parent.kids[node.name] = nil
    end
    if node.stat then
        self:_emit("removed", node)
    end
end


-- The root is gone: its subtree is removed and a new pending root takes
-- its place (replies for the old one are dropped).
function _M:_root_gone(node)
    if not node.stat then
        return node                    -- never shown: nothing to report
    end
    self:_remove(node)
    local root = new_node(self, node.path, 0, nil, nil)
    self._root = root
    return root
end


-- ---------------------------------------------------------------------------
-- Events and session states.

function _M:_data_event(ev)
    if self._closed then return end
    local node = self._nodes[ev.path]
    if not node then return end
    local t = ev.type
    if t == "session" or t == "notwatching" then
        return                          -- the new session reads everything again
    end
    node.dsid = nil                     -- used up: the next read sets a new one
    if t == "deleted" then
        if node == self._root then
            self:_root_gone(node)
            self:_read_data(self._root)
        else
            self:_remove(node)
        end
    else
        self:_read_data(node)
    end
    self:_after()
end


function _M:_child_event(ev)
    if self._closed then return end
    local node = self._nodes[ev.path]
    if not node then return end
    local t = ev.type
    if t == "session" or t == "notwatching" then
        return
    end
    node.csid = nil
    if t == "deleted" then
        if node == self._root then
            self:_root_gone(node)
            self:_read_data(self._root)
        else
            self:_remove(node)
        end
    else
        self:_read_children(node)
    end
    self:_after()
end


function _M:_state_change(new)
    if self._closed or new ~= "connected" then
        return
    end
    local client = self.client
    local sid = client:session_id()
    local owed = self._owed
    self._owed = {}
    if sid ~= self._sid then
        -- A new session: every watch is gone and anything may have changed.
        -- Read every node again (with new watches); replies report only
        -- what differs.
        self._sid = sid
        for _, node in ipairs(owed) do
            node.dowed, node.cowed = nil, nil
        end
        local all = {}
        for _, node in pairs(self._nodes) do
            all[#all + 1] = node
        end
        sort(all, function(a, b) return a.depth < b.depth end)
        for _, node in ipairs(all) do
            node.retries = nil
            self:_read_data(node)
            self:_read_children(node)
        end
    else
        for _, node in ipairs(owed) do
            local d, c = node.dowed, node.cowed
            node.dowed, node.cowed, node.retries = nil, nil, nil
            if d then self:_read_data(node) end
            if c then self:_read_children(node) end
        end
    end
    self:_after()
end


-- After each handler: is the load done, and deliver what happened.
function _M:_after()
    self:_check_idle()
    self:_flush()
end


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


-- ---------------------------------------------------------------------------
-- Delivering events: queued while the mirror changes, delivered after, in
-- order, one listener call at a time (a callback that waits lets replies
-- in; what they change is delivered after it returns).

function _M:_emit(kind, node, only)
    if #self._listeners == 0 and not only then
        return
    end
    local ev
    if node then
        ev = { type = kind, path = node.path, data = node.data, stat = node.stat }
    else
        ev = { type = kind }
    end
    local q = self._evq
    self._seq = self._seq + 1
    q.tail = q.tail + 1
    q[q.tail] = { ev = ev, seq = self._seq, only = only }
end


function _M:_flush()
    if self._flushing then
        return
    end
    self._flushing = true
    local q = self._evq
    while q.head <= q.tail and not self._closed do
        local item = q[q.head]
        q[q.head] = nil
        q.head = q.head + 1
        local only = item.only
        -- a listener added meanwhile may be called in this loop: index, not ipairs
        local ls = self._listeners
        local i = 1
        while ls[i] do
            local l = ls[i]
            if (only == nil and item.seq > l.from) or only == l then
                local ok, err = xpcall(l.fn, traceback, item.ev)
                if not ok then
                    self.client:log("error", "cache " .. self.path .. ": on_change callback failed: "
                                             .. tostring(err))
                end
            end
            i = i + 1
        end
    end
    if q.head > q.tail then
        q.head, q.tail = 1, 0
    end
    self._flushing = false
end


-- ---------------------------------------------------------------------------
-- Public methods.

-- The mirrored node at `p` (raises when p is outside the mirror).
function _M:_lookup(p, fname)
    check_path(p, fname, 1)
    local base = self.path
    local rel
    if p == base then
        rel = ""
    elseif base == "/" then
        rel = sub(p, 1)
    elseif sub(p, 1, #base + 1) == base .. "/" then
        rel = sub(p, #base + 1)
    else
        argerror(1, fname, "path " .. p .. " is outside the cache's " .. base, 2)
    end
    local _, levels = gsub(rel, "/", "/")
    if levels > self.depth then
        argerror(1, fname, ("path %s is %d levels below %s: the cache mirrors %d")
                           :format(p, levels, base, self.depth), 2)
    end
    local node = self._nodes[p]
    if node and node.stat then
        return node
    end
    return nil, node and node.err or "nonode"
end


--- The data and stat of `p` as mirrored (no round trip).
---@return string|nil data, table|string stat or err "nonode" | "closed" | "noauth" (a node
--- listed but not readable)
function _M:get(p)
    check_self(self, "get")
    local node, err = self:_lookup(p, "get")
    if self._closed then
        return nil, "closed"
    end
    if not node then
        return nil, err
    end
    return node.data, node.stat
end


--- The names of `p`'s children as mirrored, sorted (empty at the depth limit).
---@return string[]|nil names, string? err "nonode" | "closed"
function _M:children(p)
    check_self(self, "children")
    local node, err = self:_lookup(p, "children")
    if self._closed then
        return nil, "closed"
    end
    if not node then
        return nil, err
    end
    local names = {}
    for name, kid in pairs(node.kids or {}) do
        if kid.stat then
            names[#names + 1] = name
        end
    end
    sort(names)
    return names
end


-- Every shown node, parents first, siblings in name order.
local function walk(node, out)
    if node.stat then
        out[#out + 1] = node
    end
    if node.kids then
        local names = {}
        for name in pairs(node.kids) do
            names[#names + 1] = name
        end
        sort(names)
        for _, name in ipairs(names) do
            walk(node.kids[name], out)
        end
    end
    return out
end


--- fn(ev) on every change until close(): ev.type "added", "updated",
--- "removed" (ev.path; ev.data and ev.stat: the node's, for "removed" the
--- last known) and "initialized". fn first gets the mirror as it is: an
--- "added" per node (parents first), then "initialized". Returns fn.
function _M:on_change(fn)
    check_self(self, "on_change")
    if type(fn) ~= "function" then
        argerror(1, "on_change", "function expected, got " .. type(fn))
    end
    if self._closed then
        return nil, "closed"
    end
    local l = { fn = fn, from = self._seq }
    self._listeners[#self._listeners + 1] = l
    for _, node in ipairs(walk(self._root, {})) do
        self:_emit("added", node, l)
    end
    self:_emit("initialized", nil, l)
    self:_flush()
    return fn
end


--- Stops the mirror: no event after this, every watch it set removed
--- (here and on the server). Idempotent.
---@return true
function _M:close()
    check_self(self, "close")
    if self._closed then
        return true
    end
    self._closed = true
    self._listeners = {}
    self._evq = { head = 1, tail = 0 }
    local client = self.client
    client:remove_listener(self._on_state)
    -- Reads in flight set their server-side watches when answered, and the
    -- C client removes only watches it has: let them in (bounded; their
    -- replies change nothing now).
    if self._inflight > 0 and client:state() == "connected" then
        local ev = client:waiter():event()
        self._drained = ev
        ev:wait(min(client:session_timeout(), 2))
        self._drained = nil
    end
    if client:state() ~= "closed" then
        client:remove_watches(nil, self._on_data)
        client:remove_watches(nil, self._on_child)
    end
    self._nodes = {}
    self._owed = {}
    return true
end


_M.mt = mt
return _M
