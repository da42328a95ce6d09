-- Scoped holds against a real server: lock:run, the rwlock sides' run,
-- sem:run, ml:run and q:process. Each holds while fn runs, gives back
-- whatever fn did, returns fn's results (or nil, err), and raises fn's
-- error again after the give-back, with its traceback.
local zk = require "helpers.zk"

describe("run #zk", function()
    local root, c, other

    before_each(function()
        root = zk.new_root("run")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    -- Calls f, which must raise; returns the error message.
    local function raised(f)
        local ok, err = pcall(f)
        assert.is_false(ok)
        return tostring(err)
    end

    it("lock:run holds while fn runs, returns its results, releases after", function()
        local l = c:lock("/l")
        local a, b = l:run(function(x, y)
            assert.is_true(l:held())
            assert.is_number(l:token())
            -- someone else cannot have it meanwhile
            assert.same({ nil, "timeout" }, { other:lock("/l"):acquire(0) })
            return x + y, "two"
        end, 5, 1, 2)
        assert.equal(3, a)
        assert.equal("two", b)
        assert.is_false(l:held())
        local ol = other:lock("/l")
        assert.is_true(ol:acquire(5))
        -- held by another: run gives up at the timeout, fn never runs
        local called = false
        assert.same({ nil, "timeout" }, { l:run(function() called = true end, 0) })
        assert.is_false(called)
        ol:release()
    end)

    it("lock:run releases when fn raises, and raises fn's error with its traceback", function()
        local l = c:lock("/l")
        local msg = raised(function()
            l:run(function() error("boom in fn") end, 5)
        end)
        assert.truthy(msg:find("boom in fn", 1, true), msg)
        assert.truthy(msg:find("stack traceback", 1, true), msg)
        assert.is_false(l:held())
        assert.is_true(other:lock("/l"):acquire(5))
        -- an error object other than a string comes back as it was
        local obj = {}
        local ok, err = pcall(function()
            c:lock("/m"):run(function() error(obj) end)
        end)
        assert.is_false(ok)
        assert.equal(obj, err)
    end)

    it("lock:run answers lost when the hold went while fn ran", function()
        local l = c:lock("/l")
        l:on_lost(function() end)     -- watch the node
        local res = { l:run(function()
            assert(other:delete(l:node()))
            assert.truthy(zk.wait_until(function() return not l:held() end, 5, c))
            return "done"
        end, 5) }
        assert.same({ nil, "lost" }, res)
    end)

    it("lock:run's fn may wait, yielding to other spawned coroutines", function()
        -- fn waits for an event only the other coroutine sets: a wait that
        -- could not yield would block the thread until its timeout.
        local l = c:lock("/l")
        local ev = c:waiter():event()
        local inside, woken = false, nil
        c:spawn(function()
            assert.equal("ok", l:run(function()
                inside = true
                woken = ev:wait(5)
                return "ok"
            end, 5))
        end)
        c:spawn(function()
            while not inside do c:waiter():sleep(0.01) end
            ev:set()
        end)
        assert.is_true(c:run(10))
        assert.is_true(woken)
        assert.is_false(l:held())
    end)

    it("runs on both sides of a rwlock", function()
        local rw = c:rwlock("/rw")
        assert.equal("r", rw:read_lock():run(function()
            assert.is_true(rw:read_lock():held())
            local orl = other:rwlock("/rw"):read_lock()
            assert.is_true(orl:acquire(5))
            assert(orl:release())
            return "r"
        end, 5))
        local msg = raised(function()
            rw:write_lock():run(function()
                assert.same({ nil, "timeout" }, { other:rwlock("/rw"):read_lock():acquire(0) })
                error("writer failed")
            end, 5)
        end)
        assert.truthy(msg:find("writer failed", 1, true))
        assert.is_false(rw:write_lock():held())
        -- a refused upgrade blames the caller of run, not the library
        assert.is_true(rw:read_lock():acquire(5))
        local umsg = raised(function() rw:write_lock():run(function() end, 1) end)
        assert.matches("^spec/run_spec.lua:%d+: cannot upgrade", umsg)
        assert(rw:read_lock():release())
        assert.is_true(other:rwlock("/rw"):write_lock():acquire(5))
    end)

    it("sem:run passes the lease, gives it back whatever fn did", function()
        local sem = c:semaphore("/s", 1)
        assert.equal("x", sem:run(function(lease, arg)
            assert.is_true(lease:held())
            assert.equal(1, sem:leases())
            return arg
        end, 5, "x"))
        assert.equal(0, sem:leases())
        raised(function() sem:run(function() error("oops") end, 5) end)
        assert.equal(0, sem:leases())
        local lease = assert(other:semaphore("/s", 1):acquire(5))
        assert.same({ nil, "timeout" }, { sem:run(function() end, 0) })
        lease:release()
    end)

    it("ml:run holds every lock while fn runs", function()
        local ml = c:multi_lock({ "/a", "/b" })
        assert.is_true(ml:run(function()
            assert.same({ nil, "timeout" }, { other:lock("/b"):acquire(0) })
            return ml:held()
        end, 5))
        assert.is_false(ml:held())
        raised(function() ml:run(function() error("x") end, 5) end)
        assert.is_true(other:multi_lock({ "/a", "/b" }):acquire(5))
    end)

    it("q:process acks when fn returns, gives the item back when it raises", function()
        local q = c:work_queue("/q")
        assert(q:put("one"))
        assert(q:put("two"))
        assert.equal("ONE", q:process(function(data, item)
            assert.is_true(item:held())
            return data:upper()
        end, 5))
        assert.equal(1, q:len())
        local msg = raised(function()
            q:process(function(data) error("cannot " .. data) end, 5)
        end)
        assert.truthy(msg:find("cannot two", 1, true))
        -- given back: the next take has it again
        assert.equal(1, q:len())
        local item = assert(other:work_queue("/q"):take(5))
        assert.equal("two", item.data)
        assert.is_true(item:ack())
        assert.same({ nil, "timeout" }, { q:process(function() end, 0) })
    end)

    it("raises on bad arguments", function()
        assert.has_error(function() c:lock("/l"):run("nope") end,
                         "bad argument #1 to 'run' (function expected, got string)")
        assert.has_error(function() c:lock("/l"):run(function() end, -1) end,
                         "bad argument #2 to 'run' (timeout must be nil or a number >= 0)")
        assert.has_error(function() c:semaphore("/s", 1):run(nil) end,
                         "bad argument #1 to 'run' (function expected, got nil)")
        assert.has_error(function() c:work_queue("/q"):process(1) end,
                         "bad argument #1 to 'process' (function expected, got number)")
        assert.has_error(function() c:lock("/l").run({}, function() end) end)
    end)
end)
