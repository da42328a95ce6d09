-- multi_lock.lua: several locks taken as one, all or none (Curator's
-- InterProcessMultiLock): a transfer between two accounts locks both.
--   luajit examples/multi_lock.lua     ZKCOORD_SERVERS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../lua/?.lua;" .. here .. "/../lua/?/init.lua;" .. package.path
package.cpath = here .. "/../lua/?.so;" .. package.cpath
local zkcoord = require "zkcoord"

local servers = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local base = "/zkcoord-demo/accounts-" .. os.time()
local a = assert(zkcoord.connect { servers = servers })
local b = assert(zkcoord.connect { servers = servers })

-- Given in either order, the locks are taken in the same order: no deadlock.
local transfer = a:multi_lock({ base .. "/alice", base .. "/bob" })
local audit = b:multi_lock({ base .. "/bob", base .. "/alice" })

print("transfer:", transfer:run(function()
    -- both accounts are ours here; the audit waits
    print("audit while the transfer holds:", audit:acquire(0))   -- nil timeout
    return "moved 10 from alice to bob"
end, 5))
assert(audit:acquire(5))
print("audit holds both:", audit:held())
audit:release()
a:delete(base, { recursive = true })
a:close()
b:close()
