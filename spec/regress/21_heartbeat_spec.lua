-- Issue 21.1: the clock rule needs the core's heartbeat. An idle session
-- must stay known alive (its heartbeat answers keep `last heard` fresh
-- while Lua does nothing), and the heartbeat thread must end with its
-- session: on close, on collection, with requests in flight.
local zkcoord = require "zkcoord"
local zk = require "helpers.zk"
local proc = require "helpers.proc"

-- Threads of this process (each session: libzookeeper's two and our one).
local function threads()
    local n = 0
    local p = assert(io.popen("ls /proc/" .. proc.getpid() .. "/task"))
    for _ in p:lines() do
        n = n + 1
    end
    p:close()
    return n
end


describe("the session heartbeat #zk", function()
    after_each(function()
        zk.close_clients()
    end)

    it("keeps an idle session known alive past its timeout", function()
        local c = zk.client { session_timeout = 2 }
        local sid = c:session_id()
        os.execute("sleep 3")        -- no library call: only the core's thread asks
        assert.equal("connected", c:state())
        assert.equal(sid, c:session_id())
    end)

    it("ends with its session: close, collection, requests in flight", function()
        collectgarbage()
        collectgarbage()
        local base = threads()
        local c1 = zkcoord.connect { servers = zk.hosts(), session_timeout = 2 }
        local c2 = zkcoord.connect { servers = zk.hosts(), session_timeout = 2 }
        assert.equal(base + 6, threads())
        for _ = 1, 20 do
            c1:send("exists", "/")   -- in flight, never waited for
        end
        assert.is_true(c1:close())
        assert.equal(base + 3, threads())
        c2:send("children", "/")
        c2 = nil                      -- luacheck: ignore
        collectgarbage()
        collectgarbage()
        assert.truthy(zk.wait_until(function() return threads() == base end, 5))
    end)
end)
