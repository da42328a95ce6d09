--- zkcoord.discovery.view: one service's instances, kept current in memory
--- by watches (internal; service_discovery's watch, on_change, nodes and
--- provider read it).
--
-- Curator's layout (<base>/<name>/<id>, JSON data): a zkcoord.cache of
-- <base>/<name> one level deep, which reads every instance's data and
-- keeps it current through reconnects and new sessions. Dubbo's layout
-- (the instance is in the node's name): a children watch (zkcoord.watch)
-- on <root>/<interface>/providers. Both deliver after every change; the
-- sorted list is rebuilt on the next read, not on every event.
local curator = require "zkcoord.discovery.curator"
local dubbo = require "zkcoord.discovery.dubbo"

local pairs, ipairs, next, setmetatable = pairs, ipairs, next, setmetatable
local sub, sort = string.sub, table.sort

local _M = {}
local mt = { __index = _M }

local function id_order(a, b)
    return a.id < b.id
end

local function new(client, name, on_update)
    return setmetatable({
        client = client,
        name = name,
        on_update = on_update,   -- on_update(view) after every change, once loaded
        by_id = {},              -- id -> instance
        list = nil,              -- sorted instances; nil: rebuild (so are the two below)
        enabled_list = nil,      -- the enabled ones
        nodes_list = nil,        -- the enabled ones in APISIX's shape
        source = nil,            -- the cache or the watch
        loaded = false,
    }, mt)
end

local function changed(self)
    self.list, self.enabled_list, self.nodes_list = nil, nil, nil
    if self.loaded then
        self.on_update(self)
    end
end

-- The cache's listener: an instance added, updated or removed.
local function cache_listener(self, root)
    local prefix = (root == "/" and "" or root) .. "/"
    return function(ev)
        if ev.type == "initialized" then
            return
        end
        local id = sub(ev.path, 1, #prefix) == prefix and sub(ev.path, #prefix + 1)
        if not id then            -- the service's node itself: gone means no instance
            if ev.type == "removed" and next(self.by_id) then
                self.by_id = {}
                changed(self)
            end
            return
        end
        local inst = ev.type ~= "removed" and curator.decode(ev.data) or nil
        if inst or self.by_id[id] then   -- data that is not an instance is not listed
            self.by_id[id] = inst
            changed(self)
        end
    end
end

--- A view of Curator instances under `root` (<base>/<name>); nil, err
--- when the first load did not finish within `timeout`.
function _M.curator(client, root, name, timeout, on_update)
    local self = new(client, name, on_update)
    local cache, err = client:cache(root, { depth = 1, timeout = timeout })
    if not cache then
        return nil, err
    end
    self.source = cache
    cache:on_change(cache_listener(self, root))
    self.loaded = true
    return self
end

local function providers_listener(self, interface)
    return function(names)
        local by_id = {}
        for _, n in ipairs(names or {}) do
            by_id[n] = self.by_id[n] or dubbo.decode(n, interface, curator.instance_mt)
        end
        self.by_id = by_id
        changed(self)
    end
end

--- A view of Dubbo's providers of `interface` under `root` ("/dubbo").
function _M.dubbo(client, root, interface, timeout, on_update)
    local self = new(client, interface, on_update)
    local w, err = client:watch(dubbo.providers_path(root, interface),
                                providers_listener(self, interface),
                                { kind = "children", timeout = timeout })
    if not w then
        return nil, err
    end
    self.source = w
    self.loaded = true
    return self
end

--- The instances, sorted by id (the same table until the next change:
--- callers copy before they change it).
function _M:instances()
    local list = self.list
    if not list then
        list = {}
        for _, inst in pairs(self.by_id) do
            list[#list + 1] = inst
        end
        sort(list, id_order)
        self.list = list
    end
    return list
end

--- The enabled instances, sorted by id (shared as instances() is).
function _M:enabled()
    local out = self.enabled_list
    if not out then
        out = {}
        for _, inst in ipairs(self:instances()) do
            if inst.enabled ~= false then
                out[#out + 1] = inst
            end
        end
        self.enabled_list = out
    end
    return out
end

--- The enabled instances as { host =, port =, weight = weight(inst),
--- metadata = payload } (shared as instances() is: a balancer asks per
--- request, and the list changes far less often).
function _M:nodes(weight)
    local out = self.nodes_list
    if not out then
        out = {}
        for i, inst in ipairs(self:enabled()) do
            out[i] = { host = inst.address, port = inst.port, weight = weight(inst),
                       metadata = inst.payload }
        end
        self.nodes_list = out
    end
    return out
end

function _M:close()
    local s = self.source
    self.source = nil
    if s and s.close then
        s:close()
    elseif s then
        s:cancel()
    end
end

return _M
