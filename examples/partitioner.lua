-- partitioner.lua: 12 partitions shared by the live members; a member that
-- leaves gives its partitions to the others (kazoo's SetPartitioner idea).
--   luajit examples/partitioner.lua     ZKCOORD_SERVERS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../lua/?.lua;" .. here .. "/../lua/?/init.lua;" .. package.path
package.cpath = here .. "/../lua/?.so;" .. package.cpath
local zkcoord = require "zkcoord"

local servers = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local path = "/zkcoord-demo/partitions-" .. os.time()
local clients, members = {}, {}
for i, id in ipairs { "a", "b", "c" } do
    clients[i] = assert(zkcoord.connect { servers = servers })
    members[i] = assert(clients[i]:partitioner(path, { partitions = 12, id = id }))
    members[i]:on_change(function(owned)
        print(("member %s owns { %s }"):format(id, table.concat(owned, ", ")))
    end)
end

-- Every member computes the same assignment; wait until each owns its share.
local function settled(n)
    local total = 0
    for i = 1, n do
        local owned = members[i]:owned()
        if #owned ~= 12 / n then return false end
        total = total + #owned
    end
    return total == 12
end
local deadline = zkcoord.now() + 10
while not settled(3) and zkcoord.now() < deadline do
    clients[1]:dispatch(0.05)
    clients[2]:dispatch(0.05)
    clients[3]:dispatch(0.05)
end
print("three members, 4 partitions each:", settled(3))

members[3]:close()                                  -- c leaves: a and b take 6 each
clients[3]:close()
deadline = zkcoord.now() + 10
while not settled(2) and zkcoord.now() < deadline do
    clients[1]:dispatch(0.05)
    clients[2]:dispatch(0.05)
end
print("two members, 6 partitions each:", settled(2))
for i = 1, 2 do
    members[i]:close()
end
clients[1]:delete(path, { recursive = true })
clients[1]:close()
clients[2]:close()
