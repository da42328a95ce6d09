rockspec_format = "3.0"
package = "zkcoord"
version = "scm-1"
source = {
   url = "git+file://.",
}
description = {
   summary = "ZooKeeper coordination for Lua: client, locks, rwlocks, counters, watches, elections",
   detailed = [[
A small C core over libzookeeper_mt (asynchronous, pipelined, never calls
Lua from ZooKeeper's threads) and recipes in Lua on top: lock, read-write
lock, counter, watch, election, semaphore, barriers, and the sequential
queue primitive to script your own. Works in plain LuaJIT and in
OpenResty/nginx workers without blocking them.
]],
   license = "Apache-2.0",
}
dependencies = {
   "lua >= 5.1",
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
      ZKCOORD_OUTPUT_DIR = "$(BUILD_DIR)/lib/zkcoord",
   },
   install = {
      -- the zkcoord command (a LuaJIT script): luarocks' wrapper runs it
      -- with its configured interpreter, which must be luajit
      bin = { zkcoord = "bin/zkcoord" },
   },
}
test = {
   type = "busted",
}
