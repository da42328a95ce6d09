-- zkcoord.util against a real server: the one retry helper (deadline,
-- closed, max_tries, waiting through a suspended connection) and the rule
-- that user callbacks always run protected, all of them, errors logged.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local util = require "zkcoord.util"
local tcpproxy = require "helpers.tcpproxy"

-- Raises exactly `msg`, blaming the caller (this file), not the library.
local function raises_here(msg, fn, ...)
    local ok, err = pcall(fn, ...)
    assert.is_false(ok, "did not raise: " .. msg)
    local where, text = tostring(err):match("^(.-:%d+): (.*)$")
    assert.equal(msg, text or err)
    assert.matches("util_spec%.lua:%d+$", where or "?", 1, false,
                   "blames " .. tostring(where) .. ", not the caller")
end

-- One read of "/" whose wait is cut at `wait` seconds; a wait cut short is
-- reported as ZooKeeper's own transient "operationtimeout".
local function counted_read(c, wait)
    local calls = 0
    return function()
        calls = calls + 1
        local st, err = c:send("exists", "/"):wait(wait)
        if err == "timeout" then
            err = "operationtimeout"
        end
        return st, err
    end, function() return calls end
end


-- Pauses the server and returns once every thread of it has stopped (a
-- SIGSTOP reaches a busy JVM's threads one by one).
local function pause(srv)
    assert(srv:pause())
    assert.truthy(zk.wait_until(function()
        local ls = io.popen("ls /proc/" .. srv.pid .. "/task")
        for tid in ls:lines() do
            if proc.state(tonumber(tid)) ~= "T" then
                ls:close()
                return false
            end
        end
        ls:close()
        return true
    end, 10), "the server's threads did not stop")
end


describe("util.retry #zk", function()
    local srv

    after_each(function()
        zk.close_clients()
        if srv then
            srv:destroy()
            srv = nil
        end
    end)

    it("gives up with 'timeout' at its deadline while the server is paused", function()
        srv = assert(zk.zkserver.start({ tick_time = 500 }))
        local c = zk.client { servers = srv.hosts, session_timeout = 10 }
        local read, calls = counted_read(c, 5)
        assert.truthy(util.retry(c, util.deadline(5), nil, read))
        assert.equal(1, calls())

        pause(srv)
        read, calls = counted_read(c, 0.3)
        local t0 = proc.now()
        local st, err = util.retry(c, util.deadline(2), util.UNTIL_DEADLINE, read)
        local took = proc.now() - t0
        assert(srv:resume())
        assert.same({ nil, "timeout" }, { st, err })
        assert.is_true(took >= 2, "gave up early: " .. took)
        -- a try started just before the deadline waits its 0.3 s out
        -- measured at load 2: 2.00-2.01 s
        assert.is_true(took < 2 + 0.3 + 1, "overran its deadline: " .. took)
        assert.is_true(calls() >= 2, "tried " .. calls() .. " time(s)")
    end)

    it("waits through a suspended connection and succeeds once it is back", function()
        -- The connection is cut and new ones refused: suspended at once, and
        -- the link comes back right after the retry's first try failed, so
        -- the session has its whole timeout to reconnect in. (Before: the
        -- server paused, noticed at 2/3 of a 4 s session, resumed 1 s later
        -- by another process: at load 7, 2 runs in 8 came back after the
        -- session counted lost by the clock, in a new session.)
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)$"))))
        finally(function() proxy:stop() end)
        local c = zk.client { servers = proxy.hosts, session_timeout = 4 }
        local sid = c:session_id()
        assert(proxy:refuse())
        assert(proxy:cut())
        assert.truthy(zk.wait_until(function() return c:state() == "suspended" end, 10, c),
                      "the cut was not noticed")
        local read, calls = counted_read(c, 0.5)
        local st = util.retry(c, util.deadline(20), util.UNTIL_DEADLINE, function()
            local a, b = read()
            if calls() == 1 then
                assert.is_nil(a, "answered while suspended")
                assert(proxy:pass())
            end
            return a, b
        end)
        assert.truthy(st, "no answer after the link came back")
        assert.is_true(calls() >= 2)
        assert.truthy(zk.wait_until(function() return c:state() == "connected" end, 10, c),
                      "not connected again")
        assert.equal(sid, c:session_id())
    end)

    it("returns a non-transient error at once, and the last one after max_tries", function()
        local c = zk.client {}
        local n = 0
        local st, err = util.retry(c, util.deadline(5), nil, function()
            n = n + 1
            return c:get("/no-such-node-here")
        end)
        assert.same({ nil, "nonode", 1 }, { st, err, n })

        n = 0
        local t0 = proc.now()
        st, err = util.retry(c, nil, { max_tries = 3, base_delay = 0.05, max_delay = 0.1 },
                             function()
                                 n = n + 1
                                 return nil, "connectionloss"
                             end)
        assert.same({ nil, "connectionloss", 3 }, { st, err, n })
        -- two pauses between three tries: at least half of 0.05 + 0.1
        assert.is_true(proc.now() - t0 >= 0.075)
    end)

    it("returns 'closed' once the client is closed", function()
        local c = zk.client {}
        local n = 0
        local st, err = util.retry(c, util.deadline(5), util.UNTIL_DEADLINE, function()
            n = n + 1
            if n == 2 then
                c:close()
            end
            return nil, "connectionloss"
        end)
        assert.same({ nil, "closed", 2 }, { st, err, n })
    end)

    it("client:retry uses the client's connect-time retry policy", function()
        local c = zk.client { retry = { max_tries = 4, base_delay = 0.01, max_delay = 0.02 } }
        local n = 0
        local function flaky(x, y)
            n = n + 1
            if n < 3 then
                return nil, "operationtimeout"
            end
            return x + y, nil, "third"
        end
        local r1, r2, r3 = c:retry(util.deadline(5), flaky, 2, 3)
        assert.same({ 5, nil, "third", 3 }, { r1, r2, r3, n })
        n = 0
        local st, err = c:retry(nil, function() n = n + 1; return nil, "connectionloss" end)
        assert.same({ nil, "connectionloss", 4 }, { st, err, n })
        n = 0
        st, err = c:retry(util.deadline(5), function() n = n + 1; return nil, "nonode" end)
        assert.same({ nil, "nonode", 1 }, { st, err, n })
        raises_here("bad argument #2 to 'retry' (fn must be a function, got nil)",
                    function() c:retry(nil) end)
        raises_here("bad argument #1 to 'retry' (deadline must be a number (a zkcoord.now() "
                    .. "time) or nil)", function() c:retry("soon", print) end)
        raises_here("'retry' must be called on a zkcoord client (use client:retry(...))",
                    function() c.retry(nil, nil, print) end)
    end)
end)


