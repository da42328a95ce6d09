-- The development rockspec: builds the checkout it sits in with
-- `luarocks make rockspec/zkcoord-scm-1.rockspec` (add --local or --tree <dir>
-- as a normal user), or clones the repository's default branch for
-- `luarocks pack` / `luarocks install`.
rockspec_format = "3.0"
package = "zkcoord"
version = "scm-1"
source = {
   url = "git+https://github.com/zkcoord/zkcoord.git",
}
description = {
   summary = "ZooKeeper coordination for Lua: client, locks, rwlocks, counters, watches, elections",
   detailed = [[
A small C core over libzookeeper_mt (asynchronous, pipelined, never calls
Lua from ZooKeeper's threads) and, in Lua on top, a client and recipes:
lock, read-write lock, semaphore, multi-lock, counter, watch, tree cache,
election, barriers, work queue, group, partitioner and persistent node,
the waiting ones drivers on the line engine (zkcoord.line) you script your
own with. Runs on Lua 5.1 to 5.4 and LuaJIT, in plain programs and in
OpenResty/nginx workers without blocking them. zkcoord.testing starts
throwaway ZooKeeper servers and ensembles for your own specs.
]],
   homepage = "https://github.com/zkcoord/zkcoord",
   issues_url = "https://github.com/zkcoord/zkcoord/issues",
   license = "Apache-2.0",
   labels = { "zookeeper", "coordination", "lock", "openresty" },
}
supported_platforms = { "unix" }
dependencies = {
   "lua >= 5.1, < 5.5",
   -- zkcoord.service_discovery reads Curator's JSON with it. OpenResty and
   -- Debian (lua-cjson) ship it outside luarocks: tell luarocks so with
   -- rocks_provided = { ["lua-cjson"] = "2.1.0-1" } (README, Install).
   "lua-cjson >= 2.1.0",
}
external_dependencies = {
   ZOOKEEPER = {
      header = "zookeeper/zookeeper.h",
      library = "zookeeper_mt",
   },
}
build = {
   type = "cmake",
   variables = {
      LUA_INCDIR = "$(LUA_INCDIR)",
      LUADIR = "$(LUADIR)",
      LIBDIR = "$(LIBDIR)",
      ZOOKEEPER_INCDIR = "$(ZOOKEEPER_INCDIR)",
      ZOOKEEPER_LIBDIR = "$(ZOOKEEPER_LIBDIR)",
      CMAKE_C_FLAGS = "$(CFLAGS)",
      CMAKE_BUILD_TYPE = "Release",
      ZKCOORD_WERROR = "OFF",
   },
   install = {
      -- the zkcoord command (any Lua: 5.1 to 5.4, LuaJIT): luarocks' wrapper
      -- runs it with the interpreter luarocks is configured with
      bin = { zkcoord = "bin/zkcoord" },
   },
}
test = {
   type = "busted",
}
