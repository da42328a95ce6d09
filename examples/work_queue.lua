-- work_queue.lua: producers put items, consumers take them, each item is
-- done once (kazoo's LockingQueue layout, so kazoo consumers share it).
--   luajit examples/work_queue.lua     ZKCOORD_SERVERS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../lua/?.lua;" .. here .. "/../lua/?/init.lua;" .. package.path
package.cpath = here .. "/../lua/?.so;" .. package.cpath
local zkcoord = require "zkcoord"

local servers = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local producer = assert(zkcoord.connect { servers = servers })
local consumer = assert(zkcoord.connect { servers = servers })
local path = "/zkcoord-demo/work-" .. os.time()

local q = producer:work_queue(path)
for i = 1, 3 do
    assert(q:put("job " .. i))
end
assert(q:put("urgent job", { priority = 1 }))     -- lower first: taken before the others
producer:close()                                   -- the items stay

local wq = consumer:work_queue(path, { id = "worker-1" })
local item = assert(wq:take(5))
print("took", item.data, "and gave it back:", item:release())
-- process: take, run fn, ack when it returns (give back if it raises)
for _ = 1, 4 do
    local result, err = wq:process(function(data) return "done " .. data end, 5)
    print(result or ("no item: " .. tostring(err)))
end
print("left in the queue:", wq:len())               -- 0
print("empty queue:", wq:take(0.2))                 -- nil, "timeout"
consumer:delete(path, { recursive = true })
consumer:close()
