-- busted helper: loaded once before the specs. The shared ZooKeeper server
-- (helpers.zk) starts on first use and is stopped when busted exits; a
-- watchdog kills it anyway if this process dies first.
local busted = require "busted"
local zk = require "helpers.zk"

busted.subscribe({ "exit" }, function()
    zk.shutdown()
    return nil, true
end)
