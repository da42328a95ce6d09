--- zkcoord: ZooKeeper coordination for Lua.
--
--   local zkcoord = require "zkcoord"
--   local client = assert(zkcoord.connect{ servers = "127.0.0.1:2181" })
--
-- The client (zkcoord.client) wraps the C core (zkcoord.core); recipes
-- (lock, rwlock, counter, watch, ...) are Lua modules on the client's
-- public API, reachable as client:lock(path), client:counter(path) ...
local core = require "zkcoord.core"
local client = require "zkcoord.client"

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
_M.check_path = client.check_path

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
}

for method, modname in pairs(RECIPES) do
    if client[method] == nil then
        client[method] = function(self, ...)
            -- client.lock(x, ...) with x not a client: say so, at the caller
            if getmetatable(self) ~= client.mt then
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
