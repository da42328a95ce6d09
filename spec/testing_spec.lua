-- zkcoord.testing, the throwaway servers for users' specs: what it starts
-- is a real server, what it does to it (stop, restart, pause, expire, cut)
-- is what a client sees.
local zkcoord = require "zkcoord"
local testing = require "zkcoord.testing"
local tproc = require "zkcoord.testing.proc"

local SESSION = 2     -- seconds; tick_time 500 ms allows 1 to 20

local function wait_until(fn, timeout, client)
    local deadline = tproc.now() + timeout
    while true do
        local r = fn()
        if r or tproc.now() >= deadline then return r end
        if client then client:dispatch(0.02) else tproc.sleep(0.02) end
    end
end

local function connect(hosts, opts)
    local o = { servers = hosts, session_timeout = SESSION }
    for k, v in pairs(opts or {}) do o[k] = v end
    return assert(zkcoord.connect(o))
end

describe("zkcoord.testing #zk #nosan", function()
    local server

    setup(function()
        server = assert(testing.server())
    end)

    teardown(function()
        if server then server:destroy() end
    end)

    it("server: a real standalone server on a free loopback port, in its own dir", function()
        assert.truthy(server.hosts:match("^127%.0%.0%.1:%d+$"))
        assert.are.equal("127.0.0.1:" .. server.port, server.hosts)
        assert.truthy(server.dir:match("^/tmp/zkcoord%-zk%-"))
        assert.is_true(server:running())
        assert.are.equal("standalone", server:mode())
        local c = connect(server.hosts)
        finally(function() c:close() end)
        assert.are.equal("/a", c:create("/a", "x"))
        -- a second one is another server: other port, other data
        local other = assert(testing.server())
        finally(function() other:destroy() end)
        assert.are_not.equal(server.port, other.port)
        local c2 = connect(other.hosts)
        finally(function() c2:close() end)
        assert.are.equal(false, c2:exists("/a"))
        -- destroy: the process and the dir are gone
        local pid, dir = other.pid, other.dir
        assert.truthy(other:destroy())
        assert.is_false(tproc.alive(pid))
        assert.is_false(tproc.file_exists(dir .. "/zoo.cfg"))
    end)

    it("stop and restart keep the port, the data and a live session", function()
        -- the longest session tick_time 500 allows: a JVM restart under load
        -- takes seconds, and the session must outlast it
        local c = connect(server.hosts, { session_timeout = 20 })
        finally(function() c:close() end)
        assert(c:create("/kept", "v"))
        local sid, port, pid = c:session_id(), server.port, server.pid
        assert.truthy(server:restart())
        assert.are.equal(port, server.port)
        assert.are_not.equal(pid, server.pid)
        assert.are.equal("v", (c:get("/kept")))
        assert.are.equal(sid, c:session_id())
        -- stopped: nobody answers; started again: it serves
        assert.truthy(server:stop())
        assert.is_false(server:running())
        assert.is_nil(server:mode(0.5))
        assert.truthy(server:start())
        assert.are.equal("v", (c:get("/kept")))
        assert(c:delete("/kept"))
    end)

    it("pause (SIGSTOP) silences the server; resume brings it back", function()
        assert.truthy(server:pause())
        finally(function() server:resume() end)
        local mode, err = server:mode(0.5)
        assert.is_nil(mode)
        assert.are.equal("timeout", err)
        assert.truthy(server:resume())
        assert.are.equal("standalone", server:mode(5))
    end)

    it("expire_session: the client's session is lost, as after a long partition", function()
        local c = connect(server.hosts)
        finally(function() c:close() end)
        local states = {}
        c:on_state(function(s) states[#states + 1] = s end)
        local sid = c:session_id()
        assert.is_true(testing.expire_session(c, server.hosts))
        assert.are_not.equal(sid, c:session_id())
        assert.truthy(wait_until(function()
            for _, s in ipairs(states) do if s == "lost" then return true end end
        end, 2 * SESSION, c), table.concat(states, ","))
    end)

    it("proxy: cut drops the connection (same session); blackhole loses the session", function()
        local p = assert(testing.proxy(server))
        finally(function() p:stop() end)
        assert.truthy(p.hosts:match("^127%.0%.0%.1:%d+$"))
        local c = connect(p.hosts)
        finally(function() c:close() end)
        local states = {}
        c:on_state(function(s) states[#states + 1] = s end)
        local sid = c:session_id()
        assert.truthy(p:cut())
        assert.truthy(wait_until(function()
            return states[1] == "suspended" and c:state() == "connected"
        end, 2 * SESSION, c), table.concat(states, ","))
        assert.are.equal(sid, c:session_id())
        -- a partition longer than the session: lost
        assert.truthy(p:blackhole())
        assert.truthy(wait_until(function() return c:state() == "lost" end, 3 * SESSION, c),
                      c:state())
        assert.truthy(p:pass())
        assert.truthy(wait_until(function() return c:state() == "connected" end, 3 * SESSION, c))
        assert.are_not.equal(sid, c:session_id())
        -- "host:port" does too
        local p2 = assert(testing.proxy(server.hosts))
        p2:stop()
    end)

    it("a bad argument raises; a client without a session is nil, err", function()
        assert.has_error(function() testing.server { tick = 500 } end,
            "bad argument #1 to 'server' (unknown option 'tick' (tick_time, port, extra, jvm_flags, "
            .. "java, classpath, zookeeper_home, log_level, timeout, sasl))")
        assert.has_error(function() testing.ensemble { port = 1 } end)
        assert.has_error(function() testing.proxy("nowhere") end,
            "bad argument #1 to 'proxy' (target must be a server or \"host:port\")")
        local c = connect(server.hosts)
        assert.has_error(function() testing.expire_session(c) end,
            "bad argument #2 to 'expire_session' (hosts must be a string, got nil)")
        c:close()
        assert.are.same({ nil, "closed" }, { testing.expire_session(c, server.hosts) })
    end)

    it("ensemble: three servers, one leader; a client survives the leader's stop", function()
        local e = assert(testing.ensemble { size = 3 })
        finally(function() e:destroy() end)
        assert.are.equal(3, #e.servers)
        local hosts = {}
        for i, s in ipairs(e.servers) do hosts[i] = s.hosts end
        assert.are.equal(table.concat(hosts, ","), e.hosts)
        local leader = assert(e:leader())
        local c = connect(e.hosts, { session_timeout = 10 })
        finally(function() c:close() end)
        assert(c:create("/e", "1"))
        assert.truthy(e.servers[leader]:stop())
        assert.truthy(e:wait_ready(30))
        assert.are_not.equal(leader, e:leader())
        assert.are.equal("1", (c:get("/e")))
    end)
end)
