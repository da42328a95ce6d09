-- kazoo's recipe tests (kazoo/tests/test_*.py), translated against a real
-- server where zkcoord has the recipe and its own specs do not already
-- cover the scenario: counter, barrier, double barrier, party (group),
-- locking queue (work_queue) and watchers (watch). Each test names the
-- kazoo test it follows; where zkcoord answers differently by design the
-- comment says so (every wait takes a bound; a refusal is nil, err or
-- false, never an exception).
local zk = require "helpers.zk"

describe("kazoo's recipe scenarios #zk #nosan", function()
    local root, c

    before_each(function()
        root = zk.new_root("kazoo")
        c = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    describe("test_counter.py", function()
        it("adds and subtracts (test_int_counter)", function()
            local ctr = c:counter("/ctr")
            assert.equal(0, ctr:get())
            assert.equal(2, ctr:add(2))
            assert.equal(3, ctr:add(1))
            assert.equal(0, ctr:add(-3))
            assert.equal(-1, ctr:add(-1))
            assert.equal(-1, ctr:get())
        end)

        it("counts in Curator's 32-bit form to both ends (test_int_curator_counter)", function()
            -- kazoo's support_curator=True is our format "int32"
            local ctr = c:counter("/ctr", { format = "int32" })
            assert.equal(0, ctr:get())
            assert.equal(3, (ctr:add(2) and ctr:add(1)))
            assert.equal(-1, (ctr:add(-3) and ctr:add(-1)))
            assert.equal(0, ctr:add(1))
            assert.equal(2147483647, ctr:add(2147483647))
            assert.equal(0, ctr:add(-2147483647))
            assert.equal(-2147483647, ctr:add(-2147483647))
            assert.equal("\128\0\0\1", (assert(c:get("/ctr"))))
        end)

        it("refuses what is not an integer (test_errors, test_float_counter)", function()
            -- kazoo has float counters (default=0.0); zkcoord's are integers
            -- only, in every format, so a fractional delta raises as kazoo's
            -- int counter does.
            local ctr = c:counter("/ctr")
            assert.has_error(function() ctr:add(2.1) end)
            assert.has_error(function() ctr:add("a") end)
            assert.has_error(function() c:counter("/ctr2", { format = "int32", initial = 0.5 }) end)
        end)

        it("each add answers its own result (test_pre_post_values)", function()
            -- kazoo keeps pre_value and post_value; add() returns the value
            -- after this add (unique to it), so the value before is it - delta.
            local ctr = c:counter("/ctr")
            assert.equal(2, ctr:add(2))
            assert.equal(-1, ctr:add(-3))
        end)
    end)

    describe("test_barrier.py", function()
        it("a barrier that does not exist lets wait through (test_barrier_not_exist)", function()
            assert.is_true(c:barrier("/some/path"):wait(5))
        end)

        it("wait holds while the barrier exists (test_barrier_exists)", function()
            local b = c:barrier("/some/path")
            assert.is_true(b:create())
            assert.same({ nil, "timeout" }, { b:wait(0) })   -- kazoo: False
            assert.is_true(b:remove())
            assert.is_true(b:wait(5))
        end)

        it("removing a barrier that is not there answers false (test_remove_nonexistent_barrier)",
           function()
            assert.is_false(c:barrier("/some/path"):remove())
        end)

        it("a round of one enters and leaves (test_basic_barrier)", function()
            -- kazoo's `participating` is our participants() listing us
            local db = c:double_barrier("/some/path", 1, { id = "one" })
            assert.same({}, assert(db:participants()))
            assert.is_true(db:enter(5))
            assert.same({ "one" }, assert(db:participants()))
            assert.is_true(db:leave(5))
            assert.same({}, assert(db:participants()))
        end)

        it("two enter together and leave together (test_two_barrier)", function()
            -- kazoo's two threads on one client are two coroutines here
            local events = {}
            for i = 1, 2 do
                local db = c:double_barrier("/some/path", 2, { id = "b" .. i })
                c:spawn(function()
                    assert.is_true(db:enter(10))
                    events[#events + 1] = "enter"
                    assert.is_true(db:leave(10))
                    events[#events + 1] = "leave"
                end)
            end
            assert.is_true(c:run(30))
            assert.same({ "enter", "enter", "leave", "leave" }, events)
            assert.same({}, assert(c:double_barrier("/some/path", 2):participants()))
        end)

        it("a parent that is ephemeral fails enter and leaves nothing "
           .. "(test_barrier_existing_parent_node)", function()
            -- kazoo swallows the error (participating stays False); enter
            -- answers it
            assert(c:create("/some", nil, { ephemeral = true }))
            local db = c:double_barrier("/some/path", 1)
            local ok, err = db:enter(5)
            assert.is_nil(ok)
            assert.equal("nochildrenforephemerals", err)
            assert.is_false(c:exists("/some/path"))
        end)
    end)

    describe("test_party.py", function()
        it("members come and go (test_party)", function()
            -- kazoo's Party(path, identifier) is a group member with that id
            local groups = {}
            for i = 0, 4 do
                groups[#groups + 1] = c:group("/party", "p" .. i, "p" .. i)
            end
            assert.same({}, assert(groups[1]:members()))
            local want = {}
            for _, g in ipairs(groups) do
                assert.is_true(g:join(5))
                want[g.id] = g.id
                assert.same(want, assert(g:members()))
            end
            for _, g in ipairs(groups) do
                g:leave()
                want[g.id] = nil
                assert.same(want, assert(g:members()))
            end
        end)

        it("a member whose node was deleted still leaves cleanly (test_party_vanishing_node)",
           function()
            -- kazoo's node stays gone; ours is created again (the group
            -- keeps a member present until leave()), and leave removes it
            local g = c:group("/party", "p1")
            assert.is_true(g:join(5))
            assert(zk.admin():delete(root .. "/party/p1"))
            assert.truthy(zk.wait_until(function()
                return c:exists("/party/p1") ~= false
            end, 10, c), "the member node was not created again")
            g:leave()
            assert.truthy(zk.wait_until(function()
                return next(assert(g:members())) == nil
            end, 10, c), "the member stayed")
        end)

        it("a persistent node at the member's name is not taken over (test_party_reuse_node)",
           function()
            -- kazoo reuses the node it finds; we refuse a persistent one,
            -- which would never go with our session
            assert(c:create("/party/p1", nil, { parents = true }))
            assert.same({ nil, "nodeexists" }, { c:group("/party", "p1"):join(5) })
        end)
    end)

    describe("test_queue.py (LockingQueue)", function()
        it("an empty queue has nothing to take (test_empty_queue)", function()
            local q = c:work_queue("/q")
            assert.equal(0, q:len())
            assert.same({ nil, "timeout" }, { q:take(0) })
            assert.equal(0, q:len())
        end)

        it("takes in order, each held until acked (test_queue, test_consume, test_holds_lock)",
           function()
            -- kazoo holds one item per queue object and get() answers it
            -- again until consume(); a zkcoord consumer may hold several:
            -- each take() is the next item, acked on its own.
            local q = c:work_queue("/q")
            for _, d in ipairs { "one", "two", "three" } do assert(q:put(d)) end
            assert.equal(3, q:len())
            for _, d in ipairs { "one", "two", "three" } do
                local item = assert(q:take(1))
                assert.equal(d, item.data)
                assert.is_true(item:held())
                assert.is_true(item:ack())
                assert.is_false(item:held())
            end
            assert.equal(0, q:len())
        end)

        it("a released item is taken again (test_release)", function()
            local q = c:work_queue("/q")
            assert(q:put("one"))
            local item = assert(q:take(1))
            assert.is_true(item:release())
            assert.is_false(item:held())
            local again = assert(q:take(1))
            assert.equal("one", again.data)
            assert.is_true(again:ack())
            assert.equal(0, q:len())
        end)

        it("takes by priority, then arrival (test_priority)", function()
            local q = c:work_queue("/q")
            assert(q:put("four", { priority = 101 }))
            assert(q:put("one", { priority = 0 }))
            assert(q:put("two", { priority = 0 }))
            assert(q:put("three", { priority = 10 }))
            for _, d in ipairs { "one", "two", "three", "four" } do
                local item = assert(q:take(1))
                assert.equal(d, item.data)
                assert(item:ack())
            end
        end)

        it("one item goes to one of three concurrent takers (test_concurrent_execution)",
           function()
            local q = c:work_queue("/q")
            assert(q:put("one"))
            local got = {}
            for i = 1, 3 do
                c:spawn(function()
                    local item, err = c:work_queue("/q", { id = "taker" .. i }):take(0)
                    got[#got + 1] = item and item.data or err
                end)
            end
            assert.is_true(c:run(30))
            table.sort(got)
            assert.same({ "one", "timeout", "timeout" }, got)
        end)

        it("refuses bad items and priorities (test_queue_validation)", function()
            local q = c:work_queue("/q")
            assert.has_error(function() q:put({}) end)
            assert.has_error(function() q:put("one", { priority = "100" }) end)
            assert.has_error(function() q:put("one", { priority = 10.5 }) end)
            assert.has_error(function() q:put("one", { priority = -100 }) end)
            assert.has_error(function() q:put("one", { priority = 100000 }) end)
        end)
    end)

    describe("test_watchers.py", function()
        it("a data watch on a missing node sees it created (test_data_watcher, "
           .. "test_no_such_node)", function()
            local seen = {}
            assert(c:watch("/w", function(d, stat) seen[#seen + 1] = { d, stat } end))
            assert.same({ { nil, nil } }, seen)
            assert(c:create("/w", "fred"))
            assert.truthy(zk.wait_until(function() return #seen == 2 end, 10, c))
            assert.equal("fred", seen[2][1])
        end)

        it("sees every delete and create in turn (test_watcher_repeat_delete)", function()
            local seen = {}
            assert(c:watch("/w", function(d) seen[#seen + 1] = d or "none" end))
            local want = { "none" }
            for _, step in ipairs { "create", "delete", "create" } do
                if step == "create" then
                    assert(c:create("/w", "blah"))
                    want[#want + 1] = "blah"
                else
                    assert(c:delete("/w"))
                    want[#want + 1] = "none"
                end
                assert.truthy(zk.wait_until(function() return #seen == #want end, 10, c))
                assert.same(want, seen)
            end
        end)

        it("a data watch goes on across a session expiry (test_datawatch_across_session_expire)",
           function()
            assert(c:create("/w", ""))
            local last
            assert(c:watch("/w", function(d) last = d end))
            assert.equal("", last)
            assert.truthy(zk.expire_session(c))
            -- kazoo's client.retry(client.set, ...): a set is idempotent
            assert(c:retry(require("zkcoord").now() + 20, function() return c:set("/w", "fred") end))
            assert.truthy(zk.wait_until(function() return last == "fred" end, 25, c))
        end)

        it("a cancelled watch is called no more (test_func_stops)", function()
            -- kazoo's function returns False to stop; ours cancels
            local seen, w = {}, nil
            w = assert(c:watch("/w", function(d)
                seen[#seen + 1] = d or "none"
                if d == "fred" then w:cancel() end
            end))
            assert(c:create("/w", "fred"))
            assert.truthy(zk.wait_until(function() return #seen == 2 end, 10, c))
            assert(c:set("/w", "asdfasdf"))
            -- an event for this session comes before the reply of a read that
            -- sees the change: after this read, none can be on its way
            assert.equal("asdfasdf", (assert(c:get("/w"))))
            c:dispatch(0)
            assert.same({ "none", "fred" }, seen)
        end)

        it("a children watch sees members come (test_child_watcher)", function()
            assert(c:ensure_path("/w"))
            local last
            assert(c:watch("/w", function(names) last = names end, { kind = "children" }))
            assert.same({}, last)
            assert(c:create("/w/smith"))
            assert.truthy(zk.wait_until(function() return #last == 1 end, 10, c))
            assert.same({ "smith" }, last)
            assert(c:create("/w/george"))
            assert.truthy(zk.wait_until(function() return #last == 2 end, 10, c))
            assert.same({ "george", "smith" }, last)
        end)
    end)
end)
