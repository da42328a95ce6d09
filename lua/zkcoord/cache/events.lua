--- zkcoord.cache.events: what makes the mirror read again.
--
-- Owns the cache's watch callbacks and its session-state listener: a
-- watch event reads its node again (or removes it: "deleted"), a
-- reconnect sends the reads owed, a new session reads every node again.
-- Rules: the C client keeps a session's watches across a connection loss
-- and re-sends them on reconnect, so "suspended" needs nothing but the
-- owed reads; after session loss every watch is gone: once the new
-- session is connected every node is read again with new watches, parents
-- first, and only real differences are reported. The callbacks are made
-- in small frames that never wait (in nginx a waiting coroutine may be
-- gone, locals and all, when they run).
-- Part of the cache's class: these are its private methods (see
-- zkcoord.cache), called through self.
local pairs, ipairs = pairs, ipairs
local sort = table.sort

local _M = {}


local function data_watcher(self)
    return function(ev) self:_event(ev, "data") end
end

local function child_watcher(self)
    return function(ev) self:_event(ev, "children") end
end

local function state_listener(self)
    return function(new) self:_state_change(new) end
end


-- Makes the watch callbacks (self._on_data, self._on_child) and listens
-- to the client's session states (self._on_state).
function _M:_listen()
    self._on_data = data_watcher(self)
    self._on_child = child_watcher(self)
    self._on_state = state_listener(self)
    self.client:on_state(self._on_state)
end


-- A data or child watch (`kind` "data" | "children") fired.
function _M:_event(ev, kind)
    if self._closed then return end
    local node = self._nodes[ev.path]
    if not node then return end
    local t = ev.type
    if t == "session" or t == "notwatching" then
        return                          -- the new session reads everything again
    end
    if kind == "data" then              -- used up: the next read sets a new one
        node.dsid = nil
    else
        node.csid = nil
    end
    if t == "deleted" then
        if node == self._root then
            self:_root_gone(node)
            self:_read(self._root, "data")
        else
            self:_remove(node)
        end
    else
        self:_read(node, kind)
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
            self:_read(node, "data")
            self:_read(node, "children")
        end
    else
        for _, node in ipairs(owed) do
            local d, c = node.dowed, node.cowed
            node.dowed, node.cowed, node.retries = nil, nil, nil
            if d then self:_read(node, "data") end
            if c then self:_read(node, "children") end
        end
    end
    self:_after()
end

return _M
