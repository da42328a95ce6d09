--- zkcoord.persistent_node: a node that stays present through connection
--- loss, session expiry and deletes by others, until closed (Curator's
--- PersistentNode; the basis of service registration and group membership).
--
--   local n = client:persistent_node("/services/api/host-a", "10.0.0.5:8080")
--   assert(n:wait(5))                  -- present now
--   n:set("10.0.0.5:8081")             -- kept for every re-creation
--   n:close()                          -- deleted
--
-- Ephemeral by default: the node is a zkcoord.owned_node (ours only when
-- created in the current session, deleted only while provably ours). It
-- goes with our session, and we create it again, with its latest data, as
-- soon as a new session connects. A watch on the node notices a delete by
-- someone else: created again at once. A node of the same path owned by
-- another live session is not ours to take: we watch it and create ours
-- when it goes (Curator does the same). A persistent node found at the
-- path never goes by itself: wait() answers "nodeexists" at once (not a
-- timeout), and ours is made if that node is deleted. A persistent one
-- (opts.ephemeral = false) found present is adopted and given our data.
--
-- Sequential (opts.sequential): the node is a protected sequential node
-- (zkcoord.queue's place in a line, which finds a create whose reply was
-- lost); each re-creation gets a new sequence number: n:path() tells it.
--
-- Re-creation runs in the client's callbacks (a state change, a watch): in
-- plain Lua inside whichever call is waiting, in nginx in a timer.
local queue = require "zkcoord.queue"
local owned_node = require "zkcoord.owned_node"
local args = require "zkcoord.util.args"
local deadlines = require "zkcoord.util.deadline"
local retries = require "zkcoord.util.retry"
local errors = require "zkcoord.errors"
local contract = require "zkcoord.contract"

local type, pairs, tostring, setmetatable = type, pairs, tostring, setmetatable
local match = string.match
local argerror = args.argerror
local transient, unknown_outcome = errors.transient, errors.unknown_outcome

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = args.self_checker(mt, "persistent node", "n")
local own_gone

local OPT_KEYS = { "ephemeral", "sequential" }


---@class zkcoord.persistent_node_opts
---@field ephemeral boolean? default true: the node goes with our session (and is re-created)
---@field sequential boolean? default false: a protected sequential node; path() tells its name

--- client:persistent_node(path, data, opts) -> n. Starts creating the node
--- at once (waits at most one round trip); n:wait(timeout) waits until it
--- is present.
function _M.new(client, path, data, opts)
    contract.check_path(path, "persistent_node", 1)
    if data ~= nil and type(data) ~= "string" then
        argerror(2, "persistent_node", "data must be a string or nil, got " .. type(data))
    end
    opts = args.check_opts(opts, OPT_KEYS, "persistent_node", 3)
    for k, v in pairs(opts) do
        if type(v) ~= "boolean" then
            argerror(3, "persistent_node", k .. " must be a boolean, got " .. type(v))
        end
    end
    if path == "/" then
        argerror(1, "persistent_node", "the root cannot be a persistent node")
    end
    local self = setmetatable({
        client = client,
        want = path,                     -- the path asked for (the prefix, if sequential)
        data = data,
        ephemeral = opts.ephemeral ~= false,
        sequential = opts.sequential or false,
        _path = nil,                     -- the node's path while present
        _sid = nil,                      -- the session that created it (ephemeral)
        _closed = false,
        _busy = false, _again = false,   -- a create in flight; asked again meanwhile
        _watching = nil,                 -- the path our exists watch is on
        _evs = {},                       -- events of wait()s, set when the node is made
        _own = nil,                      -- the owned_node (ephemeral, not sequential)
        _blocked = false,                -- a persistent node of another holds our path
        _data_owed = false,              -- a set may not have reached the node: write again
        _writing = false,                -- that write is in flight
    }, mt)
    if self.ephemeral and not self.sequential then
        self._own = owned_node.new(client, path, { data = data, on_gone = own_gone(self) })
    elseif self.sequential then
        local parent, name = match(path, "^(.*)/([^/]+)$")
        self._q = queue.new(client, parent == "" and "/" or parent, {
            marker = name, rule = queue.rule_always, data = data,
            persistent = not self.ephemeral,
        })
    end
    self._listener = client:on_state(function(state)
        if state == "connected" then
            self:_ensure()
        end
    end)
    self:_ensure()
    return self
end


