--- zkcoord.service_discovery: services registered and found in ZooKeeper,
--- as Curator's ServiceDiscovery (curator-x-discovery) and Dubbo's registry
--- lay them out, so a gateway in Lua finds the Java services and the other
--- way round.
--
--   local sd = client:service_discovery("/services")
--   local reg = sd:register{ name = "api", address = "10.0.0.5", port = 8080,
--                            payload = { zone = "a" } }
--   assert(reg:wait(5))                     -- registered
--   local list = sd:instances("api")        -- read from the server now
--   sd:on_change("api", function(instances) ... end)   -- kept current
--   local p = sd:provider("api", { strategy = "round_robin" })
--   local inst = p:get()                    -- from memory
--   reg:unregister()
--
-- Node layout (Curator's): <base>/<name>/<id>, data = the instance as
-- Curator's JsonInstanceSerializer writes it (zkcoord.discovery.curator):
-- {"name":..,"id":..,"address":..,"port":..,"sslPort":..,"payload":..,
--  "registrationTimeUTC":..,"serviceType":"DYNAMIC","uriSpec":..}.
-- A DYNAMIC instance is an ephemeral node, STATIC and PERMANENT ones
-- persistent (Curator's choice). Dubbo's layout (opts.format = "dubbo",
-- base "/dubbo"): <base>/<interface>/providers/<URL-encoded provider URL>;
-- read only (zkcoord.discovery.dubbo).
--
-- Registration is a zkcoord.persistent_node: present again, with its
-- latest data, as soon as a new session connects after our session was
-- lost (Curator re-registers on reconnect the same way), and created
-- again if someone deletes it.
--
-- Views (watch, on_change, nodes, provider): one per service name, kept by
-- watches (zkcoord.discovery.view); their answers come from memory, never
-- a round trip, and are current through connection loss and new sessions
-- as the cache and the watch recipes keep them.
local curator = require "zkcoord.discovery.curator"
local dubbo = require "zkcoord.discovery.dubbo"
local view_mod = require "zkcoord.discovery.view"
local provider_mod = require "zkcoord.discovery.provider"
local util = require "zkcoord.util"
local core = require "zkcoord.core"
local contract = require "zkcoord.contract"

local type, pairs, ipairs, tostring, tonumber, setmetatable =
    type, pairs, ipairs, tostring, tonumber, setmetatable
local find, sort = string.find, table.sort
local argerror = util.argerror

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = util.self_checker(mt, "service discovery", "sd")

local Registration = {}
local reg_mt = { __index = Registration }
local check_reg = util.self_checker(reg_mt, "service registration", "reg")

local OPT_KEYS = { "format", "payload_class", "timeout" }
local REGISTER_KEYS = { "name", "id", "address", "port", "ssl_port", "payload", "uri_spec",
                        "service_type", "enabled" }
local UPDATE_KEYS = { "address", "port", "ssl_port", "payload", "uri_spec", "enabled" }
local SERVICE_TYPES = { DYNAMIC = true, STATIC = true, PERMANENT = true }

--- The payload_class of a table payload without "@class" (a java.util.Map
--- on Curator's side: ServiceDiscoveryBuilder.builder(Map.class)).
_M.DEFAULT_PAYLOAD_CLASS = "java.util.LinkedHashMap"


-- A service name or an instance id: one node's name.
local function check_name(v, fname, n, what)
    if type(v) ~= "string" or v == "" or v == "." or v == ".." or find(v, "/", 1, true) then
        argerror(n, fname, what .. " must be a node name (a non-empty string without '/'), got "
                           .. (type(v) == "string" and ("%q"):format(v) or type(v)))
    end
    return v
end

local function check_port(v, fname, n, what)
    if v ~= nil and (type(v) ~= "number" or v % 1 ~= 0 or v < 0 or v > 65535) then
        argerror(n, fname, what .. " must be an integer 0..65535 or nil, got " .. tostring(v))
    end
    return v
end


---@class zkcoord.service_discovery_opts
---@field format "curator"|"dubbo"|nil the layout under base (default "curator")
---@field payload_class string? Jackson's "@class" of a table payload (default java.util.LinkedHashMap)
---@field timeout number? seconds a view's first load may take (default: the session timeout)

--- client:service_discovery(base_path, opts) -> sd. Nothing is read or
--- written until a method asks.
function _M.new(client, base, opts)
    contract.check_path(base, "service_discovery", 1)
    opts = util.check_opts(opts, OPT_KEYS, "service_discovery", 2)
    local format = opts.format or "curator"
    if format ~= "curator" and format ~= "dubbo" then
        argerror(2, "service_discovery", 'format must be "curator" or "dubbo"')
    end
    if opts.payload_class ~= nil then
        util.check_string(opts.payload_class, "service_discovery", 2, "payload_class")
    end
    util.check_timeout(opts.timeout, "service_discovery", 2)
    return setmetatable({
        client = client,
        base = base,
        format = format,
        payload_class = opts.payload_class or _M.DEFAULT_PAYLOAD_CLASS,
        timeout = opts.timeout,
        _views = {},          -- name -> view
        _listeners = {},      -- name -> { fn, ... }
        _regs = {},           -- registrations not unregistered
        _closed = false,
    }, mt)
end


function _M:_service_path(name)
    if self.format == "dubbo" then
        return dubbo.providers_path(self.base, name)
    end
    return (self.base == "/" and "" or self.base) .. "/" .. name
end


-- ---------------------------------------------------------------------------
-- Registration.

local function set_fields(inst, fields, fname)
    if fields.address ~= nil then
        inst.address = util.check_string(fields.address, fname, 1, "address")
    end
    if fields.port ~= nil then
        inst.port = check_port(fields.port, fname, 1, "port")
    end
    if fields.ssl_port ~= nil then
        inst.sslPort = check_port(fields.ssl_port, fname, 1, "ssl_port")
    end
    if fields.uri_spec ~= nil then
        inst.uriSpec = util.check_string(fields.uri_spec, fname, 1, "uri_spec")
    end
    if fields.enabled ~= nil then
        if type(fields.enabled) ~= "boolean" then
            argerror(1, fname, "enabled must be a boolean, got " .. type(fields.enabled))
        end
        inst.enabled = fields.enabled
    end
    if fields.payload ~= nil then
        inst.payload = fields.payload
    end
end

local function encode(self, inst, fname)
    local text, err = curator.encode(inst, self.payload_class)
    if not text then
        argerror(1, fname, "payload cannot be written as JSON: " .. tostring(err))
    end
    return text
end

--- Registers an instance: { name =, id = (default a uuid), address =,
--- port =, ssl_port =, payload = (a table, string, number or boolean),
--- uri_spec = ("{scheme}://{address}:{port}"), service_type = ("DYNAMIC",
--- "STATIC" or "PERMANENT"), enabled = }. Returns at once: reg:wait(t)
--- waits until the node is there.
---@return table reg
function _M:register(fields)
    check_self(self, "register")
    if self.format ~= "curator" then
        util.raise("'register' needs the curator format (Dubbo's providers are read only)", 2)
    end
    util.check_opts(fields, REGISTER_KEYS, "register", 1)
    if fields == nil then
        argerror(1, "register", "fields expected (name, address ...)")
    end
    local name = check_name(fields.name, "register", 1, "name")
    local id = fields.id == nil and core.uuid() or check_name(fields.id, "register", 1, "id")
    util.check_string(fields.address, "register", 1, "address")
    local stype = fields.service_type or "DYNAMIC"
    if not SERVICE_TYPES[stype] then
        argerror(1, "register", 'service_type must be "DYNAMIC", "STATIC" or "PERMANENT"')
    end
    local inst = setmetatable({ name = name, id = id, registrationTimeUTC = curator.wall_ms(),
                                serviceType = stype, enabled = true }, curator.instance_mt)
    set_fields(inst, fields, "register")
    local node = self.client:persistent_node(self:_service_path(name) .. "/" .. id,
                                             encode(self, inst, "register"),
                                             { ephemeral = stype == "DYNAMIC" })
    local reg = setmetatable({ sd = self, regs = self._regs, node = node, inst = inst }, reg_mt)
    self._regs[reg] = true
    return reg
end

--- Waits until the instance's node is present, at most `timeout` seconds
--- (nil: the session timeout).
---@return true|nil ok, string? err "timeout" | "closed"
function Registration:wait(timeout)
    check_reg(self, "wait")
    return self.node:wait(timeout)
end

--- The instance as registered (a copy).
function Registration:instance()
    check_reg(self, "instance")
    local copy = setmetatable({}, curator.instance_mt)
    for k, v in pairs(self.inst) do copy[k] = v end
    return copy
end

--- Changes fields (address, port, ssl_port, payload, uri_spec, enabled):
--- written now if the node is present, and kept for every re-creation.
---@return true|nil ok, string? err "nonode" (not present now; kept) or a ZooKeeper code
function Registration:update(fields)
    check_reg(self, "update")
    util.check_opts(fields, UPDATE_KEYS, "update", 1)
    local inst = self:instance()
    set_fields(inst, fields or {}, "update")
    local text = encode(self.sd, inst, "update")
    self.inst = inst
    local stat, err = self.node:set(text)
    if not stat then
        return nil, err
    end
    return true
end

--- Removes the instance (deletes its node, no more re-creation).
---@return true|nil ok, string? err
function Registration:unregister()
    check_reg(self, "unregister")
    self.regs[self] = nil
    return self.node:close()
end


-- ---------------------------------------------------------------------------
-- Reads from the server.

--- The service names under base (sorted), read now.
---@return string[]|nil names, string? err
function _M:names()
    check_self(self, "names")
    local names, err = util.children(self.client, self.base)
    if not names then
        return nil, err
    end
    sort(names)
    return names
end

--- The instances of `name`, read from the server now (Curator's
--- queryForInstances), sorted by id; nodes that are not instances are
--- left out.
---@return table[]|nil instances, string? err
function _M:instances(name)
    check_self(self, "instances")
    check_name(name, "instances", 1, "name")
    local client, path = self.client, self:_service_path(name)
    local ids, err = util.children(client, path)
    if not ids then
        return nil, err
    end
    local list = {}
    if self.format == "dubbo" then
        for _, id in ipairs(ids) do
            list[#list + 1] = dubbo.decode(id, name, curator.instance_mt)
        end
    else
        local paths = {}
        for i, id in ipairs(ids) do paths[i] = path .. "/" .. id end
        for _, data in ipairs(util.present_data(client, paths)) do
            list[#list + 1] = curator.decode(data)
        end
    end
    sort(list, function(a, b) return a.id < b.id end)
    return list
end


-- ---------------------------------------------------------------------------
-- Views.

local function view_updater(self, name)
    return function(view)
        local fns = self._listeners[name]
        if fns and fns[1] then
            util.call_all(self.client, fns, "service_discovery on_change", view:instances())
        end
    end
end

--- Starts keeping `name`'s instances in memory (once; later calls return
--- at once). Waits for the first load, at most opts.timeout.
---@return true|nil ok, string? err "timeout" | "closed" | a ZooKeeper code
function _M:watch(name)
    check_self(self, "watch")
    check_name(name, "watch", 1, "name")
    if self._closed then
        return nil, "closed"
    end
    if self._views[name] then
        return true
    end
    local make = self.format == "dubbo" and view_mod.dubbo or view_mod.curator
    local base = self.format == "dubbo" and self.base or self:_service_path(name)
    local view, err = make(self.client, base, name, self.timeout, view_updater(self, name))
    if not view then
        return nil, err
    end
    if self._views[name] then     -- another coroutine made it meanwhile
        view:close()
    else
        self._views[name] = view
    end
    return true
end

--- fn(instances) now and after every change of `name`'s instances (from
--- the view: watch(name) first, if needed). Returns fn.
---@return function|nil fn, string? err as watch()
function _M:on_change(name, fn)
    check_self(self, "on_change")
    check_name(name, "on_change", 1, "name")
    util.check_fn(fn, "on_change", 2)
    local ok, err = self:watch(name)
    if not ok then
        return nil, err
    end
    local fns = self._listeners[name] or {}
    self._listeners[name] = fns
    fns[#fns + 1] = fn
    util.call(self.client, fn, "service_discovery on_change", self._views[name]:instances())
    return fn
end

--- Stops calling fn for `name`.
function _M:remove_on_change(name, fn)
    check_self(self, "remove_on_change")
    for i, f in ipairs(self._listeners[name] or {}) do
        if f == fn then
            table.remove(self._listeners[name], i)
            return true
        end
    end
    return false
end

--- An instance's weight: Dubbo's parameter, or the payload's "weight" field
--- when it is a number >= 0, else 1.
function _M.weight(inst)
    local w = inst.weight
    if w == nil and type(inst.payload) == "table" then
        w = tonumber(inst.payload.weight)
    end
    return (w and w >= 0) and w or 1
end
local weight = _M.weight

--- `name`'s enabled instances from memory, in the shape of APISIX's
--- discovery modules: { { host =, port =, weight =, metadata = payload }, ... }
--- (the same table until the next change: read it, do not change it).
--- Never a round trip: nil, "invalid" until watch(name) (or on_change,
--- provider) started the view.
---@return table[]|nil nodes, string? err "invalid" | "closed"
function _M:nodes(name)
    check_self(self, "nodes")
    check_name(name, "nodes", 1, "name")
    if self._closed then
        return nil, "closed"
    end
    local view = self._views[name]
    if not view then
        return nil, "invalid"
    end
    return view:nodes(weight)
end

local function view_lister(self, name)
    return function()
        local view = self._views[name]
        return view and view:enabled() or {}
    end
end

--- A provider of `name` (Curator's ServiceProvider): p:get() picks one
--- enabled instance from the view by opts.strategy ("round_robin", the
--- default, "random", "sticky", "weighted").
---@return table|nil provider, string? err as watch()
function _M:provider(name, opts)
    check_self(self, "provider")
    check_name(name, "provider", 1, "name")
    opts = util.check_opts(opts, { "strategy" }, "provider", 2)
    local strategy = opts.strategy or "round_robin"
    if not provider_mod.STRATEGIES[strategy] then
        argerror(2, "provider", 'strategy must be "round_robin", "random", "sticky" or "weighted"')
    end
    local ok, err = self:watch(name)
    if not ok then
        return nil, err
    end
    return provider_mod.new(view_lister(self, name), weight, strategy)
end

--- Stops every view and unregisters every instance registered here
--- (Curator's ServiceDiscovery.close). Idempotent.
---@return true
function _M:close()
    check_self(self, "close")
    self._closed = true
    for name, view in pairs(self._views) do
        view:close()
        self._views[name] = nil
    end
    for reg in pairs(self._regs) do
        reg:unregister()
    end
    return true
end

_M.mt = mt
return _M
