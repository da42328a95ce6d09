-- rwlock.lua: readers share a read-write lock, a writer has it alone.
-- Run several at once to see readers overlap and writers take turns:
--   for i in 1 2; do luajit examples/rwlock.lua $i /zkcoord-demo/rwlock write & done
--   for i in 3 4 5; do luajit examples/rwlock.lua $i /zkcoord-demo/rwlock read & done; wait
-- args: [worker id] [lock path] [read|write] [rounds]
local dir = (arg and arg[0] or ""):match("^(.*)/examples/[^/]*$") or "."
package.path = dir .. "/lua/?.lua;" .. dir .. "/lua/?/init.lua;" .. package.path
package.cpath = dir .. "/lua/?.so;" .. package.cpath

local zkcoord = require "zkcoord"

io.stdout:setvbuf("line")   -- several run at once: show lines as they happen

local id = arg and arg[1] or "1"
local path = arg and arg[2] or "/zkcoord-demo/rwlock"
local mode = arg and arg[3] or "read"
local rounds = tonumber(arg and arg[4]) or 3
if mode ~= "read" and mode ~= "write" then
    io.stderr:write("mode must be 'read' or 'write', got ", mode, "\n")
    os.exit(2)
end

local client = assert(zkcoord.connect { servers = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181" })
local rw = client:rwlock(path, { data = "worker " .. id })
local lock = mode == "write" and rw:write_lock() or rw:read_lock()
lock:on_lost(function(reason)
    print(("worker %s: %s lock lost (%s): stop using the resource"):format(id, mode, reason))
end)

local t0 = zkcoord.now()
local function stamp()
    return ("%6.3fs"):format(zkcoord.now() - t0)
end

for round = 1, rounds do
    local ok, err = lock:acquire(20)
    if not ok then
        print(("worker %s: could not take the %s lock: %s"):format(id, mode, err))
    else
        print(("%s worker %s: round %d %s (%s, token %d)"):format(stamp(), id, round,
            mode == "write" and "writing alone" or "reading, others may read too",
            lock:node():match("[^/]+$"), lock:token()))
        client:waiter():sleep(mode == "write" and 0.05 or 0.1)   -- the critical section
        print(("%s worker %s: round %d done %s"):format(stamp(), id, round, mode))
        lock:release()
    end
end
client:close()