describe("user callbacks #zk", function()
    local root, logged, c

    before_each(function()
        root = zk.new_root("util")
        logged = {}
        c = zk.client { chroot = root, logger = function(level, msg)
            if level == "error" then logged[#logged + 1] = msg end
        end }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("all run when the first raises, and the error is logged", function()
        local ran = {}
        util.call_all(c, {
            function() ran[#ran + 1] = 1; error("boom one") end,
            function(a, b) ran[#ran + 1] = a .. b end,
            function() ran[#ran + 1] = 3; error("boom three") end,
        }, "test", "x", "y")
        assert.same({ 1, "xy", 3 }, ran)
        assert.equal(2, #logged)
        assert.matches("test callback failed: .*boom one", logged[1])
        assert.matches("boom three", logged[2])
        assert.matches("traceback", logged[1])
    end)

    it("a multi_lock's on_lost callbacks all run when the first raises", function()
        local ml = c:multi_lock({ "/a", "/b" })
        local seen = {}
        ml:on_lost(function(reason, path)
            seen[#seen + 1] = "first " .. path
            error("boom " .. reason)
        end)
        local reasons = {}
        ml:on_lost(function(reason, path)
            seen[#seen + 1] = "second " .. path
            reasons[#reasons + 1] = reason
        end)
        assert.truthy(ml:acquire(5))
        assert.truthy(zk.expire_session(c), "the session did not expire")
        assert.truthy(zk.wait_until(function() return #seen == 4 end, 10, c),
                      "on_lost ran " .. #seen .. " time(s): " .. table.concat(seen, ", "))
        table.sort(seen)
        assert.same({ "first /a", "first /b", "second /a", "second /b" }, seen)
        -- the session's end, or (seen first) the delete of our node it made
        for _, r in ipairs(reasons) do
            assert.truthy(r == "sessionexpired" or r == "deleted", r)
        end
        local failed = {}
        for _, msg in ipairs(logged) do
            if msg:find("callback failed", 1, true) then failed[#failed + 1] = msg end
        end
        assert.equal(2, #failed, table.concat(logged, "\n"))
        assert.matches("multi_lock on_lost callback failed: .*boom ", failed[1])
        assert.same({ nil, "lost" }, { ml:release() })
    end)
end)


describe("argument checks in one wording #zk", function()
    local c

    before_each(function()
        c = zk.client {}
    end)

    after_each(function()
        zk.close_clients()
    end)

    it("timeouts, options and self, blaming the caller", function()
        raises_here("bad argument #1 to 'wait' (timeout must be nil or a number >= 0)",
                    function() c:barrier("/b"):wait(-1) end)
        raises_here("bad argument #1 to 'take' (timeout must be nil or a number >= 0)",
                    function() c:work_queue("/q"):take(0 / 0) end)
        raises_here("bad argument #3 to 'watch' (timeout must be nil or a number >= 0)",
                    function() c:watch("/w", print, { timeout = "1" }) end)
        raises_here("bad argument #2 to 'work_queue' (unknown option 'bogus' (id))",
                    function() c:work_queue("/q", { bogus = 1 }) end)
        raises_here("bad argument #3 to 'double_barrier' (opts must be a table, got number)",
                    function() c:double_barrier("/d", 2, 5) end)
        raises_here("'take' must be called on a work queue (use q:take(...))",
                    function() local q = c:work_queue("/q"); q.take({}, 1) end)
        raises_here("'wait' must be called on a barrier (use b:wait(...))",
                    function() local b = c:barrier("/b"); b.wait(5) end)
    end)
end)


describe("argument errors from any file of the library", function()
    -- Two frames named as files of a subdirectory, the outer one calling
    -- the inner one, which raises: both are passed over, the spec's line is
    -- blamed. One pair for every subdirectory util.SUBDIRS lists.
    local function chain(dir)
        local inner = assert(load("local util = ...; return function(x) "
                                  .. "util.argerror(1, 'inner', 'bad ' .. tostring(x)) end",
                                  "@/opt/lib/zkcoord/" .. dir .. "/inner.lua"))(util)
        local outer = assert(load("local inner = ...; return function(x) inner(x); return 1 end",
                                  "@/opt/lib/zkcoord/" .. dir .. "/outer.lua"))(inner)
        return outer
    end

    it("blame the caller through every subdirectory", function()
        for dir in pairs(util.SUBDIRS) do
            local outer = chain(dir)
            raises_here("bad argument #1 to 'inner' (bad 7)", function() return outer(7) end)
        end
    end)

    it("every subdirectory of lua/zkcoord is listed", function()
        local p = assert(io.popen("cd lua/zkcoord && find . -mindepth 1 -type d"))
        local found = 0
        for line in p:lines() do
            local dir = line:gsub("^%./", "")
            found = found + 1
            assert.is_true(util.SUBDIRS[dir], "lua/zkcoord/" .. dir .. " is not in util.SUBDIRS")
        end
        p:close()
        assert.is_true(found >= 6)
    end)

    it("a rule maker passed uncalled to a line blames the caller of enter #zk", function()
        local line = require "zkcoord.line"
        local c = zk.client {}
        local d = line.driver { marker = "slot-", rule = line.rules.fewer_than }
        local pos = c:line(zk.new_root("uncalled"), d)
        local ok, err = pcall(function() return pos:enter(5) end)
        zk.close_clients()
        assert.is_false(ok)
        assert.matches("^[^:]*util_spec%.lua:%d+: bad argument #1 to '[%w_.]*fewer_than'", tostring(err))
    end)
end)


describe("util.run_held", function()
    it("gives back whatever fn did, then returns fn's results or raises its error", function()
        local log = {}
        local function done(hold, ok) log[#log + 1] = hold .. " " .. tostring(ok) end
        -- every result, nils included; a give-back that returns nothing is no failure
        local function pack(...) return { n = select("#", ...), ... } end
        assert.same({ n = 3, 1, nil, 3 },
                    pack(util.run_held(done, "a", function(x) return x, nil, 3 end, 1)))
        assert.equal("a true", log[1])
        -- a give-back that fails is the answer: nil, err
        assert.same({ nil, "lost" }, { util.run_held(function() return nil, "lost" end, "b",
                                                      function() return "r" end) })
        -- fn's error comes back after the give-back, with its traceback
        local ok, err = pcall(util.run_held, done, "c", function() error("bad") end)
        assert.is_false(ok)
        assert.equal("c false", log[#log])
        assert.matches("bad", err)
        assert.matches("stack traceback", err)
        -- an error object other than a string comes back as it was
        local obj = {}
        ok, err = pcall(util.run_held, done, "d", function() error(obj) end)
        assert.is_false(ok)
        assert.equal(obj, err)
    end)

    it("lets fn yield to whoever resumes its caller", function()
        local co = coroutine.create(function()
            local me = coroutine.running()
            return util.run_held(function() return true end, "h", function()
                assert.equal(me, util.running())
                return coroutine.yield("out") .. "!"
            end)
        end)
        assert.same({ true, "out" }, { coroutine.resume(co) })
        assert.same({ true, "in!" }, { coroutine.resume(co, "in") })
    end)
end)

describe("util.deprecated", function()
    it("logs a warning through the client's logger once per process and old form", function()
        util.deprecated_reset()
        local logged = {}
        local client = { log = function(_, level, msg) logged[#logged + 1] = level .. " " .. msg end }
        local other = { log = function(_, level, msg)
            logged[#logged + 1] = "other " .. level .. " " .. msg
        end }
        assert.is_true(util.deprecated(client, "x:old", "x:new"))
        assert.is_false(util.deprecated(client, "x:old", "x:new"))
        -- once per process: another client is not told again
        assert.is_false(util.deprecated(other, "x:old", "x:new"))
        -- another old form is told once too, through the client that used it
        assert.is_true(util.deprecated(other, "y:old", "y:new"))
        assert.is_false(util.deprecated(client, "y:old", "y:new"))
        assert.same({ "warn x:old is deprecated and goes in the next release: use x:new",
                      "other warn y:old is deprecated and goes in the next release: use y:new" },
                    logged)
        util.deprecated_reset()
        assert.is_true(util.deprecated(client, "x:old", "x:new"))
        assert.equal(3, #logged)
    end)
end)
