-- Leases against a real server: kazoo's test_lease.py scenarios (each
-- names the kazoo test it follows), the record's bytes, the versioned
-- write, bad arguments, and REAL kazoo (Debian's python3-kazoo) on the
-- same paths both ways. Scenarios run on a clock of the spec's own (the
-- lease's `clock` option, kazoo's MockClock): no sleeps.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local tcpproxy = require "helpers.tcpproxy"
local format = require "zkcoord.lease.format"
local line = require "zkcoord.line"

-- kazoo's MockClock: UTC seconds, moved by hand; starts at 10 as kazoo's.
local function mock_clock(epoch)
    local c = { epoch = epoch or 10 }
    function c.forward(s) c.epoch = c.epoch + s end
    function c.now() return c.epoch end
    return c
end

-- The identifier's UTF-8 bytes in hex, as spec/peers/kazoo_lease.py takes it.
local function hex(s)
    return (s:gsub(".", function(ch) return ("%02x"):format(ch:byte()) end))
end

-- A zkcoord contender in a process of its own: says "ready" once
-- connected, tries once the file `go` exists, says what obtain() answered.
local RACER = [[
local zkcoord = require "zkcoord"
local hosts, root, path, id, go = ...
io.stdout:setvbuf("line")
local c = assert(zkcoord.connect { servers = hosts, chroot = root })
local l = c:lease(path, 600, { identifier = id })
io.stdout:write("ready\n")
local t0 = zkcoord.now()
while not io.open(go) and zkcoord.now() - t0 < 30 do c:waiter():sleep(0.005) end
local ok, err = l:obtain()
io.stdout:write(ok and "obtained" or ok == false and "refused" or "failed " .. tostring(err), "\n")
c:close()
]]

-- Runs spec/peers/kazoo_lease.py with `args` after hosts and path;
-- returns its output.
local function kazoo(hosts, path, args)
    local log = ("%s/lease-kazoo-%d.log"):format(zk.tmpdir(), proc.getpid())
    os.remove(log)
    local argv = { "/usr/bin/python3", "spec/peers/kazoo_lease.py", hosts, path }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    local pid = assert(proc.spawn(argv, { stdout = log, stderr = log, env = { LD_PRELOAD = "" } }))
    assert.truthy(proc.wait_exit(pid, 60), "kazoo did not finish")
    return proc.read_file(log) or ""
end