-- Our node is present: note it, and wake whoever waits for it.
function _M:_present(path)
    self._path, self._sid = path, self.client:session_id()
    self._blocked = false
    self._data_owed = false          -- created (or adopted) with our latest data
    self:_wake()
end


function _M:_wake()
    local evs = self._evs
    if #evs > 0 then
        self._evs = {}
        for i = 1, #evs do evs[i]:set() end
    end
end


-- The node went (deleted, or its session ended): forget it, create again.
local function node_event(ev, self)
    if ev.path ~= self._watching then
        return
    end
    self._watching = nil
    if self._closed or ev.path ~= self._path then
        return
    end
    if ev.type == "deleted" or ev.type == "session" then
        self._path = nil
    end
    self:_ensure()     -- re-creates it, or watches it again (a data change)
end


-- Our owned node went (deleted by someone else, or our session ended).
own_gone = function(self)
    return function()
        if self._closed then
            return
        end
        self._path = nil
        self:_ensure()
    end
end


-- Watch closures are made outside the frames that wait (in nginx a waiting
-- coroutine may be gone, locals and all, when the watch fires).
local function node_watcher(self)
    return function(ev) node_event(ev, self) end
end

local function other_watcher(self)
    return function(ev)
        if ev.type == "deleted" and not self._closed and not self._path then
            self._blocked = false
            self:_ensure()
        end
    end
end


-- Watches our node (a delete re-creates it). Returns false when it is
-- gone already, true otherwise (also when the connection dropped: the
-- next "connected" looks again).
function _M:_watch()
    local path = self._path
    if self._watching == path then
        return true
    end
    local stat, err = self.client:exists(path, node_watcher(self))
    if stat then
        self._watching = path
        return true
    end
    if stat == false or err == "nonode" then
        self._path = nil
        return false
    end
    return true
end


-- A node at our path that is someone else's: create ours when it goes.
function _M:_wait_for_other(path)
    self.client:exists(path, other_watcher(self))
end


-- Creates the node unless it is present (idempotent; one at a time). Asked
-- while creating (callbacks run while a request waits), again after: that
-- create may fail for the change that asked (made in a session that ended).
function _M:_ensure()
    self._again = self._busy
    if self._closed or self._busy then
        return
    end
    local client = self.client
    if client:state() ~= "connected" then
        return            -- the next "connected" brings us back
    end
    if self._own then
        if self._own:held() then
            return self:_write_owed()
        end
        self._path = nil
    elseif self._path and self.ephemeral and self._sid ~= client:session_id() then
        self._path, self._watching = nil, nil   -- the session that owned it ended
    end
    if self._path and not self._own and self:_watch() then
        return self:_write_owed()
    end
    self._busy = true
    local ok, err
    for _ = 1, retries.MAX_RACES do    -- again only when the node went between create and watch
        ok, err = self:_create()
        if ok ~= false then
            break
        end
    end
    self._busy = false
    -- Not logged: what the next "connected" tries again (a request that may
    -- have failed on the connection), or a node not ours yet (we watch it).
    if not ok and err and not (transient[err] or unknown_outcome[err] or err == "closed"
                               or err == "nodeexists") then
        client:log("error", "persistent node " .. self.want .. ": " .. tostring(err))
    end
    if ok and self._closed then
        self:_delete()    -- closed while we were creating it
    elseif self._again then
        return self:_ensure()
    end
end


-- One try: true (present and watched), false (gone at once: again), or nil, err.
function _M:_create()
    local client = self.client
    if self.sequential then
        local ok, err = self._q:enter(client:session_timeout())
        if not ok then
            return nil, err
        end
        self:_present(self._q:node())
        return self:_watch()
    elseif self._own then
        return self:_create_owned()
    end
    local path, err = client:create(self.want, self.data, {
        ephemeral = self.ephemeral or nil, parents = "container",
    })
    if path then
        self:_present(path)
        return self:_watch()
    end
    if err ~= "nodeexists" then
        return nil, err
    end
    local stat, serr = client:exists(self.want)
    if stat == false then
        return false                     -- gone meanwhile: again
    elseif not stat then
        return nil, serr
    end
    if self.ephemeral and stat.ephemeral_owner ~= client:session_id() then
        self:_wait_for_other(self.want)  -- another live session's: ours when it goes
        return nil, "nodeexists"
    end
    -- Ours already (a lost create reply), or a persistent node to adopt.
    if self.data ~= nil then
        client:set(self.want, self.data)
    end
    self:_present(self.want)
    return self:_watch()
