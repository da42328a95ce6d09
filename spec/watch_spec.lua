-- The self-re-arming watch against real servers: first delivery, bursts of
-- updates (latest value wins, never older after newer), delete and
-- re-create, children, a server restart, a session expiry, cancel, and a
-- callback that throws.
local zk = require "helpers.zk"
local zkserver = require "helpers.zkserver"

describe("watch #zk", function()
    local root, c, other

    before_each(function()
        root = zk.new_root("watch")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    -- A recorder: fn plus the values it saw.
    local function recorder()
        local r = { n = 0, values = {}, stats = {} }
        r.fn = function(v, st)
            r.n = r.n + 1
            r.values[r.n] = v == nil and "<nil>" or v
            r.stats[r.n] = st
            r.last = v
        end
        return r
    end

    it("delivers the current state before new() returns", function()
        c:create("/a", "v1")
        local r = recorder()
        local w = assert(c:watch("/a", r.fn))
        assert.equal(1, r.n)
        assert.equal("v1", r.last)
        assert.equal(0, r.stats[1].version)
        local r2 = recorder()
        local w2 = assert(c:watch("/missing", r2.fn))
        assert.equal(1, r2.n)
        assert.is_nil(r2.last)
        assert.is_nil(r2.stats[1])
        -- one server watch each: get on /a, exists on /missing
        assert.equal(2, c:stats().watches)
        w:cancel()
        w2:cancel()
    end)

    it("ends a burst of 50 updates with the latest value, never going back", function()
        c:create("/burst", "0")
        local r = recorder()
        local w = assert(c:watch("/burst", r.fn))
        local fs = {}
        for i = 1, 50 do
            fs[i] = other:send("set", "/burst", tostring(i))
        end
        for i = 1, 50 do
            assert.truthy(fs[i]:wait())
        end
        assert.truthy(zk.wait_until(function() return r.last == "50" end, 5, c))
        c:dispatch(0.2)
        assert.equal("50", r.last)
        for i = 2, r.n do
            assert.is_true(tonumber(r.values[i]) > tonumber(r.values[i - 1]),
                "delivery " .. i .. " went back: " .. table.concat(r.values, ","))
        end
        -- a value set one by one is seen one by one
        for i = 51, 55 do
            other:set("/burst", tostring(i))
            assert.truthy(zk.wait_until(function() return r.last == tostring(i) end, 5, c))
        end
        assert.is_true(c:stats().watches <= 2)
        w:cancel()
    end)

    it("reports a delete as nil and a re-create with its new data", function()
        c:create("/d", "first")
        local r = recorder()
        local w = assert(c:watch("/d", r.fn))
        other:delete("/d")
        assert.truthy(zk.wait_until(function() return r.n == 2 end, 5, c))
        assert.is_nil(r.last)
        other:create("/d", "second")
        assert.truthy(zk.wait_until(function() return r.n == 3 end, 5, c))
        assert.equal("second", r.last)
        assert.equal(0, r.stats[3].version)
        other:set("/d", "third")
        assert.truthy(zk.wait_until(function() return r.last == "third" end, 5, c))
        assert.same({ "first", "<nil>", "second", "third" }, r.values)
        w:cancel()
    end)

    it("watches children: names sorted, nil while the parent is missing", function()
        local r = recorder()
        local w = assert(c:watch("/p", r.fn, { kind = "children" }))
        assert.equal(1, r.n)
        assert.is_nil(r.last)
        other:create("/p")
        assert.truthy(zk.wait_until(function() return r.n == 2 end, 5, c))
        assert.same({}, r.last)
        other:create("/p/b")
        assert.truthy(zk.wait_until(function() return r.n == 3 end, 5, c))
        other:create("/p/a")
        assert.truthy(zk.wait_until(function() return r.n == 4 end, 5, c))
        assert.same({ "a", "b" }, r.last)
        assert.equal(2, r.stats[4].num_children)
        -- data changes of the parent are not child changes
        other:set("/p", "x")
        c:dispatch(0.2)
        assert.equal(4, r.n)
        other:delete("/p/a")
        other:delete("/p/b")
        assert.truthy(zk.wait_until(function()
            return type(r.last) == "table" and #r.last == 0
        end, 5, c))
        other:delete("/p")
        assert.truthy(zk.wait_until(function() return r.last == nil end, 5, c))
        w:cancel()
        assert.equal(0, c:stats().watches)
    end)

    it("survives a server restart and sees updates made after it", function()
        local srv = assert(zkserver.start({ tick_time = 500 }))
        local ok, err = pcall(function()
            local sc = zk.client { servers = srv.hosts, session_timeout = 8 }
            local so = zk.client { servers = srv.hosts, session_timeout = 8 }
            sc:create("/r", "before")
            local r = recorder()
            local w = assert(sc:watch("/r", r.fn))
            local sid = sc:session_id()
            srv:stop()
            assert.truthy(zk.wait_until(function() return sc:state() == "suspended" end, 6, sc))
            assert.truthy(srv:start())
            assert.truthy(zk.wait_until(function() return sc:state() == "connected" end, 15, sc))
            assert.equal(sid, sc:session_id())
            sc:dispatch(0.2)
            -- same session, same state: the re-read finds nothing new
            assert.same({ "before" }, r.values)
            assert.truthy(zk.wait_until(function() return so:state() == "connected" end, 15, so))
            -- The restarted server may still drop a first request under load:
            -- set until it is acknowledged (setting "after" twice is harmless).
            local set_ok, set_err
            zk.wait_until(function()
                set_ok, set_err = so:set("/r", "after")
                return set_ok ~= nil
            end, 15, so)
            assert.truthy(set_ok, "set failed: " .. tostring(set_err))
            assert.truthy(zk.wait_until(function() return r.last == "after" end, 10, sc),
                          ("the watch did not see the set: state %s, values %s"):format(
                              sc:state(), table.concat(r.values, ",")))
            so:delete("/r")
            assert.truthy(zk.wait_until(function() return r.n == 3 end, 5, sc))
            assert.same({ "before", "after", "<nil>" }, r.values)
            w:cancel()
            assert.equal(0, sc:stats().watches)
        end)
        zk.close_clients()
        srv:destroy()
        assert(ok, err)
    end)

    it("re-arms in the new session after expiry and delivers the current state", function()
        c:create("/s", "one")
        local r = recorder()
        local w = assert(c:watch("/s", r.fn))
        local old = c:session_id()
        assert.truthy(zk.expire_session(c))
        assert.truthy(zk.wait_until(function()
            return c:state() == "connected" and r.n >= 2
        end, 10, c))
        assert.are_not.equal(old, c:session_id())
        -- told again after the new session: same value, fresh read
        assert.equal("one", r.last)
        other:set("/s", "two")
        assert.truthy(zk.wait_until(function() return r.last == "two" end, 5, c))
        other:delete("/s")
        assert.truthy(zk.wait_until(function() return r.last == nil and r.n >= 4 end, 5, c))
        w:cancel()
        assert.equal(0, c:stats().watches)
    end)

    it("a change made while the session was being replaced is delivered", function()
        c:create("/s2", "one")
        local r = recorder()
        local w = assert(c:watch("/s2", r.fn, { kind = "data" }))
        local sid = c:session_id()
        local expired = false
        c:on_state(function(new)
            if new == "lost" and not expired then
                expired = true
                other:send("set", "/s2", "during")
            end
        end)
        assert.truthy(zk.expire_session(c))
        assert.truthy(zk.wait_until(function() return r.last == "during" end, 10, c))
        assert.are_not.equal(sid, c:session_id())
        w:cancel()
    end)

    it("cancel stops deliveries and removes every watch", function()
        c:create("/c", "1")
        c:create("/cp")
        local r = recorder()
        local w = assert(c:watch("/c", r.fn))
        local rc = recorder()
        local wc = assert(c:watch("/cp", rc.fn, { kind = "children" }))
        local rm = recorder()
        local wm = assert(c:watch("/none", rm.fn))
        assert.equal(3, c:stats().watches)
        -- cancel with an update on its way
        other:set("/c", "2")
        w:cancel()
        wc:cancel()
        wm:cancel()
        assert.is_false(w:is_active())
        assert.equal(0, c:stats().watches)
        other:set("/c", "3")
        other:create("/cp/x")
        other:create("/none")
        c:dispatch(0.3)
        assert.equal(1, r.n)
        assert.equal(1, rc.n)
        assert.equal(1, rm.n)
        assert.equal(0, c:stats().watches)
        assert.equal(0, c:stats().pending)
        assert.is_true(w:cancel())     -- idempotent
    end)

    it("cancelling one of two watches on a node leaves the other working", function()
        c:create("/two", "0")
        local r1, r2 = recorder(), recorder()
        local w1 = assert(c:watch("/two", r1.fn))
        local w2 = assert(c:watch("/two", r2.fn))
        w1:cancel()
        c:dispatch(0.1)     -- the server-side removal is done
        other:set("/two", "1")
        assert.truthy(zk.wait_until(function() return r2.last == "1" end, 5, c))
        assert.equal("0", r1.last)
        w2:cancel()
        assert.equal(0, c:stats().watches)
    end)

    it("cancel from inside fn stops it at once", function()
        c:create("/ci", "0")
        local n = 0
        local w
        w = assert(c:watch("/ci", function(v)
            n = n + 1
            if v == "2" then w:cancel() end
        end))
        for i = 1, 5 do
            other:set("/ci", tostring(i))
            c:dispatch(0.05)
        end
        c:dispatch(0.2)
        assert.is_false(w:is_active())
        assert.is_true(n <= 3)
        assert.equal(0, c:stats().watches)
    end)

    it("keeps watching when fn throws, and logs the error", function()
        local logged = {}
        local lc = zk.client { chroot = root, logger = function(level, msg)
            if level == "error" then logged[#logged + 1] = msg end
        end }
        lc:create("/t", "0")
        local seen = {}
        local w = assert(lc:watch("/t", function(v)
            seen[#seen + 1] = v
            error("boom " .. tostring(v))
        end))
        assert.same({ "0" }, seen)
        for i = 1, 3 do
            other:set("/t", tostring(i))
            assert.truthy(zk.wait_until(function() return seen[#seen] == tostring(i) end, 5, lc))
        end
        assert.is_true(#logged >= 4)
        assert.matches("boom", logged[1])
        w:cancel()
        assert.equal(0, lc:stats().watches)
    end)

    it("raises on bad arguments and fails on a closed client", function()
        assert.has_error(function() c:watch("relative", function() end) end)
        assert.has_error(function() c:watch("/x", "not a function") end)
        assert.has_error(function() c:watch("/x", function() end, { kind = "stat" }) end)
        assert.has_error(function() c:watch("/x", function() end, { bogus = 1 }) end)
        local cc = zk.client { chroot = root }
        cc:close()
        assert.same({ nil, "closed" }, { cc:watch("/x", function() end) })
    end)

    -- kazoo takes any callable; a table with __call used to raise "function
    -- expected" here and in every other callback parameter.
    it("takes a callable table wherever it takes a function", function()
        local seen = {}
        local function callable(name)
            return setmetatable({}, { __call = function(_, ...)
                seen[name] = select("#", ...) > 0 and (...) or true
            end })
        end
        c:create("/callable", "v1")
        local w = assert(c:watch("/callable", callable("watch")))
        assert.equal("v1", seen.watch)
        -- a one-shot watch of a read, a state listener, a future's on_done
        assert(c:get("/callable", callable("get")))
        c:on_state(callable("on_state"))
        c:send("exists", "/callable"):on_done(callable("on_done"))
        other:set("/callable", "v2")
        assert.is_true(zk.wait_until(function() return seen.on_done ~= nil end,
                                     5 * zk.SESSION_TIMEOUT, c))
        assert.is_true(zk.wait_until(function()
            return seen.get ~= nil and seen.watch == "v2"
        end, 5 * zk.SESSION_TIMEOUT, c))
        assert.equal("changed", seen.get.type)
        -- a scoped hold's fn and a spawned coroutine
        local lock = c:lock("/callable-lock")
        assert.equal("ran", lock:run(setmetatable({}, { __call = function() return "ran" end })))
        c:spawn(callable("spawn"), "arg")
        assert.is_true(c:run(zk.SESSION_TIMEOUT))
        assert.equal("arg", seen.spawn)
        w:cancel()
        -- a table without __call is still refused, in the same words
        assert.has_error(function() c:watch("/callable", {}) end,
                         "bad argument #2 to 'watch' (function expected, got table)")
    end)
end)
