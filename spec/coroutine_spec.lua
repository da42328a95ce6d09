-- Spawned coroutines in plain LuaJIT: waits inside them let the others run.
local zk = require "helpers.zk"

describe("spawned coroutines #zk", function()
    local root, c

    before_each(function()
        root = zk.new_root("co")
        c = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("run many requests concurrently on one client", function()
        c:create("/p")
        local done = 0
        local t0 = zk.proc.now()
        for i = 1, 50 do
            c:spawn(function()
                assert(c:create("/p/n" .. i, tostring(i)))
                assert.equal(tostring(i), (c:get("/p/n" .. i)))
                done = done + 1
            end)
        end
        assert.is_true(c:run(10))
        assert.equal(50, done)
        assert.equal(50, #c:children("/p"))
        -- measured at load 2: 0.34 s
        assert.is_true(zk.proc.now() - t0 < 5)
    end)

    it("are separate lock owners that take turns", function()
        local lock = c:lock("/l")
        local holders, max_holders, grants = 0, 0, 0
        for _ = 1, 8 do
            c:spawn(function()
                for _ = 1, 3 do
                    assert(lock:acquire(10))
                    holders = holders + 1
                    max_holders = math.max(max_holders, holders)
                    grants = grants + 1
                    c:waiter():sleep(0.002)
                    holders = holders - 1
                    assert(lock:release())
                end
            end)
        end
        assert.is_true(c:run(30))
        assert.equal(24, grants)
        assert.equal(1, max_holders)
        assert.equal(0, #c:children("/l"))
    end)

    it("give every add a distinct value", function()
        local ctr = c:counter("/ctr")
        local seen, n = {}, 0
        for _ = 1, 16 do
            c:spawn(function()
                for _ = 1, 5 do
                    local v = assert(ctr:add(1))
                    assert.is_nil(seen[v])
                    seen[v] = true
                    n = n + 1
                end
            end)
        end
        assert.is_true(c:run(30))
        assert.equal(80, n)
        assert.equal(80, ctr:get())
        -- one process: concurrent adds share writes, so no write loses a race
        assert.equal(0, ctr:stats().cas_failures)
        assert.is_true(ctr:stats().cas_attempts < 80)
    end)

    it("time out in run() and report errors of a failing coroutine", function()
        local logged = {}
        local lc = zk.client { chroot = root, logger = function(_, msg) logged[#logged + 1] = msg end }
        lc:spawn(function() lc:waiter():sleep(5) end)
        lc:spawn(function() error("boom") end)
        assert.is_false(lc:run(0.3))
        assert.matches("boom", table.concat(logged, "\n"))
        assert.has_error(function() lc:spawn(42) end)
    end)
    -- A wait whose event is set in the same pass of run() in which its
    -- deadline passes used to be resumed twice: its next wait returned at
    -- once, as a timeout.
    it("resume a coroutine once when its event is set as its wait times out", function()
        local proc = require "helpers.proc"
        local w = c:waiter()
        local ev = w:event()
        local second_took
        c:spawn(function()
            ev:wait(0.05)
            local t = proc.now()
            w:event():wait(0.2)
            second_took = proc.now() - t
        end)
        c:spawn(function()
            local t = proc.now() + 0.06
            while proc.now() < t do end     -- past the other's deadline, then set
            ev:set()
        end)
        assert.is_true(c:run(5))
        assert.is_true(second_took >= 0.19, "the next wait ended after " .. second_took .. " s")
    end)
end)