end


-- One try of an ephemeral node at our path (see _create).
function _M:_create_owned()
    local ok, stat = self._own:create()
    if ok then
        self:_present(self.want)
        return true
    elseif ok == nil or not stat then
        return ok, stat                  -- an error; or false: gone meanwhile, again
    end
    -- Another's node: an ephemeral one goes with its session; a persistent
    -- one only by a delete, so wait() says so instead of timing out.
    self._blocked = stat.ephemeral_owner == nil
    self:_wait_for_other(self.want)
    if self._blocked then
        self:_wake()
    end
    return nil, "nodeexists"
end


function _M:_delete()
    local path = self._path
    self._path, self._watching = nil, nil
    if self.sequential then
        return self._q:leave()
    elseif self._own then
        return self._own:delete()
    end
    if path then
        local ok, err = self.client:delete(path)
        if not ok and err ~= "nonode" then
            return nil, err
        end
    end
    return true
end


--- Waits until the node is present, at most `timeout` seconds (nil: the
--- session timeout). "nodeexists" at once when a persistent node of
--- someone else holds an ephemeral one's path (it never goes by itself).
---@return true|nil ok, string? err "timeout" | "closed" | "nodeexists"
function _M:wait(timeout)
    check_self(self, "wait")
    args.check_timeout(timeout, "wait", 1)
    local client = self.client
    local deadline = deadlines.deadline(timeout or client:session_timeout())
    while true do
        if self._closed or contract.is_closed(client) then
            return nil, "closed"
        end
        self:_ensure()
        if self._path then
            return true
        elseif self._blocked then
            return nil, "nodeexists"     -- a persistent node of another: no timeout
        end
        local left = deadlines.remaining(deadline)
        if left == 0 then
            return nil, "timeout"
        end
        -- Woken when the node is made (a state change or a watch does it).
        local ev = client:waiter():event()
        self._evs[#self._evs + 1] = ev
        ev:wait(left)
    end
end


--- The node's path while it is present (nil otherwise).
function _M:path()
    check_self(self, "path")
    return self._path
end


-- The node's path while it is present in this session, for a write.
function _M:_write_path()
    if self._own then
        return self._own:held() and self.want or nil
    end
    return self._path
end


local function owed_reply(self, data)
    return function(stat, err)
        self._writing = false
        if stat then
            if self.data == data then
                self._data_owed = false
            end
            return self:_write_owed()     -- newer data owed meanwhile
        elseif not (transient[err] or unknown_outcome[err]) then
            self._data_owed = false       -- the node went: its re-creation has our data
        end
        -- failed on the connection again: the next "connected" tries (no loop)
    end
end


-- A set that failed on the connection may or may not have reached the
-- node, which stays in the same session: our latest data is written again
-- in the background, now if connected, else at the next "connected"
-- (Curator's PersistentNode writes its data again at every reconnect).
function _M:_write_owed()
    if not self._data_owed or self._writing or self._closed then
        return
    end
    local path = self:_write_path()
    if not path or self.client:state() ~= "connected" then
        return
    end
    self._writing = true
    self.client:send("set", path, self.data):on_done(owed_reply(self, self.data))
end


-- The reply of a set: one that failed on the connection is owed.
local function set_result(self, stat, err)
    if stat then
        self._data_owed = false
    elseif transient[err] or unknown_outcome[err] then
        self._data_owed = true
        self:_write_owed()
    end
    return stat, err
end


--- Sets the node's data now (if present) and for every re-creation. A set
--- that fails on the connection (it may or may not have been applied)
--- returns its error and is written again once connected in the same
--- session.
---@return table|nil stat, string? err
function _M:set(data)
    check_self(self, "set")
    args.check_string(data, "set", 1, "data")
    self.data = data
    if self._q then
        self._q.data = data
    elseif self._own then
        return set_result(self, self._own:set(data))
    end
    if not self._path then
        return nil, "nonode"
    end
    return set_result(self, self.client:set(self._path, data))
end


--- Stops keeping the node and deletes it.
---@return true|nil ok, string? err
function _M:close()
    check_self(self, "close")
    if self._closed then
        return true
    end
    self._closed = true
    self.client:remove_listener(self._listener)
    if self._busy then
        return true       -- the create in progress deletes what it made
    end
    return self:_delete()
end


_M.mt = mt
return _M
