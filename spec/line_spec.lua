-- The engine's driver API (zkcoord.line: line.driver, modes, the sort key,
-- the rules module, the zkcoord.queue alias, scanned rules) and the TTL
-- lease written as a driver (examples/ttl_lease.lua), against real servers.
-- TTL expiry runs on a server of its own that checks TTLs every 0.5 s (60 s
-- by default).
local zk = require "helpers.zk"
local zkserver = require "helpers.zkserver"
local proc = require "helpers.proc"
local zkcoord = require "zkcoord"
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"

local ttl_lease = assert(loadfile("examples/ttl_lease.lua"))("module")

-- A lock's line: its rule is answered by the engine's one-pass scan
-- (spec/line_scan_spec.lua compares it with the rule on parse's entries).
local ONE = line.driver { marker = "lock-", rule = rules.first }

-- Raises with a message containing `text` (plain), blaming this file.
local function raises(text, fn, ...)
    local ok, err = pcall(fn, ...)
    assert.is_false(ok, "did not raise: " .. text)
    assert.matches(text, err, 1, true)
    assert.matches("^spec/line_spec%.lua:%d+: ", err)
end

local function sh_quote(s)
    return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end


describe("line drivers #zk", function()
    local root, c, other

    before_each(function()
        root = zk.new_root("line")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("zkcoord.queue is the same module; the old rule names are the rules module's", function()
        local queue = require "zkcoord.queue"
        assert.equal(line, queue)
        assert.equal(rules.first, queue.rule_first)
        assert.equal(rules.always, queue.rule_always)
        assert.equal(rules.fewer_than, queue.rule_fewer_than)
        assert.equal(rules.none_below, queue.rule_none_below)
        assert.equal(rules.ANY, queue.ANY)
    end)

    it("line.driver checks a driver once and names what is wrong", function()
        local function bad(msg, d)
            raises("bad argument #1 to 'line.driver' (" .. msg .. ")", line.driver, d)
        end
        bad("driver must be a table, got nil", nil)
        bad("unknown driver field 'persistent' (marker, markers, rule, data, parents, mode, "
            .. "ttl, key, prefix)", { marker = "m-", rule = rules.first, persistent = true })
        bad("marker must be a non-empty string without '/' or control characters",
            { marker = "a/b", rule = rules.first })
        bad("rule must be a function, got nil", { marker = "m-" })
        bad("mode must be 'ephemeral', 'persistent' or 'ttl', got sticky",
            { marker = "m-", rule = rules.first, mode = "sticky" })
        local ttl_msg = "ttl must be a positive number of seconds, at most 1099511627.775"
        bad(ttl_msg, { marker = "m-", rule = rules.first, mode = "ttl" })
        bad(ttl_msg, { marker = "m-", rule = rules.first, mode = "ttl", ttl = 0 })
        bad("ttl is for mode 'ttl' only", { marker = "m-", rule = rules.first, ttl = 5 })
        bad("key must be a function or nil, got number", { marker = "m-", rule = rules.first,
                                                           key = 1 })
        bad("prefix must be a function or nil, got string", { marker = "m-", rule = rules.first,
                                                              prefix = "p-" })
        local prefix_msg = "prefix must return a non-empty string without '/' or control "
                           .. "characters, a different one for each uuid"
        for _, prefix in ipairs({
            function() return "same-" end,                     -- not made of the uuid
            function(id) return "a/" .. id end,
            function(id) return id .. "\n" end,
            function() return "" end,
            function() return nil end,
        }) do
            bad(prefix_msg, { marker = "m-", rule = rules.first, prefix = prefix })
        end
        -- the options form (zkcoord.queue's) points at line.driver for the new fields
        raises("unknown option 'mode' (marker, markers, rule, data, parents, persistent); "
               .. "'mode' is a field of line.driver{...}",
               function() line.new(c, "/q", { marker = "m-", rule = rules.first, mode = "ttl" }) end)
        local d = line.driver { marker = "m-", rule = rules.first }
        raises("bad argument #4 to 'line.new' (data must be a string, got number)",
               function() line.new(c, "/q", d, 5) end)
        assert.is_true(line.is_driver(line.driver { marker = "m-", rule = rules.first }))
        assert.is_false(line.is_driver({ marker = "m-", rule = rules.first }))
    end)

    it("one driver serves many positions; data comes from the driver or line.new", function()
        local d = line.driver { marker = "m-", rule = rules.first, data = "default" }
        local a, b = line.new(c, "/one", d), line.new(other, "/one", d, "b's")
        assert.is_true(a:enter(2))
        assert.same({ nil, "timeout" }, { b:enter(0.2) })
        assert.equal("default", (c:get(a:node())))
        a:leave()
        assert.is_true(b:enter(2))
        assert.same({ "b's" }, b:participants())
        b:leave()
    end)

    it("a driver's prefix names our node: <prefix(uuid)><marker><seq>", function()
        local ids = {}
        local d = line.driver { marker = "job-", rule = rules.first, prefix = function(id)
            ids[#ids + 1] = id
            return "x" .. id:gsub("%-", "") .. "."
        end }
        local a = line.new(c, "/pre", d)
        assert.is_true(a:enter(2))
        local want = "x" .. ids[#ids]:gsub("%-", "") .. ".job-0000000000"
        assert.equal("/pre/" .. want, a:node())
        assert.same({ want }, (c:children("/pre")))
        assert.equal(0, a:seq())
        a:leave()
        -- the default: Curator's protected prefix
        local b = line.new(c, "/pre", line.driver { marker = "job-", rule = rules.first })
        assert.is_true(b:enter(2))
        assert.matches("^/pre/_c_%x+%-%x+%-4%x+%-%x+%-%x+%-job%-0000000001$", b:node())
        b:leave()
    end)

    it("token() is a through position's czxid; nil, 'notheld' otherwise", function()
        local a, b = line.new(c, "/tok", ONE), line.new(other, "/tok", ONE)
        assert.same({ nil, "notheld" }, { a:token() })
        assert.is_true(a:enter(2))
        local t1 = assert(a:token())
        assert.equal(a:stat().czxid, t1)
        assert.equal(assert(other:exists(a:node())).czxid, t1)
        -- in the line, not through: no token
        assert.same({ nil, "timeout" }, { b:enter(0) })
        assert.same({ nil, "notheld" }, { b:token() })
        a:leave()
        assert.same({ nil, "notheld" }, { a:token() })
        assert.is_true(b:enter(2))
        assert.is_true(assert(b:token()) > t1)
        b:leave()
    end)

    it("a driver's key orders the line; ties and the default go by sequence number", function()
        -- a two-level priority line: "hi-" entries before "lo-" ones
        local function drv(marker)
            return line.driver { marker = marker, markers = { "hi-", "lo-" }, rule = rules.always,
                                 key = function(e) return e.marker == "hi-" and 0 or 1 end }
        end
        local lo1, lo2 = line.new(c, "/prio", drv("lo-")), line.new(c, "/prio", drv("lo-"))
        local hi = line.new(c, "/prio", drv("hi-"))
        assert.is_true(lo1:enter(2))
        assert.is_true(lo2:enter(2))
        assert.is_true(hi:enter(2))
        local entries = assert(hi:entries())
        assert.equal(3, #entries)
        assert.equal(hi:node(), entries[1].path)
        assert.equal(lo1:node(), entries[2].path)
        assert.equal(lo2:node(), entries[3].path)
        assert.same({ 0, 1, 1 }, { entries[1].key, entries[2].key, entries[3].key })
        -- the same names without a key: by sequence number
        local plain = line.new(c, "/prio", line.driver { marker = "hi-", markers = { "hi-", "lo-" },
                                                         rule = rules.always })
        local seqs = assert(plain:entries())
        assert.equal(lo1:node(), seqs[1].path)
        assert.equal(hi:node(), seqs[3].path)
        assert.is_nil(seqs[1].key)
        hi:leave() lo1:leave() lo2:leave()
    end)

    it("mode 'persistent' outlives the session; mode 'ttl' makes a TTL node", function()
        local p = line.new(c, "/modes", line.driver { marker = "p-", rule = rules.always,
                                                      mode = "persistent" })
        assert.is_true(p:enter(2))
        local node = p:node()
        assert.truthy(zk.expire_session(c))
        assert.truthy(zk.wait_until(function() return c:state() == "connected" end, 10, c))
        assert.truthy(other:exists(node))
        assert.is_true(p:is_through())
        assert.is_true(p:leave())
        local t = line.new(c, "/modes", line.driver { marker = "t-", rule = rules.always,
                                                      mode = "ttl", ttl = 30 })
        assert.is_true(t:enter(2))
        local tnode = t:node()
        local st = assert(other:exists(tnode))
        assert.is_nil(st.ephemeral_owner)
        c:close()                               -- no session owns it: it stays
        assert.truthy(other:exists(tnode))
        assert.truthy(other:delete(tnode))
    end)

    it("the TTL lease survives its holder's session expiry, and renews in the new one",
       function()
        local la = ttl_lease.new(c, "/lease", { ttl = 30, data = "a" })
        local lb = ttl_lease.new(other, "/lease", { ttl = 30, data = "b" })
        local lost
        la:on_lost(function(reason) lost = reason end)
        assert.is_true(la:acquire(2))
        assert.same({ nil, "timeout" }, { lb:acquire(0.2) })
        assert.truthy(zk.expire_session(c))
        assert.truthy(zk.wait_until(function() return c:state() == "connected" end, 10, c))
        c:dispatch(0.2)
        assert.is_nil(lost)
        assert.is_true(la:held())
        assert.is_true(la:renew())
        assert.same({ nil, "timeout" }, { lb:acquire(0) })
        -- someone deletes the holder's node: reported, and renew says so
        assert.truthy(other:delete(la:node()))
        assert.truthy(zk.wait_until(function() return lost ~= nil end, 5, c))
        assert.equal("deleted", lost)
        assert.is_false(la:held())
        assert.same({ nil, "lost" }, { la:renew() })
        assert.is_true(lb:acquire(2))
        assert.is_true(lb:release())
        other:sync("/lease")
        assert.same({}, other:children("/lease"))
    end)

    it("waits on a hand-made node below ours, not on one past the wrap or a foreign one", function()
        assert(c:create("/l", nil, { parents = true }))
        assert(c:create("/l/zz-lock-0000000000"))     -- below any node the server numbers
        assert(c:create("/l/zz-lock--000000001"))     -- past the wrap: the newest
        assert(c:create("/l/zz-lock-"))               -- no number: not in the line
        local q = line.new(c, "/l", ONE)
        assert.truthy(q.driver.scan)
        assert.same({ nil, "timeout" }, { q:enter(0.3) })
        assert.is_nil(q:node())                       -- gave up: no node left
        local w, done = line.new(c, "/l", ONE), nil
        c:spawn(function() done = { w:enter(10) } end)
        c:spawn(function()
            c:waiter():sleep(0.3)
            assert.is_nil(done)
            assert(other:delete("/l/zz-lock-0000000000"))
        end)
        assert.is_true(c:run(10))
        assert.same({ true }, done)
        local entries = assert(w:entries())          -- ours, then the newest hand-made one
        assert.same({ w:node(), "/l/zz-lock--000000001" }, { entries[1].path, entries[2].path })
        assert.equal(2, #entries)
        w:leave()
    end)

    it("joins again when its node is deleted while it waits", function()
        local holder = line.new(other, "/j", ONE)
        assert.is_true(holder:enter(2))
        local w, done, first = line.new(c, "/j", ONE), nil, nil
        c:spawn(function() done = { w:enter(10) } end)
        c:spawn(function()
            c:waiter():sleep(0.3)
            first = w:node()
            assert.truthy(first)
            assert(other:delete(first))
            holder:leave()
        end)
        assert.is_true(c:run(10))
        assert.same({ true }, done)
        assert.truthy(w:node())
        assert.not_equal(first, w:node())
        assert.same({ w:node() }, { assert(w:entries())[1].path })
        w:leave()
    end)

    it("a waiter whose node went says in the log that it joins again at the end", function()
        local logs = {}
        local lc = zk.client { chroot = root, logger = function(level, msg)
            logs[#logs + 1] = level .. ": " .. msg
        end }
        local holder = line.new(other, "/m", ONE)
        assert.is_true(holder:enter(2))
        local w, done, first = line.new(lc, "/m", ONE), nil, nil
        lc:spawn(function() done = { w:enter(10) } end)
        lc:spawn(function()
            lc:waiter():sleep(0.3)
            first = w:node()
            assert.truthy(first)
            assert(other:delete(first))
            lc:waiter():sleep(0.3)     -- it joins again behind the holder
            holder:leave()
        end)
        assert.is_true(lc:run(10))
        assert.same({ true }, done)
        assert.not_equal(first, w:node())
        local said = table.concat(logs, "\n")
        assert.truthy(said:find("warn: line /m: our node " .. first:match("[^/]+$")
                                .. " is missing from the line", 1, true), said)
        w:leave()
    end)

    it("enter_step never waits for others: false with one watch, wake() when the line moves",
       function()
        local woke = 0
        local function wake() woke = woke + 1 end
        local holder = line.new(other, "/s", ONE)
        assert.is_true(holder:enter(2))
        local q = line.new(c, "/s", ONE)
        assert.is_false(q:enter_step(wake, 5))       -- behind the holder: its node watched
        assert.truthy(q:node())
        assert.is_false(q:is_through())
        assert.is_false(q:enter_step(wake, 5))       -- again: the same node, one watch
        assert.equal(2, #assert(q:entries()))
        holder:leave()
        assert.truthy(zk.wait_until(function() return woke > 0 end, 5, c))
        assert.is_true(q:enter_step(wake, 5))
        assert.is_true(q:is_through())
        q:leave()
        -- A rule that waits for any change of the line (line.ANY).
        local TWO = line.driver { marker = "pair-", rule = function(entries)
            return #entries >= 2 or line.ANY
        end }
        woke = 0
        local a = line.new(c, "/any", TWO)
        assert.is_false(a:enter_step(wake, 5))
        local b = line.new(other, "/any", TWO)
        assert.is_true(b:enter(2))
        assert.truthy(zk.wait_until(function() return woke > 0 end, 5, c))
        assert.is_true(a:enter_step(wake, 5))
        a:leave()
        b:leave()
        raises("bad argument #1 to 'enter_step' (function expected, got nil)",
               function() return q:enter_step(nil, 1) end)
    end)
end)


describe("TTL lease on a server that checks TTLs every 0.5 s #zk #slow", function()
    local server, clients

    setup(function()
        server = assert(zkserver.start { jvm_flags = { "-Dznode.container.checkIntervalMs=500" } })
    end)

    teardown(function()
        if server then server:destroy() end
    end)

    before_each(function() clients = {} end)

    after_each(function()
        for _, cl in ipairs(clients) do cl:close() end
    end)

    local function connect()
        -- a fresh JVM may stall a second: no connection loss over that
        local cl = assert(zkcoord.connect { servers = server.hosts, session_timeout = 10 })
        clients[#clients + 1] = cl
        return cl
    end

    it("a holder that dies keeps the lease for its TTL, renewals included, then it moves on",
       function()
        local a, b = connect(), connect()
        -- a TTL well above what one of b's tries takes on a loaded machine
        local ttl = 4
        local la = ttl_lease.new(a, "/dies", { ttl = ttl, data = "a" })
        local lb = ttl_lease.new(b, "/dies", { ttl = ttl, data = "b" })
        assert.is_true(la:acquire(5))
        -- renewed for 1.5 times the TTL: b never gets it meanwhile
        local t_end = proc.now() + 1.5 * ttl
        while proc.now() < t_end do
            assert.is_true(la:renew())
            assert.same({ nil, "timeout" }, { lb:acquire(0.5) })
        end
        assert.is_true(la:renew())
        local node = la:node()
        local t0 = proc.now()
        a:close()                                   -- dies without releasing
        assert.truthy(b:exists(node))               -- no session took it along
        local ok, err = lb:acquire(20)
        local waited = proc.now() - t0
        assert.is_true(ok, tostring(err))
        -- not before its TTL (the server counts from the last write), and
        -- soon after it (TTL checks every 0.5 s)
        assert.is_true(waited >= ttl - 0.1, waited)
        -- measured at load 2: ttl + 0.4 s at most
        assert.is_true(waited < ttl + 8, waited)
        assert.is_false(b:exists(node))
        assert.is_true(lb:release())
    end)

    it("examples/ttl_lease.lua runs against the server", function()
        local out = zk.tmpdir() .. "/ttl_lease.out"
        local cmd = ("ZKCOORD_SERVERS=%s LEASE_TTL=3 timeout -s KILL 90 luajit examples/ttl_lease.lua "
                     .. "/example 30 > %s 2>&1"):format(sh_quote(server.hosts), sh_quote(out))
        os.execute(cmd)
        local text = proc.read_file(out) or ""
        assert.matches("a takes the lease:\ttrue", text, 1, true)
        assert.matches("b tries for 0.25 TTL:\tnil\ttimeout", text, 1, true)
        assert.matches("a renewed; b tries once:\tnil\ttimeout", text, 1, true)
        assert.matches("its node is still there:\ttrue", text, 1, true)
        assert.matches("b takes the lease after [%d.]+ s:\ttrue", text)
        assert.matches("\ndone\n$", text)
    end)
end)
