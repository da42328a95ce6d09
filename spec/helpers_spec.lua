-- Proves the test helpers (spec/helpers/) against real ZooKeeper servers.

local bit = require("bit")

local proc = require("helpers.proc")
local zkserver = require("helpers.zkserver")
local tcpproxy = require("helpers.tcpproxy")

-- A few ZooKeeper wire messages, just enough to prove that data and
-- sessions survive a restart without depending on the library under test.

local function i32(n)
    return string.char(bit.band(bit.rshift(n, 24), 255),
        bit.band(bit.rshift(n, 16), 255), bit.band(bit.rshift(n, 8), 255),
        bit.band(n, 255))
end

local function get_i32(s, pos)
    local a, b, c, d = s:byte(pos, pos + 3)
    return bit.tobit(a * 16777216 + b * 65536 + c * 256 + d)
end

local function jstring(s)
    return i32(#s) .. s
end

local function frame(body)
    return i32(#body) .. body
end

local function read_frame(conn, timeout)
    local len, err = conn:recv(4, timeout)
    if not len then
        return nil, err
    end
    return conn:recv(get_i32(len, 1), timeout)
end

-- Returns conn, session id (8 raw bytes), password, negotiated timeout.
local function zk_connect(port, timeout_ms, sid, passwd)
    local conn = assert(proc.tcp_connect("127.0.0.1", port, 2))
    assert(conn:send(frame(i32(0) .. string.rep("\0", 8) .. i32(timeout_ms)
        .. (sid or string.rep("\0", 8)) .. jstring(passwd or string.rep("\0", 16))
        .. "\0"), 2))
    local resp = assert(read_frame(conn, 2))
    local negotiated = get_i32(resp, 5)
    local plen = get_i32(resp, 17)
    return conn, resp:sub(9, 16), resp:sub(21, 20 + plen), negotiated
end

-- Creates a persistent node with open ACLs; returns the ZooKeeper error code.
local function zk_create(conn, path, data)
    assert(conn:send(frame(i32(1) .. i32(1) .. jstring(path) .. jstring(data)
        .. i32(1) .. i32(31) .. jstring("world") .. jstring("anyone")
        .. i32(0)), 2))
    local resp = assert(read_frame(conn, 2))
    return get_i32(resp, 13)
end

-- Creates a persistent node with a TTL (opcode 21, CreateMode 5); the
-- server answers "unimplemented" (-6) unless extended types are enabled.
local function zk_create_ttl(conn, path, ttl_ms)
    assert(conn:send(frame(i32(2) .. i32(21) .. jstring(path) .. jstring("")
        .. i32(1) .. i32(31) .. jstring("world") .. jstring("anyone")
        .. i32(5) .. i32(0) .. i32(ttl_ms)), 2))
    local resp = assert(read_frame(conn, 2))
    return get_i32(resp, 13)
end

local function node_count(server)
    local text = assert(proc.tcp_probe("127.0.0.1", server.port, "srvr", 2))
    return tonumber(text:match("Node count: (%d+)"))
end

local function wait_until(fn, timeout)
    local deadline = proc.now() + timeout
    while proc.now() < deadline do
        local v = fn()
        if v then
            return v
        end
        proc.sleep(0.05)
    end
    return fn()
end

describe("test helpers #zk", function()
    local zk, ens, proxy

    setup(function()
        zk = assert(zkserver.start())
    end)

    teardown(function()
        if proxy then
            proxy:stop()
        end
        if ens then
            ens:destroy()
        end
        if zk then
            zk:destroy()
        end
        -- Not destroy_all(): the shared server of helpers.zk lives on for
        -- the specs that run after this one.
    end)

    describe("proc", function()
        it("keeps monotonic time and sleeps", function()
            local t0 = proc.now()
            assert.truthy(proc.sleep(0.05))
            local dt = proc.now() - t0
            assert.is_true(dt >= 0.05 and dt < 0.5)
            assert.equal(proc.getpid(), proc.getpid())
        end)

        it("finds free ports", function()
            local p = assert(proc.free_port())
            assert.is_true(p > 0 and p < 65536)
            -- below the ephemeral range, where bind(0) and outgoing
            -- connections of other processes never land
            local low = tonumber(proc.read_file("/proc/sys/net/ipv4/ip_local_port_range")
                :match("^(%d+)"))
            assert.is_true(p < low, p .. " is in the ephemeral range")
            assert.are_not.equal(p, proc.free_port())   -- held for this process
            local ok, err = proc.tcp_probe("127.0.0.1", p, "ruok", 1)
            assert.is_nil(ok)
            assert.matches("refused", err)
        end)

        it("spawns, signals and reaps a process", function()
            local dir = assert(proc.mktemp_dir("zkcoord-zk-"))
            finally(function() proc.rm_rf(dir) end)
            local pid = assert(proc.spawn({ "sh", "-c",
                'echo "$GREETING $(pwd)"; exec sleep 30' },
                { env = { GREETING = "it's me" }, cwd = "/usr",
                  stdout = dir .. "/out" }))
            assert.is_true(proc.alive(pid))
            assert.truthy(wait_until(function()
                return (proc.read_file(dir .. "/out") or ""):find("\n")
            end, 2))
            assert.equal("it's me /usr\n", proc.read_file(dir .. "/out"))
            -- exec: the pid is the program, not a shell
            assert.truthy(wait_until(function()
                return (proc.read_file("/proc/" .. pid .. "/cmdline") or "")
                    :match("^sleep%z")
            end, 2))
            assert.truthy(proc.kill(pid, "STOP"))
            assert.equal("T", wait_until(function()
                return proc.state(pid) == "T" and "T"
            end, 2))
            assert.truthy(proc.kill(pid, "CONT"))
            assert.truthy(proc.kill(pid, "TERM"))
            assert.truthy(proc.wait_exit(pid, 5))
            assert.is_false(proc.alive(pid))
        end)

        it("kills a watched process once its owner is gone", function()
            local owner = assert(proc.spawn("sleep 30"))
            local pid, watchdog = proc.spawn("sleep 31", { owner = owner })
            assert.truthy(pid and watchdog)
            proc.sleep(0.2)
            assert.is_true(proc.alive(pid))
            assert.truthy(proc.kill(owner, "KILL"))
            assert.truthy(proc.wait_exit(pid, 5))
            assert.truthy(proc.wait_exit(watchdog, 5))
        end)

        it("refuses to remove anything outside /tmp", function()
            assert.has_error(function() proc.rm_rf("/etc") end)
            assert.has_error(function() proc.rm_rf("/tmp/../etc") end)
            assert.has_error(function() proc.rm_rf("/tmp/") end)
        end)
    end)

    describe("standalone server", function()
        it("answers ruok and srvr on its port", function()
            assert.matches("^127%.0%.0%.1:%d+$", zk.hosts)
            assert.equal("imok", proc.tcp_probe("127.0.0.1", zk.port, "ruok"))
            assert.equal("standalone", zk:mode())
            assert.is_true(proc.alive(zk.pid))
            assert.matches("^/tmp/zkcoord%-zk%-", zk.dir)
            -- the JVM logs to its dir, not to our terminal
            assert.matches("binding to port", proc.read_file(zk.dir
                .. "/server.log"))
            assert.matches("QuorumPeerMain", proc.read_file("/proc/" .. zk.pid
                .. "/cmdline"))
        end)

        it("keeps data and sessions across a restart on the same port", function()
            local before = node_count(zk)
            local conn, sid, passwd, negotiated = zk_connect(zk.port, 10000)
            assert.equal(10000, negotiated)
            assert.equal(0, zk_create(conn, "/helpers-spec-restart", "x"))
            conn:close()                  -- drop the connection, keep the session
            assert.equal(before + 1, node_count(zk))

            local old_pid, port = zk.pid, zk.port
            assert.truthy(zk:stop())
            assert.is_false(proc.alive(old_pid))
            assert.is_nil(proc.tcp_probe("127.0.0.1", port, "ruok", 0.5))
            assert.truthy(zk:start())
            assert.equal(port, zk.port)
            assert.are_not.equal(old_pid, zk.pid)
            assert.equal("imok", proc.tcp_probe("127.0.0.1", zk.port, "ruok"))
            assert.equal(before + 1, node_count(zk))

            -- The same session id and password are still accepted.
            local conn2, sid2, _, negotiated2 = zk_connect(zk.port, 10000, sid,
                passwd)
            conn2:close()
            assert.equal(sid, sid2)
            assert.is_true(negotiated2 > 0)
        end)

        it("has TTL nodes enabled", function()
            local conn = zk_connect(zk.port, 4000)
            finally(function() conn:close() end)
            assert.equal(0, zk_create_ttl(conn, "/helpers-spec-ttl", 60000))
        end)

        it("pauses and resumes", function()
            assert.truthy(zk:pause())
            finally(function() zk:resume() end)   -- the server is shared: never left stopped
            -- pause() returns once the stop took: no JVM thread answers after it
            assert.is_true(proc.stopped(zk.pid))
            local r, err = proc.tcp_probe("127.0.0.1", zk.port, "ruok", 0.5)
            assert.is_nil(r)
            assert.equal("timeout", err)
            assert.truthy(zk:resume())
            assert.equal("imok", proc.tcp_probe("127.0.0.1", zk.port, "ruok", 5))
        end)
    end)

    describe("ensemble", function()
        setup(function()
            ens = assert(zkserver.start_ensemble({ size = 3 }))
        end)

        it("elects exactly one leader", function()
            assert.matches("^127%.0%.0%.1:%d+,127%.0%.0%.1:%d+,127%.0%.0%.1:%d+$",
                ens.hosts)
            local leaders = 0
            for _, m in ipairs(ens:modes()) do
                assert.truthy(m == "leader" or m == "follower")
                if m == "leader" then
                    leaders = leaders + 1
                end
            end
            assert.equal(1, leaders)
            assert.truthy(ens:leader())
        end)

        it("elects a new leader when the leader dies, and it rejoins", function()
            local old = assert(ens:leader())
            assert.truthy(ens.servers[old]:kill())
            local new = wait_until(function()
                local l = ens:leader()
                return l ~= old and l
            end, 20)
            assert.truthy(new)
            assert.are_not.equal(old, new)
            assert.truthy(ens.servers[old]:start())
            assert.equal("follower", ens.servers[old]:mode())
            assert.truthy(ens:wait_ready(10))
        end)
    end)

    describe("tcpproxy", function()
        setup(function()
            proxy = assert(tcpproxy.start("127.0.0.1", zk.port))
        end)

        local function probe(word, timeout)
            return proc.tcp_probe("127.0.0.1", proxy.port, word or "ruok",
                timeout or 1)
        end

        it("forwards four-letter words", function()
            assert.matches("^127%.0%.0%.1:%d+$", proxy.hosts)
            assert.equal("imok", probe())
            assert.matches("Mode: standalone", probe("srvr"))
        end)

        it("cut closes live connections and keeps accepting", function()
            local conn = zk_connect(proxy.port, 4000)
            assert.truthy(proxy:cut())
            local data, err = conn:recv_some(100, 2)
            conn:close()
            assert.is_nil(data)
            assert.truthy(err == "closed" or err:match("reset"))
            assert.equal("imok", probe())
        end)

        it("blackhole swallows bytes until pass", function()
            local conn = zk_connect(proxy.port, 4000)
            assert.truthy(proxy:blackhole())
            local r, err = probe("ruok", 0.5)
            assert.is_nil(r)
            assert.equal("timeout", err)
            -- a ping on the live session gets no answer either
            assert.truthy(conn:send(frame(i32(-2) .. i32(11)), 1))
            assert.same({ nil, "timeout" }, { conn:recv_some(100, 0.3) })
            assert.truthy(proxy:pass())
            assert.equal("imok", probe())
            -- the black-holed connection lost bytes: it is closed, not resumed
            assert.same({ nil, "closed" }, { conn:recv_some(100, 1) })
            conn:close()
        end)

        it("dropreplies forwards requests and drops replies until pass", function()
            local conn = zk_connect(proxy.port, 4000)
            local before = node_count(zk)
            assert.truthy(proxy:drop_replies())
            assert.truthy(conn:send(frame(i32(1) .. i32(1) .. jstring("/helpers-spec-dropreplies")
                .. jstring("x") .. i32(1) .. i32(31) .. jstring("world") .. jstring("anyone")
                .. i32(0)), 2))
            -- the create is applied, its reply never comes
            assert.truthy(wait_until(function() return node_count(zk) == before + 1 end, 5))
            assert.same({ nil, "timeout" }, { conn:recv_some(100, 0.3) })
            assert.truthy(proxy:pass())
            -- the connection lost bytes: it is closed, not resumed
            assert.same({ nil, "closed" }, { conn:recv_some(100, 1) })
            conn:close()
            assert.equal("imok", probe())
        end)

        it("dropreplies n lets n more replies through first", function()
            local conn = zk_connect(proxy.port, 4000)
            assert.truthy(proxy:drop_replies(1))
            local ping = frame(i32(-2) .. i32(11))
            assert.truthy(conn:send(ping, 1))
            assert.truthy(read_frame(conn, 2))
            assert.truthy(conn:send(ping, 1))
            assert.same({ nil, "timeout" }, { conn:recv_some(100, 0.3) })
            assert.truthy(proxy:pass())
            conn:close()
        end)

        it("refuse resets new connections until pass", function()
            assert.truthy(proxy:refuse())
            local t0 = proc.now()
            local r = probe("ruok", 1)
            assert.is_true(r == nil or r == "")
            assert.is_true(proc.now() - t0 < 0.5)
            assert.truthy(proxy:pass())
            assert.equal("imok", probe())
        end)

        it("delay holds each chunk back", function()
            assert.truthy(proxy:delay(0.2))
            local t0 = proc.now()
            assert.equal("imok", probe("ruok", 2))
            -- request and answer are each held back 0.2 s
            assert.is_true(proc.now() - t0 >= 0.4)
            assert.truthy(proxy:pass())
            t0 = proc.now()
            assert.equal("imok", probe())
            assert.is_true(proc.now() - t0 < 0.2)
        end)

        it("rejects unknown commands and stops", function()
            local ok, err = proxy:set("bogus")
            assert.is_nil(ok)
            assert.matches("unknown command", err)
            local pid, dir = proxy.pid, proxy.dir
            assert.truthy(proxy:stop())
            proxy = nil
            assert.is_false(proc.alive(pid))
            assert.is_nil(io.open(dir .. "/control"))
        end)
    end)
end)
