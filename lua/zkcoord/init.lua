--- zkcoord: ZooKeeper coordination for Lua.
--
--   local zkcoord = require "zkcoord"
--   local client = assert(zkcoord.connect{ servers = "127.0.0.1:2181" })
--
-- The client (zkcoord.client) wraps the C core (zkcoord.core); recipes
-- (lock, rwlock, counter, watch, ...) are Lua modules on the client's
-- public API, reachable as client:lock(path), client:counter(path) ...
-- The Lua running us, as a build would need to know it.
local function this_lua()
    local jit = rawget(_G, "jit")
    if type(jit) == "table" and jit.version then
        return jit.version .. " (the Lua 5.1 API)"
    end
    return _VERSION
end


-- The build command for this Lua (scripts/build.sh's flags).
local function build_hint()
    local v = _VERSION:match("^Lua (5%.%d)$")
    if rawget(_G, "jit") or v == nil then
        return ("build it for %s: `bash scripts/build.sh` in the source tree (it writes "
                .. "lua/zkcoord/core.so), or `luarocks make rockspec/zkcoord-scm-1.rockspec`")
               :format(this_lua())
    end
    return ("build it for %s: `bash scripts/build.sh --lua %s` in the source tree (it writes "
            .. "build-lua%s/lib/zkcoord/core.so: put build-lua%s/lib/?.so on package.cpath), "
            .. "or `luarocks --lua-version %s make rockspec/zkcoord-scm-1.rockspec`")
           :format(this_lua(), v, v, v, v)
end


-- The C core, or an error that says which file was looked for or found,
-- for which Lua, and how to build it: Lua's own message is a bare list of
-- paths, or "undefined symbol: lua_newuserdatauv" for a core built for
-- another Lua.
local function load_core()
    local ok, core = pcall(require, "zkcoord.core")
    if ok then
        return core
    end
    local tried = {}
    for template in package.cpath:gmatch("[^;]+") do
        local file = template:gsub("%?", "zkcoord/core")
        local f = io.open(file, "rb")
        if f then
            f:close()
            error(("zkcoord: the C core %s was found but does not load in %s: %s. It was "
                   .. "probably built for another Lua, or is broken; %s"):format(
                  file, this_lua(), tostring(core), build_hint()), 0)
        end
        tried[#tried + 1] = file
    end
    error(("zkcoord: the C core (zkcoord/core.so) is not built for %s: looked for %s; %s")
          :format(this_lua(), table.concat(tried, ", "), build_hint()), 0)
end

local core = load_core()
local client = require "zkcoord.client"
local contract = require "zkcoord.contract"

local _M = {
    _VERSION = require("zkcoord.version"),
    version = require("zkcoord.version"),
    zookeeper_version = core.zookeeper_version,
    errors = require "zkcoord.errors",
}

--- Opens a client: `zkcoord.connect{ servers = "127.0.0.1:2181", ... }`
-- (options in `zkcoord.client.connect`).
-- @function connect
_M.connect = client.connect

--- Seconds on a monotonic clock, as the library's timeouts use.
-- @function now
_M.now = core.now

--- Raises unless `path` is an absolute ZooKeeper path.
-- @function check_path
_M.check_path = contract.check_path

-- Recipes attach themselves to the client as methods: client:lock(path, opts)
-- is require("zkcoord.lock").new(client, path, opts). Loaded on first use.
local RECIPES = {
    lock = "zkcoord.lock",
    rwlock = "zkcoord.rwlock",
    counter = "zkcoord.counter",
    watch = "zkcoord.watch",
    election = "zkcoord.election",
    semaphore = "zkcoord.semaphore",
    barrier = "zkcoord.barrier",
    double_barrier = "zkcoord.double_barrier",
    queue = "zkcoord.queue",
    line = "zkcoord.line",
    work_queue = "zkcoord.work_queue",
    persistent_node = "zkcoord.persistent_node",
    group = "zkcoord.group",
    partitioner = "zkcoord.partitioner",
    multi_lock = "zkcoord.multi_lock",
    cache = "zkcoord.cache",
    service_discovery = "zkcoord.service_discovery",
    lease = "zkcoord.lease",
    multi_lease = "zkcoord.multi_lease",
}

for method, modname in pairs(RECIPES) do
    if client[method] == nil then
        client[method] = function(self, ...)
            -- client.lock(x, ...) with x not a client: say so, at the caller
            if getmetatable(self) ~= contract.mt then
                error(("'%s' must be called on a zkcoord client (use client:%s(...))")
                      :format(method, method), 2)
            end
            return require(modname).new(self, ...)
        end
    end
end

-- zkcoord.lock (zkcoord.election ...) is the recipe's module, loaded on first
-- use, so zkcoord.lock.revoke(client, node) works without a require of its own.
setmetatable(_M, { __index = function(t, k)
    local modname = RECIPES[k]
    if modname then
        local m = require(modname)
        rawset(t, k, m)
        return m
    end
end })

return _M
