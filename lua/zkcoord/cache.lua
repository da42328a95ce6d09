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
--
-- Modules: this one owns the public methods, their argument checks, the
-- cache object's fields (listed in new()) and its lifetime (the initial
-- load, close). Its private methods live in its parts, one concern each:
-- zkcoord.cache.tree (node records, path index, applying replies),
-- zkcoord.cache.loader (reads and replies), zkcoord.cache.events (watch
-- events, session states), zkcoord.cache.delivery (events to listeners).
-- Each part returns methods named `_x`, defined in one part only; they
-- are copied onto the class here and call one another through self.

local args = require "zkcoord.util.args"
local contract = require "zkcoord.contract"

local type, pairs, ipairs, setmetatable = type, pairs, ipairs, setmetatable
local sort = table.sort
local sub, gsub = string.sub, string.gsub
local huge, min = math.huge, math.min
local argerror, check_path = args.argerror, contract.check_path

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = args.self_checker(mt, "cache", "cache")

for _, part in ipairs { "tree", "loader", "events", "delivery" } do
    for name, fn in pairs(require("zkcoord.cache." .. part)) do
        assert(_M[name] == nil and name:sub(1, 1) == "_", name)
        _M[name] = fn
    end
end

local OPT_KEYS = { "depth", "timeout" }


---@class zkcoord.cache_opts
---@field depth integer? levels below path that are mirrored (nil: all; 0: the node itself)
---@field timeout number? seconds new() waits for the initial load (default: the session timeout)

--- client:cache(path, opts) -> cache, once the initial load is done.
---@return table|nil cache, string? err "timeout" | "closed" | a ZooKeeper code
function _M.new(client, path, opts)
    check_path(path, "cache", 1)
    opts = args.check_opts(opts, OPT_KEYS, "cache", 2)
    local depth = opts.depth
    if depth ~= nil and (type(depth) ~= "number" or depth ~= depth or depth < 0
                         or depth % 1 ~= 0) then
        argerror(2, "cache", "depth must be an integer >= 0 or nil")
    end
    local timeout = args.check_timeout(opts.timeout, "cache", 2)
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
        _error = nil,          -- why the initial load failed
        _listeners = {},       -- { fn =, from = }
        _evq = { head = 1, tail = 0 },   -- events not delivered yet
        _seq = 0,              -- number of the last event queued
        _flushing = false,     -- listeners are being called
        _drained = nil,        -- event close() waits on for the reads in flight
        _on_data = nil,        -- the data and child watch callbacks, the state
        _on_child = nil,       -- listener (made by _listen)
        _on_state = nil,
    }, mt)
    self:_listen()

    self._root = self:_new_node(path, 0, nil, nil)
    local first = client:waiter():event()
    self._first = first
    self:_read(self._root, "data")
    self:_read(self._root, "children")
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
-- Public methods.

-- The shown node at `p`, or nil, "closed" | "nonode" | why it could not
-- be read (raises when p is outside the mirror).
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
        argerror(1, fname, "path " .. p .. " is outside the cache's " .. base)
    end
    local _, levels = gsub(rel, "/", "/")
    if levels > self.depth then
        argerror(1, fname, ("path %s is %d levels below %s: the cache mirrors %d")
                           :format(p, levels, base, self.depth))
    end
    if self._closed then
        return nil, "closed"
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


--- fn(ev) on every change until close(): ev.type "added", "updated",
--- "removed" (ev.path; ev.data and ev.stat: the node's, for "removed" the
--- last known) and "initialized". fn first gets the mirror as it is: an
--- "added" per node (parents first), then "initialized". Returns fn.
function _M:on_change(fn)
    check_self(self, "on_change")
    args.check_fn(fn, "on_change")
    if self._closed then
        return nil, "closed"
    end
    local l = { fn = fn, from = self._seq }
    self._listeners[#self._listeners + 1] = l
    for _, node in ipairs(self:_shown(self._root, {})) do
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
