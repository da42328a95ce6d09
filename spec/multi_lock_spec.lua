-- The multi-lock against a real server: all or none, and two multi-locks
-- over the same paths in opposite orders never deadlock.
local zk = require "helpers.zk"

describe("multi_lock #zk", function()
    local root, c, other

    before_each(function()
        root = zk.new_root("mlock")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("takes all or none", function()
        local blocker = other:lock("/b")
        assert.is_true(blocker:acquire(5))
        local ml = c:multi_lock({ "/b", "/a" })
        assert.same({ nil, "timeout" }, { ml:acquire(0.3) })
        assert.is_false(ml:held())
        c:sync("/a")
        assert.same({}, c:children("/a"))     -- /a was taken, then given back
        assert.same({ nil, "timeout" }, { ml:acquire(0) })
        blocker:release()
        assert.is_true(ml:acquire(5))
        assert.is_true(ml:held())
        assert.same({ nil, "timeout" }, { other:lock("/a"):acquire(0) })
        assert.is_true(ml:release())
        assert.is_false(ml:held())
        assert.same({ nil, "notheld" }, { ml:release() })
        assert.is_true(other:lock("/a"):acquire(1))
    end)

    it("a lock lost while the others are taken is taken again: true means all are held", function()
        -- Seen in a chaos run: /a taken, the session expires while /b is
        -- waited for, /b taken in the new session: acquire said true with
        -- /a lost (another process held it at that moment).
        local blocker = other:lock("/b")
        assert.is_true(blocker:acquire(5))
        local ml = c:multi_lock({ "/a", "/b" })
        local res, held, done, released = nil, nil, false, nil
        c:spawn(function()    -- the owner: held() and release() are its
            res = { ml:acquire(20) }
            held = ml:held()
            while not done do c:waiter():sleep(0.02) end
            released = ml:release()
        end)
        assert.truthy(zk.wait_until(function()
            c:run(0.02)
            local kids = other:children("/b")
            return kids and #kids == 2
        end, 10), "the multi-lock did not reach /b")
        assert.truthy(zk.expire_session(c))
        blocker:release()
        assert.truthy(zk.wait_until(function() c:run(0.02) return res ~= nil end, 20))
        assert.same({ true }, res)
        assert.is_true(held)
        -- both nodes on the server are of the client's session now
        local sid = c:session_id()
        for _, p in ipairs { "/a", "/b" } do
            local kids = assert(other:children(p))
            assert.equal(1, #kids, p)
            local st = assert(other:exists(p .. "/" .. kids[1]))
            assert.equal(sid, st.ephemeral_owner, p .. " is not held by the live session")
        end
        -- and a third party cannot take /a
        assert.same({ nil, "timeout" }, { other:lock("/a"):acquire(0) })
        done = true
        assert.truthy(zk.wait_until(function() c:run(0.02) return released ~= nil end, 5))
        assert.is_true(released)
    end)

    it("two multi-locks over the same paths in opposite orders never deadlock", function()
        local inside, overlap, done, failures = 0, 0, 0, {}
        for _, paths in ipairs { { "/x", "/y", "/z" }, { "/z", "/y", "/x" } } do
            for _ = 1, 2 do
                c:spawn(function()
                    local ml = c:multi_lock(paths)   -- each coroutine its own owner
                    for _ = 1, 10 do
                        local ok, err = ml:acquire(5)
                        if not ok then failures[#failures + 1] = err break end
                        inside = inside + 1
                        if inside > 1 then overlap = overlap + 1 end
                        c:waiter():sleep(0.005)
                        inside = inside - 1
                        assert(ml:release())
                    end
                    done = done + 1
                end)
            end
        end
        assert.is_true(c:run(60))
        assert.same({}, failures)
        assert.equal(4, done)
        assert.equal(0, overlap)
    end)

    it("reports a lost lock with its path", function()
        local ml = c:multi_lock({ "/l1", "/l2" })
        local lost = {}
        ml:on_lost(function(reason, path) lost[#lost + 1] = path .. ":" .. reason end)
        assert.is_true(ml:acquire(5))
        local node = assert(c:children("/l2"))[1]
        assert.truthy(other:delete("/l2/" .. node))
        assert.truthy(zk.wait_until(function() return #lost > 0 end, 5, c))
        assert.same({ "/l2:deleted" }, lost)
        assert.is_false(ml:held())
        assert.same({ nil, "lost" }, { ml:release() })
    end)

    it("token() is the highest czxid of its nodes, with each lock's by path", function()
        local ml = c:multi_lock({ "/l2", "/l1" })
        assert.same({ nil, "notheld" }, { ml:token() })
        assert.is_true(ml:acquire(5))
        local top, by_path = ml:token()
        local t1 = assert(other:exists("/l1/" .. assert(other:children("/l1"))[1])).czxid
        local t2 = assert(other:exists("/l2/" .. assert(other:children("/l2"))[1])).czxid
        assert.same({ ["/l1"] = t1, ["/l2"] = t2 }, by_path)
        assert.equal(math.max(t1, t2), top)
        -- another coroutine is another owner: it holds nothing
        local co = coroutine.wrap(function() return ml:token() end)
        assert.same({ nil, "notheld" }, { co() })
        assert.is_true(ml:release())
        assert.same({ nil, "notheld" }, { ml:token() })
        -- a later grant has a larger token; one lock lost: no token
        assert.is_true(ml:acquire(5))
        assert.is_true(assert(ml:token()) > top)
        assert.truthy(other:delete("/l1/" .. assert(other:children("/l1"))[1]))
        assert.truthy(zk.wait_until(function() return not ml:held() end, 5, c))
        assert.same({ nil, "notheld" }, { ml:token() })
        assert.same({ nil, "lost" }, { ml:release() })
    end)

    it("raises on bad arguments", function()
        assert.has_error(function() c:multi_lock({}) end)
        assert.has_error(function() c:multi_lock("/a") end)
        assert.has_error(function() c:multi_lock({ "/a", "/a" }) end)
        assert.has_error(function() c:multi_lock({ "/a", "rel" }) end)
        assert.has_error(function() c:multi_lock({ "/a", nil, "/b" }) end)
        assert.has_error(function() c:multi_lock({ "/a" }):acquire(-1) end)
    end)
end)