describe("lease #zk #nosan", function()
    local root, c, c2, c3, clock

    before_each(function()
        root = zk.new_root("lease")
        c = zk.client { chroot = root }
        c2 = zk.client { chroot = root }
        c3 = zk.client { chroot = root }
        clock = mock_clock()
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    -- kazoo's tests give `self.client` no identifier (the host's name) and
    -- the others "some.other.host", "host2", "host3".
    local function lease(client, duration, id, path)
        return client:lease(path or "/l", duration, { identifier = id, clock = clock.now })
    end
    local function multi(client, count, duration, id)
        return client:multi_lease("/l", count, duration, { identifier = id, clock = clock.now })
    end

    describe("kazoo's NonBlockingLeaseTests", function()
        it("renews with the same identifier (test_renew)", function()
            local l = lease(c, 3)
            assert.is_true(l:obtain())
            assert.is_true(l:held())
            clock.forward(2)
            assert.is_true(lease(c, 3):obtain())
        end)

        it("refuses another identifier before the end (test_busy)", function()
            assert.is_true(lease(c, 3):obtain())
            clock.forward(2)
            local ok, record = lease(c2, 3, "some.other.host"):obtain()
            assert.is_false(ok)
            assert.same({ version = 1, holder = c:lease("/l", 3).identifier, ends = 13 }, record)
        end)

        it("lets another identifier take it after the end (test_overtake)", function()
            assert.is_true(lease(c, 3):obtain())
            clock.forward(4)
            assert.is_true(lease(c2, 3, "some.other.host"):obtain())
        end)

        it("a renewal moves the end (test_renew_no_overtake)", function()
            assert.is_true(lease(c, 3):obtain())
            clock.forward(2)
            assert.is_true(lease(c, 3):obtain())
            clock.forward(2)
            assert.is_false((lease(c2, 3, "some.other.host"):obtain()))
        end)

        it("the one who took it over renews it (test_overtaker_renews)", function()
            assert.is_true(lease(c, 3):obtain())
            clock.forward(4)
            assert.is_true(lease(c2, 3, "some.other.host"):obtain())
            clock.forward(2)
            assert.is_true(lease(c2, 3, "some.other.host"):obtain())
        end)

        it("the first holder is refused once taken over (test_overtake_refuse_first)", function()
            local first = lease(c, 3)
            assert.is_true(first:obtain())
            clock.forward(4)
            assert.is_true(lease(c2, 3, "some.other.host"):obtain())
            clock.forward(2)
            assert.is_false((first:obtain()))
            assert.is_false(first:held())
        end)

        it("leaves a record of another version alone (test_old_version)", function()
            format.VERSION = 2            -- kazoo's test bumps the class's _version too
            local ok, err = pcall(function() return lease(c, 3):obtain() end)
            format.VERSION = 1
            assert.is_true(ok, err)
            assert.is_true(err)
            clock.forward(4)
            local got, record = lease(c2, 3, "some.other.host"):obtain()
            assert.is_false(got)
            assert.equal(2, record.version)
        end)
    end)

    describe("kazoo's MultiNonBlockingLeaseTest", function()
        it("one slot renews (test_1_renew)", function()
            assert.same({ true, 0 }, { multi(c, 1, 4):obtain() })
            clock.forward(2)
            assert.same({ true, 0 }, { multi(c, 1, 4):obtain() })
        end)

        it("one slot refuses another identifier (test_1_reject)", function()
            assert.is_true((multi(c, 1, 4):obtain()))
            clock.forward(2)
            assert.same({ false }, { multi(c2, 1, 4, "some.other.host"):obtain() })
        end)

        it("two slots, two holders renewing (test_2_renew)", function()
            assert.same({ true, 0 }, { multi(c, 2, 7):obtain() })
            clock.forward(2)
            assert.same({ true, 1 }, { multi(c2, 2, 7, "host2"):obtain() })
            clock.forward(2)
            assert.same({ true, 0 }, { multi(c, 2, 7):obtain() })
            clock.forward(2)
            assert.same({ true, 1 }, { multi(c2, 2, 7, "host2"):obtain() })
        end)

        it("two slots refuse a third holder (test_2_reject)", function()
            assert.is_true((multi(c, 2, 7):obtain()))
            clock.forward(2)
            assert.is_true((multi(c2, 2, 7, "host2"):obtain()))
            clock.forward(2)
            local ml = multi(c3, 2, 7, "host3")
            assert.is_false((ml:obtain()))
            assert.is_false(ml:held())
            assert.is_nil(ml:slot())
        end)

        it("a slot whose term ended goes to the next (test_2_handover)", function()
            assert.same({ true, 0 }, { multi(c, 2, 4):obtain() })         -- slot 0 until 14
            clock.forward(2)
            assert.same({ true, 1 }, { multi(c2, 2, 4, "host2"):obtain() })  -- slot 1 until 16
            clock.forward(3)
            local ml = multi(c3, 2, 4, "host3")
            assert.same({ true, 0 }, { ml:obtain() })                      -- slot 0 until 19
            assert.equal(19, ml:ends())
            clock.forward(2)
            assert.same({ true, 1 }, { multi(c, 2, 4):obtain() })
        end)
    end)

    it("held() and ends() follow the granted term on the lease's clock", function()
        local l = lease(c, 3)
        assert.is_false(l:held())
        assert.is_nil(l:ends())
        assert.is_true(l:obtain())
        assert.equal(13, l:ends())
        clock.forward(2.9)
        assert.is_true(l:held())
        clock.forward(0.1)
        assert.is_false(l:held())
        assert.same({ version = 1, holder = l.identifier, ends = 13 }, l:read())
    end)

    it("stays held with no session: the holder's client closed, another is refused", function()
        assert.is_true(lease(c, 60, "gone"):obtain())
        c:close()
        assert.is_false((lease(c2, 60, "other"):obtain()))
    end)

    it("stores the record as kazoo's json.dumps writes it", function()
        local id = 'h\195\180st "q" \\ \n\t\1 \226\152\131 \240\159\152\128'
        assert.is_true(lease(c, 3, id):obtain())
        local data = assert(c:get("/l/lease_holder"))
        assert.equal('{"version": 1, "holder": "h\\u00f4st \\"q\\" \\\\ \\n\\t\\u0001 \\u2603 '
                     .. '\\ud83d\\ude00", "end": "1970-01-01T00:00:13"}', data)
        -- and reads it back: the same identifier renews
        clock.forward(1)
        assert.is_true(lease(c, 3, id):obtain())
    end)

    it("writes with the version it read: a record written meanwhile is not overwritten", function()
        assert.is_true(lease(c, 3, "first"):obtain())
        clock.forward(4)
        local theirs = format.encode(1, "sneaked", 100)
        -- The clock is read between our read and our write: a writer the
        -- lock did not exclude (kazoo's delete and create) comes in there.
        local l = c2:lease("/l", 3, { identifier = "late", clock = function()
            assert(c3:set("/l/lease_holder", theirs))
            return clock.now()
        end })
        local ok, record = l:obtain()
        assert.is_false(ok)
        assert.equal("sneaked", record.holder)
        assert.equal(theirs, (assert(c:get("/l/lease_holder"))))
    end)

    -- A client through a proxy (stopped when the test ends) and a lease
    -- on it whose clock, read between our read and our write, makes the
    -- proxy drop every reply from then on: the write reaches the server,
    -- its reply does not.
    local function reply_lost(opts)
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)$"))))
        finally(function() proxy:stop() end)
        local o = { servers = proxy.hosts, chroot = root }
        for k, v in pairs(opts) do o[k] = v end
        local a = zk.client(o)
        local armed = true
        local l = a:lease("/l", 60, { identifier = "lost-reply", clock = function()
            if armed then
                armed = false
                assert(proxy:drop_replies())
            end
            return clock.now()
        end })
        return l, a, proxy
    end

    it("reads back a write whose reply was lost: ours answers true", function()
        -- The connection drops with the reply missing (no reply for 2/3 of
        -- the session timeout); the fault ends then, and the read in the
        -- same session finds our record.
        local l, a, proxy = reply_lost { session_timeout = 2, request_timeout = 4 }
        a:on_state(function(new)
            if new == "suspended" then assert(proxy:pass()) end
        end)
        assert.same({ true }, { l:obtain() })
        assert.same({ version = 1, holder = "lost-reply", ends = 70 }, c:lease("/l", 60):read())
    end)

    it("answers 'unknown' when neither the write's reply nor the read back comes", function()
        local l = reply_lost { session_timeout = 6, request_timeout = 0.3 }
        assert.same({ nil, "unknown" }, { l:obtain() })
        assert.truthy(zk.wait_until(function()
            local r = c:lease("/l", 60):read()
            return r and r.holder == "lost-reply"
        end, 5, c), "the write did not reach the server")
    end)

    it("fails within its timeout while the server is unreachable, then obtains", function()
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)$"))))
        finally(function() proxy:stop() end)
        local S = 4
        local a = zk.client { servers = proxy.hosts, chroot = root, session_timeout = S }
        local l = a:lease("/l", 60, { identifier = "outage", timeout = 0.5, clock = clock.now })
        assert(proxy:refuse())
        assert(proxy:cut())
        assert.truthy(zk.wait_until(function() return a:state() == "suspended" end, S, a))
        local t0 = proc.now()
        local ok, err = l:obtain()
        local took = proc.now() - t0
        assert.is_nil(ok)
        assert.equal("timeout", err)
        assert.truthy(took < S / 2, ("took %.2f s"):format(took))
        assert.is_false(c:exists("/l/lease_holder"))
        assert(proxy:pass())
        assert.truthy(zk.wait_until(function() return a:state() == "connected" end, S, a))
        assert.is_true(l:obtain())
    end)

    it("answers nil, 'invalid' for a record that is not a lease's, and leaves it", function()
        assert(c:create("/l", ""))
        assert(c:create("/l/lease_holder", "not json"))
        local ok, err, detail = lease(c, 3):obtain()
        assert.same({ nil, "invalid" }, { ok, err })
        assert.matches("/l/lease_holder: not a JSON object", detail, 1, true)
        assert.equal("not json", (assert(c:get("/l/lease_holder"))))
        assert.same({ "lease_holder" }, assert(c:children("/l")))   -- the lock's node is gone
    end)

    it("fails with nil, 'closed' on a closed client", function()
        local l = lease(c, 3)
        c:close()
        assert.same({ nil, "closed" }, { l:obtain() })
    end)

    it("raises on bad arguments", function()
        local bad = {
            function() c:lease("l", 3) end,
            function() c:lease("/", 3) end,
            function() c:multi_lease("/", 2, 3) end,
            function() c:lease("/l", 0) end,
            function() c:lease("/l", -1) end,
            function() c:lease("/l", 0 / 0) end,
            function() c:lease("/l", math.huge) end,
            function() c:lease("/l", "3") end,
            function() c:lease("/l", 3, { identifier = 7 }) end,
            function() c:lease("/l", 3, { identifier = "" }) end,
            function() c:lease("/l", 3, { identifier = "\255" }) end,
            function() c:lease("/l", 3, { timeout = -1 }) end,
            function() c:lease("/l", 3, { clock = 5 }) end,
            function() c:lease("/l", 3, { ttl = 5 }) end,
            function() c:multi_lease("/l", 0, 3) end,
            function() c:multi_lease("/l", 1.5, 3) end,
            function() c:multi_lease("/l", "2", 3) end,
            function() c:multi_lease("/l", 2, 0) end,
            function() c:multi_lease("/l", 2, 3, { identifier = false }) end,
        }
        for i, fn in ipairs(bad) do
            assert.has_error(fn, nil, "case " .. i)
        end
        assert.has_error(function() c:lease("/l", 0) end,
                         "bad argument #2 to 'lease' (duration must be a positive number of seconds)")
        assert.has_error(function() c:multi_lease("/l", 0, 3) end,
                         "bad argument #2 to 'multi_lease' (count must be an integer >= 1)")
        assert.has_error(function() c:lease("/l", 3, { identifier = "" }) end,
                         "bad argument #3 to 'lease' (identifier must be a non-empty UTF-8 string)")
    end)

    describe("with kazoo #kazoo", function()
        local hosts

        before_each(function()
            hosts = zk.hosts() .. root
        end)

        it("kazoo takes the lease: zkcoord is refused, and renews kazoo's record by its id",
           function()
            assert.equal("obtained\n", kazoo(hosts, "/k", { "lease", "600", hex("kazoo-host") }))
            local ok, record = c:lease("/k", 600, { identifier = "lua-host" }):obtain()
            assert.is_false(ok)
            assert.equal("kazoo-host", record.holder)
            assert.is_true(c:lease("/k", 600, { identifier = "kazoo-host" }):obtain())
        end)

        it("zkcoord takes the lease: kazoo is refused, and renews ours by its id", function()
            local id = "lua h\195\180st \240\159\152\128"
            assert.is_true(c:lease("/k", 600, { identifier = id }):obtain())
            assert.equal("refused\n", kazoo(hosts, "/k", { "lease", "600", hex("kazoo-host") }))
            assert.equal("obtained\n", kazoo(hosts, "/k", { "lease", "600", hex(id) }))
            -- kazoo's renewal, read back byte for byte as ours would be
            local l = c:lease("/k", 600, { identifier = id })
            local record = assert(l:read())
            assert.equal(format.encode(1, id, record.ends), (assert(c:get("/k/lease_holder"))))
        end)

        it("kazoo takes both slots of a multi-lease: zkcoord is refused", function()
            assert.equal("obtained\n", kazoo(hosts, "/m", { "multi", "2", "600", hex("k1") }))
            assert.equal("obtained\n", kazoo(hosts, "/m", { "multi", "2", "600", hex("k2") }))
            assert.same({ false }, { c:multi_lease("/m", 2, 600, { identifier = "lua" }):obtain() })
            assert.same({ true, 1 }, { c:multi_lease("/m", 2, 600, { identifier = "k2" }):obtain() })
        end)

        it("zkcoord takes both slots of a multi-lease: kazoo is refused", function()
            assert.same({ true, 0 }, { c:multi_lease("/m", 2, 600, { identifier = "z1" }):obtain() })
            assert.same({ true, 1 }, { c2:multi_lease("/m", 2, 600, { identifier = "z2" }):obtain() })
            assert.equal("refused\n", kazoo(hosts, "/m", { "multi", "2", "600", hex("k3") }))
            assert.equal("obtained\n", kazoo(hosts, "/m", { "multi", "2", "600", hex("z2") }))
        end)

        -- End to end: whatever the interleaving, one holder. (The two tests
        -- after it pin down the shared lock itself, which a race may miss.)
        it("of 3 zkcoord and 2 kazoo processes trying at once, exactly one obtains it",
           function()
            local tmp, me = zk.tmpdir(), proc.getpid()
            local go = ("%s/lease-race-go-%d"):format(tmp, me)
            os.remove(go)
            local pids, logs = {}, {}
            local ok, err = pcall(function()
                for i = 1, 5 do
                    logs[i] = ("%s/lease-race-%d-%d.log"):format(tmp, me, i)
                    os.remove(logs[i])
                    if i <= 3 then
                        pids[i] = assert(zk.spawn_lua(RACER, { zk.hosts(), root, "/race", "lua" .. i,
                                                               go }, logs[i]))
                    else
                        pids[i] = assert(proc.spawn({ "/usr/bin/python3", "spec/peers/kazoo_lease.py",
                            hosts, "/race", "lease", "600", hex("kazoo" .. i), go },
                            { stdout = logs[i], stderr = logs[i], env = { LD_PRELOAD = "" } }))
                    end
                end
                for i = 1, 5 do
                    assert.truthy(zk.wait_until(function()
                        return (proc.read_file(logs[i]) or ""):find("ready", 1, true) ~= nil
                    end, 30), "contender " .. i .. " not ready: " .. (proc.read_file(logs[i]) or ""))
                end
                assert(proc.write_file(go, "go"))
                local winners, answers = {}, {}
                for i = 1, 5 do
                    assert.truthy(proc.wait_exit(pids[i], 60), "contender " .. i .. " did not finish")
                    local out = proc.read_file(logs[i]) or ""
                    answers[i] = out:match("ready\n(%w+)")
                    assert.truthy(answers[i] == "obtained" or answers[i] == "refused", out)
                    if answers[i] == "obtained" then
                        winners[#winners + 1] = i <= 3 and "lua" .. i or "kazoo" .. i
                    end
                end
                assert.equal(1, #winners, table.concat(answers, " "))
                assert.equal(winners[1], assert(c:lease("/race", 600):read()).holder)
            end)
            os.remove(go)
            for _, pid in pairs(pids) do
                if proc.alive(pid) then proc.kill(pid, "KILL") end
            end
            assert(ok, err)
        end)

        it("takes a place in kazoo's lock on the path that kazoo counts", function()
            -- the line obtain() holds while it reads and writes the record
            local q = line.new(c, "/k", require("zkcoord.lease").LOCK, "lua-contender")
            assert.is_true(q:enter(5))
            -- named as kazoo's Lock names its own: uuid4().hex + "__lock__" + seq
            -- (before: "_c_<uuid>-__lock__<seq>")
            assert.matches("^/k/" .. ("[0-9a-f]"):rep(32) .. "__lock__%d%d%d%d%d%d%d%d%d%d$",
                           q:node())
            assert.equal("lua-contender\n", kazoo(hosts, "/k", { "contenders" }))
            q:leave()
        end)

        it("waits on kazoo's lock on the path, as kazoo's leases do", function()
            local go = ("%s/lease-go-%d"):format(zk.tmpdir(), proc.getpid())
            os.remove(go)
            local log = ("%s/lease-lock-%d.log"):format(zk.tmpdir(), proc.getpid())
            local argv = { "/usr/bin/python3", "spec/peers/kazoo_lease.py", hosts, "/k", "lock", go }
            local pid = assert(proc.spawn(argv, { stdout = log, stderr = log,
                                                  env = { LD_PRELOAD = "" } }))
            local ok, err = pcall(function()
                assert.truthy(zk.wait_until(function()
                    return (proc.read_file(log) or ""):find("locked", 1, true) ~= nil
                end, 30), "kazoo did not lock: " .. (proc.read_file(log) or ""))
                local l = c:lease("/k", 600, { identifier = "lua", timeout = 0.5 })
                assert.same({ nil, "timeout" }, { l:obtain() })
                assert(proc.write_file(go, "go"))
                assert.truthy(proc.wait_exit(pid, 30), "kazoo did not finish")
                assert.is_true(c:lease("/k", 600, { identifier = "lua" }):obtain())
            end)
            os.remove(go)
            if proc.alive(pid) then proc.kill(pid, "KILL") end
            assert(ok, err)
        end)
    end)
end)
