-- Issue 21.6: nothing was logged when the connection dropped; the first
-- line came at session loss. Now: warn on the drop, with how long the
-- session has left by the clock rule, and info when it is back.
local zk = require "helpers.zk"
local tcpproxy = require "helpers.tcpproxy"

describe("the connection's log #zk", function()
    it("warns when the connection drops, with the time left, and says when it is back",
       function()
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)$"))))
        local lines = {}
        local c = zk.client { servers = proxy.hosts, session_timeout = 4,
                              logger = function(level, msg)
                                  lines[#lines + 1] = level .. " " .. msg
                              end }
        local sid = c:session_id()
        assert(proxy:blackhole())
        local suspended = zk.wait_until(function() return c:state() == "suspended" end, 6, c)
        assert(proxy:pass())
        local back = zk.wait_until(function() return c:state() == "connected" end, 6, c)
        proxy:stop()
        assert.truthy(suspended)
        assert.truthy(back)
        assert.equal(sid, c:session_id())
        local left = tonumber(lines[1] and lines[1]:match(
            "^warn connection lost; the session counts as lost in ([%d.]+)s"))
        assert.truthy(left, tostring(lines[1]))
        -- libzookeeper notices the silence after 2/3 of the timeout: about
        -- a third is left (never more than the timeout).
        assert.truthy(left > 0 and left < 4, tostring(left))
        assert.matches("^info connected again after [%d.]+s, in the same session", lines[2] or "")
        zk.close_clients()
    end)
end)
