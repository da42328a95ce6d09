-- persistent_node.lua: a node kept present while this process lives: an
-- ephemeral node re-created (with the latest data) after a session
-- expiry or a delete by someone else (Curator's PersistentNode).
--   luajit examples/persistent_node.lua     ZKCOORD_SERVERS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../lua/?.lua;" .. here .. "/../lua/?/init.lua;" .. package.path
package.cpath = here .. "/../lua/?.so;" .. package.cpath
local zkcoord = require "zkcoord"

local servers = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local path = "/zkcoord-demo/instances-" .. os.time() .. "/worker-1"
local client = assert(zkcoord.connect { servers = servers })
local admin = assert(zkcoord.connect { servers = servers })

local node = client:persistent_node(path, "starting", { ephemeral = true })
assert(node:wait(5))
print("there:", (admin:get(path)))                    -- starting
assert(node:set("ready"))

admin:delete(path)                                     -- someone deletes it ...
local deadline = zkcoord.now() + 5
repeat
    client:dispatch(0.05)                              -- ... it comes back
until admin:exists(path) or zkcoord.now() > deadline
print("back:", (admin:get(path)))                      -- ready

node:close()                                           -- deleted, and no longer kept
print("after close:", admin:exists(path))              -- false
admin:delete(path:match("^(.*)/"))
admin:close()
client:close()
