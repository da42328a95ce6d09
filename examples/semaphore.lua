-- semaphore.lua: at most 2 holders at once, across processes.
--
--   luajit examples/semaphore.lua             one process (~1 s): three sessions, two leases
--   for i in 1 2 3 4 5; do luajit examples/semaphore.lua w$i & done; wait
--                                             five workers take turns, two at a time
-- args: [worker id] [semaphore path]      ZKCOORD_SERVERS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local top = here .. "/.."
package.path = top .. "/lua/?.lua;" .. top .. "/lua/?/init.lua;" .. package.path
package.cpath = top .. "/lua/?.so;" .. package.cpath

local zkcoord = require "zkcoord"

local id = arg and arg[1]
local path = arg and arg[2] or "/zkcoord-demo/semaphore"
local hosts = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local MAX = 2

local function connect()
    local c, err, detail = zkcoord.connect { servers = hosts }
    if not c then
        print("connect failed: " .. tostring(err) .. " " .. tostring(detail))
        os.exit(1)
    end
    return c
end

if id then
    -- One of several workers.
    local client = connect()
    local sem = client:semaphore(path, MAX, { data = id })
    local lease, err, detail = sem:acquire(15)
    if not lease then
        print(id .. ": no lease: " .. tostring(err) .. " " .. tostring(detail or ""))
    else
        lease:on_lost(function(reason) print(id .. ": lease lost (" .. reason .. ")") end)
        print(("%s: holding a lease (%d of %d in use)"):format(id, sem:leases(), MAX))
        client:waiter():sleep(0.5)       -- the limited work
        print(id .. ": done")
        lease:release()
    end
    client:close()
    return
end

-- Alone: three sessions in this process share two leases.
local a, b, c = connect(), connect(), connect()
local sa, sb, sc = a:semaphore(path, MAX), b:semaphore(path, MAX), c:semaphore(path, MAX)
local la = assert(sa:acquire(5))
local lb = assert(sb:acquire(5))
print(("a and b hold leases: %d of %d in use"):format(sa:leases(), MAX))
print("c tries once: ", sc:acquire(0))                    -- nil, "timeout"
print("c waits 0.3 s: ", sc:acquire(0.3))                 -- nil, "timeout"
la:release()
print("a released")
local lc = assert(sc:acquire(5))
print("c got a lease: held = " .. tostring(lc:held()))
-- Everyone must agree on the number of leases (it is stored in the path's data).
print("a semaphore of 3 on the same path: ", a:semaphore(path, 3):acquire(0))   -- nil, "invalid"
lb:release()
lc:release()
a:close()
b:close()
c:close()
