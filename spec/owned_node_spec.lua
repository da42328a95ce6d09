-- zkcoord.owned_node against a real server: ours only as created in the
-- current session, told when it goes, deleted only while provably ours
-- (also when the delete is finished after a connection loss).
local zk = require "helpers.zk"
local tcpproxy = require "helpers.tcpproxy"
local owned_node = require "zkcoord.owned_node"

describe("owned_node #zk", function()
    local root, c, other

    before_each(function()
        root = zk.new_root("owned")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("is created and held; another's node at the path is not ours", function()
        local n = owned_node.new(c, "/o/x", { data = "a" })
        assert.is_true(n:create())
        assert.is_true(n:held())
        assert.is_true(n:create())                    -- held: nothing to do
        assert.equal(c:session_id(), (other:exists("/o/x")).ephemeral_owner)
        assert.is_true(n:delete())
        assert.is_false(n:held())
        assert.is_false(other:exists("/o/x"))
        assert(other:create("/o/x", "b", { ephemeral = true }))
        local ok, stat = n:create()
        assert.is_false(ok)
        assert.equal(other:session_id(), stat.ephemeral_owner)
        assert.is_false(n:held())
        assert.is_true(n:delete())                    -- not ours: left alone
        assert.equal("b", (other:get("/o/x")))
    end)

    it("tells on_gone when someone deletes it or the session ends", function()
        local gone = {}
        local n = owned_node.new(c, "/o/y", { on_gone = function(reason) gone[#gone + 1] = reason end })
        assert.is_true(n:create())
        assert(other:delete("/o/y"))
        assert.truthy(zk.wait_until(function() return #gone == 1 end, 5, c))
        assert.same({ "deleted" }, gone)
        assert.is_false(n:held())
        assert.is_true(n:create())
        assert.truthy(zk.expire_session(c))
        assert.truthy(zk.wait_until(function() return #gone == 2 end, 5, c))
        -- once: "sessionexpired", or "deleted" when we won the session back
        -- for a moment and saw the close delete the node (expire_session)
        assert.is_true(gone[2] == "sessionexpired" or gone[2] == "deleted", gone[2])
        c:dispatch(0.1)
        assert.equal(2, #gone)
        assert.is_false(n:held())
    end)

    it("adopts our session's node; deletes it with more ops, or soon, only while ours", function()
        local deadline = function() return require("zkcoord.core").now() + 5 end
        local gone = {}
        local n = owned_node.new(c, "/o/a", { on_gone = function(r) gone[#gone + 1] = r end })
        assert(other:create("/o/a", "theirs", { ephemeral = true, parents = true }))
        assert.is_false(n:adopt(assert(other:exists("/o/a"))))    -- another session's
        assert.is_false(n:held())
        assert(other:delete("/o/a"))
        local _, st = assert(c:create("/o/a", "ours", { ephemeral = true }))
        assert.is_true(n:adopt(st))
        assert.is_true(n:held())
        -- with more ops, in one multi; our own delete is no loss
        assert(c:create("/o/item", "i"))
        assert.is_true(n:delete_with({ { op = "delete", path = "/o/item" } }, deadline()))
        assert.is_false(other:exists("/o/a"))
        assert.is_false(other:exists("/o/item"))
        assert.is_false(n:held())
        -- deleted by another and made again by a third session: not ours,
        -- nothing written
        _, st = assert(c:create("/o/a", "ours", { ephemeral = true }))
        assert.is_true(n:adopt(st))
        assert(c:create("/o/item", "i"))
        assert(zk.admin():delete(root .. "/o/a"))
        assert(other:create("/o/a", "theirs", { ephemeral = true }))
        assert.is_false(n:delete_with({ { op = "delete", path = "/o/item" } }, deadline()))
        assert.equal(other:session_id(), assert(c:exists("/o/a")).ephemeral_owner)
        assert.truthy(c:exists("/o/item"))
        c:dispatch(0.1)
        assert.same({ "deleted" }, gone)
        -- soon: a node a create of ours made that we never took, deleted
        -- without waiting; another session's left alone
        assert(c:create("/o/s", nil, { ephemeral = true }))
        owned_node.new(c, "/o/s"):delete_soon(c:serial(), c:session_id())
        owned_node.new(c, "/o/a"):delete_soon(c:serial(), c:session_id())
        assert.truthy(zk.wait_until(function() return other:exists("/o/s") == false end, 5, c))
        assert(c:sync("/o/a"))
        assert.equal(other:session_id(), assert(c:exists("/o/a")).ephemeral_owner)
    end)

    it("a delete cut off by a connection loss finishes once back, on our node only", function()
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)"))))
        local pc = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 6 }
        local function cut_around(fn)
            pc.exists = function(cl, path, ...)
                pc.exists = nil
                assert(proxy:delay(2))        -- the look is held in the proxy...
                local f = cl:send("exists", path, ...)
                if fn then fn() end
                assert(proxy:cut())           -- ...and lost with the connection
                assert(proxy:pass())
                return f:wait()
            end
        end
        -- our node: deleted once connected again, in the same session
        local n = owned_node.new(pc, "/o/z")
        assert.is_true(n:create())
        local sid = pc:session_id()
        cut_around()
        assert.same({ nil, "connectionloss" }, { n:delete() })
        assert.truthy(zk.wait_until(function()
            return pc:state() == "connected" and other:exists("/o/z") == false
        end, 5, pc))
        assert.equal(sid, pc:session_id())
        -- replaced by another session's node while we were cut off: left alone
        assert.is_true(n:create())
        cut_around(function()
            assert(other:delete("/o/z"))
            assert(other:create("/o/z", "theirs", { ephemeral = true }))
        end)
        assert.same({ nil, "connectionloss" }, { n:delete() })
        assert.truthy(zk.wait_until(function() return pc:state() == "connected" end, 5, pc))
        assert(pc:sync("/o/z"))                   -- after whatever we sent once back
        pc:dispatch(0.1)
        local st = other:exists("/o/z")
        assert.truthy(st, "another session's node was deleted")
        assert.equal(other:session_id(), st.ephemeral_owner)
        pc:close()
        proxy:stop()
    end)
end)
