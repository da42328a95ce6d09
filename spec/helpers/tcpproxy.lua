-- The specs' and tools' name for zkcoord.testing.proxy, the one proxy
-- that cuts, black-holes, refuses or delays connections
-- (lua/zkcoord/testing/proxy.lua).
return require "zkcoord.testing.proxy"
