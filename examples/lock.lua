-- lock.lua: take a distributed lock, do some work, release it.
-- Run several at once to see them take turns:
--   for i in 1 2 3; do luajit examples/lock.lua $i & done; wait
-- args: [worker id] [lock path] [rounds]
local dir = (arg and arg[0] or ""):match("^(.*)/examples/[^/]*$") or "."
package.path = dir .. "/lua/?.lua;" .. dir .. "/lua/?/init.lua;" .. package.path
package.cpath = dir .. "/lua/?.so;" .. package.cpath

local zkcoord = require "zkcoord"

local id = arg and arg[1] or "1"
local path = arg and arg[2] or "/zkcoord-demo/lock"
local rounds = tonumber(arg and arg[3]) or 3

local client = assert(zkcoord.connect { servers = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181" })
local lock = client:lock(path, { data = "worker " .. id })
lock:on_lost(function(reason)
    print(("worker %s: lock lost (%s): stop touching the resource"):format(id, reason))
end)

for round = 1, rounds do
    local ok, err = lock:acquire(10)
    if not ok then
        print(("worker %s: could not lock: %s"):format(id, err))
    else
        print(("worker %s: round %d holds %s (fencing token %d)"):format(
            id, round, path, lock:token()))
        client:waiter():sleep(0.05)      -- the critical section
        lock:release()
    end
end
client:close()
