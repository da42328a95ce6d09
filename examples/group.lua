-- group.lua: group membership (Curator's GroupMember, kazoo's Party): each
-- member sees who is in the group, now and on every change.
--   luajit examples/group.lua     ZKCOORD_SERVERS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../lua/?.lua;" .. here .. "/../lua/?/init.lua;" .. package.path
package.cpath = here .. "/../lua/?.so;" .. package.cpath
local zkcoord = require "zkcoord"

local servers = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local path = "/zkcoord-demo/group-" .. os.time()
local a = assert(zkcoord.connect { servers = servers })
local b = assert(zkcoord.connect { servers = servers })

local ga = a:group(path, { id = "api-1", data = "10.0.0.5:8080" })
assert(ga:join(5))
local last
assert(ga:on_change(function(members)                -- id -> data
    local ids = {}
    for id, data in pairs(members) do ids[#ids + 1] = id .. "=" .. data end
    table.sort(ids)
    last = table.concat(ids, " ")
    print("api-1 sees: " .. last)
end))

local gb = b:group(path, { id = "api-2", data = "10.0.0.6:8080" })
assert(gb:join(5))
local deadline = zkcoord.now() + 5
while last ~= "api-1=10.0.0.5:8080 api-2=10.0.0.6:8080" and zkcoord.now() < deadline do
    a:dispatch(0.05)
end
gb:leave()                                             -- api-1 sees api-2 go
deadline = zkcoord.now() + 5
while last ~= "api-1=10.0.0.5:8080" and zkcoord.now() < deadline do
    a:dispatch(0.05)
end
ga:close()
a:delete(path, { recursive = true })
a:close()
b:close()
