-- Run under valgrind by spec/valgrind_spec.lua: a create/get/set/delete/
-- watch/close loop over several clients, including requests left in flight
-- at close and a client left to the garbage collector.
local zkcoord = require "zkcoord"
local hosts = assert(os.getenv("ZK_HOSTS"))
local rounds = tonumber(arg and arg[1]) or 3
for r = 1, rounds do
    local c = assert(zkcoord.connect { servers = hosts, session_timeout = 4 })
    local base = "/vg-" .. r
    c:create(base, "x")
    for i = 1, 50 do
        local p = base .. "/n" .. i
        assert(c:create(p, ("d"):rep(i)))
        assert(c:get(p, function() end))
        assert(c:set(p, "y"))
        assert(c:exists(p, function() end))
        assert(c:children(base, function() end))
        assert(c:multi { { op = "check", path = p, version = 1 }, { op = "delete", path = p } })
    end
    c:get_acl(base)
    c:sync(base)
    c:delete(base)
    for i = 1, 20 do c:send("exists", base .. i) end   -- in flight at close
    c:close()
end
do
    local c = assert(zkcoord.connect { servers = hosts })
    c:send("get", "/")
end
collectgarbage()
collectgarbage()
print("done")
