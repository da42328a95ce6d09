-- The specs', tools' and benchmarks' name for zkcoord.testing.server, the
-- one ZooKeeper launcher (lua/zkcoord/testing/server.lua).
return require "zkcoord.testing.server"
