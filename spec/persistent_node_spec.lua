-- The persistent node against a real server: present through deletes,
-- session expiry and another session's node; latest data kept; sequential.
local zk = require "helpers.zk"
local proc = require "helpers.proc"

describe("persistent_node #zk", function()
    local root, c, other

    before_each(function()
        root = zk.new_root("pnode")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    local function present(client, path, data)
        local d = client:get(path)
        return d ~= nil and (data == nil or d == data)
    end

    it("is created, keeps its latest data, and close() deletes it", function()
        local n = c:persistent_node("/svc/a", "v1")
        assert.is_true(n:wait(5))
        assert.equal("/svc/a", n:path())
        local stat = assert(other:exists("/svc/a"))
        assert.equal(c:session_id(), stat.ephemeral_owner)
        assert.truthy(n:set("v2"))
        assert.equal("v2", (other:get("/svc/a")))
        assert.is_true(n:close())
        assert.is_true(n:close())
        assert.is_false(other:exists("/svc/a"))
        assert.is_nil(n:path())
    end)

    it("comes back at once when someone deletes it", function()
        local n = c:persistent_node("/svc/b", "x")
        assert.is_true(n:wait(5))
        assert.truthy(other:delete("/svc/b"))
        local t0 = proc.now()
        assert.truthy(zk.wait_until(function() return present(other, "/svc/b", "x") end, 5, c))
        -- measured at load 2: 0.03 s
        assert.is_true(proc.now() - t0 < 1, "took " .. (proc.now() - t0))
        n:close()
    end)

    it("comes back with its latest data within a second of a session expiry", function()
        local n = c:persistent_node("/svc/e", "old")
        assert.is_true(n:wait(5))
        n:set("new")
        local sid = c:session_id()
        assert.truthy(zk.expire_session(c))
        assert.truthy(zk.wait_until(function()
            return c:state() == "connected" and c:session_id() ~= sid
        end, 10, c))
        local t0 = proc.now()
        assert.truthy(zk.wait_until(function()
            local st = other:exists("/svc/e")
            return st and st.ephemeral_owner == c:session_id()
        end, 5, c))
        -- measured at load 2: 0.001 s
        assert.is_true(proc.now() - t0 < 1, "took " .. (proc.now() - t0))
        assert.equal("new", (other:get("/svc/e")))
        assert.is_true(n:wait(1))
        n:close()
    end)

    -- A "connected" that came while the node was being made was dropped
    -- (one create at a time), and the create, made in the session that
    -- then ended, failed: nothing tried again while the new session lived,
    -- so the node stayed missing (a group's member, a service's instance
    -- too). The create is made when another session's node at the path
    -- goes; our watch for the node's creation fires inside that create
    -- (callbacks run while a request waits), ends our session there and
    -- waits for the next one: no timing involved.
    it("is made in the new session when its session ends while it is being made", function()
        assert(other:create("/svc/twice", "theirs", { ephemeral = true, parents = true }))
        local n = c:persistent_node("/svc/twice", "ours")    -- watches the other's node
        assert.is_nil(n:path())
        local sid1, fired = c:session_id(), false
        assert(other:delete("/svc/twice"))
        -- sent before c hears of the delete (and makes its node): fires on that create
        c:send("exists", "/svc/twice", function(ev)
            if ev.type == "created" and not fired then
                fired = true
                assert(zk.expire_session(c))
                zk.wait_until(function() return c:state() == "connected" end, 10, c)
            end
        end)
        assert.truthy(zk.wait_until(function()
            return fired and c:state() == "connected" and c:session_id() ~= sid1
        end, 20, c))
        local sid2 = c:session_id()
        -- within a session timeout of the new session (a session expiry
        -- above: 0.001 s at load 2)
        assert.truthy(zk.wait_until(function()
            local st = other:exists("/svc/twice")
            return st and st.ephemeral_owner == sid2
        end, c:session_timeout(), c), "the node was not made in the new session")
        assert.equal("ours", (other:get("/svc/twice")))
        n:close()
    end)

    -- A set whose reply is lost may or may not have been applied, and the
    -- node stays in the same session: it used to keep the older data until
    -- the session ended (only a re-creation wrote the latest), so a service
    -- registration's update could stay unseen for good.
    it("a set that failed on a connection loss is written once connected again", function()
        local tcpproxy = require "helpers.tcpproxy"
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)"))))
        local pc = zk.client { servers = proxy.hosts, session_timeout = 4, chroot = root }
        local n = pc:persistent_node("/svc/s", "v1")
        assert.is_true(n:wait(5))
        local sid = pc:session_id()
        proxy:blackhole()
        local stat, err = n:set("v2")
        assert.is_nil(stat)
        assert.truthy(require("zkcoord.errors").unknown_outcome[err], err)
        assert.equal("v1", (other:get("/svc/s")))   -- the black hole took the request
        proxy:pass()
        assert.truthy(zk.wait_until(function() return pc:state() == "connected" end, 8, pc))
        assert.equal(sid, pc:session_id())
        -- within a session timeout of the reconnect
        assert.truthy(zk.wait_until(function() return present(other, "/svc/s", "v2") end, 4, pc),
                      "the node still has " .. tostring(other:get("/svc/s")))
        n:close()
        pc:close()
        proxy:stop()
    end)

    it("waits for another session's node at its path, then takes over", function()
        assert(other:create("/svc/c", "theirs", { ephemeral = true, parents = true }))
        local n = c:persistent_node("/svc/c", "ours")
        assert.same({ nil, "timeout" }, { n:wait(0.3) })
        assert.equal("theirs", (c:get("/svc/c")))
        other:close()
        assert.is_true(n:wait(5))
        assert.equal("ours", (c:get("/svc/c")))
        assert.equal(c:session_id(), (c:exists("/svc/c")).ephemeral_owner)
        n:close()
    end)

    -- Issue 33: a persistent node at an ephemeral one's path never goes by
    -- itself: a clear answer at once, not a timeout; ours once it is deleted.
    it("says nodeexists at once when a persistent node holds its path", function()
        assert(other:create("/svc/taken", "theirs", { parents = true }))
        local n = c:persistent_node("/svc/taken", "ours")
        local t0 = proc.now()
        assert.same({ nil, "nodeexists" }, { n:wait(5) })
        assert.is_true(proc.now() - t0 < 1, "took " .. (proc.now() - t0))
        assert.is_nil(n:path())
        n:close()
        assert.equal("theirs", (other:get("/svc/taken")))
        -- deleted: ours is made
        local m = c:persistent_node("/svc/taken", "ours")
        assert(other:delete("/svc/taken"))
        assert.is_true(m:wait(5))
        assert.equal(c:session_id(), (other:exists("/svc/taken")).ephemeral_owner)
        m:close()
    end)

    -- Issue 28: close() deletes only our own node, never another session's
    -- node that took the path while we were cut off.
    it("close() leaves another session's node at its path alone", function()
        local n = c:persistent_node("/svc/own", "ours")
        assert.is_true(n:wait(5))
        assert(other:delete("/svc/own"))
        assert(other:create("/svc/own", "theirs", { ephemeral = true }))
        n:close()      -- at once: the delete event may not have reached us yet
        other:sync("/svc/own")
        local st = other:exists("/svc/own")
        assert.truthy(st, "the other session's node was deleted")
        assert.equal(other:session_id(), st.ephemeral_owner)
    end)

    it("a persistent one adopts an existing node and outlives the client", function()
        assert(other:create("/svc/p", "before", { parents = true }))
        local n = c:persistent_node("/svc/p", "mine", { ephemeral = false })
        assert.is_true(n:wait(5))
        assert.equal("mine", (other:get("/svc/p")))
        assert.is_nil((other:exists("/svc/p")).ephemeral_owner)
        c:close()
        assert.equal("mine", (other:get("/svc/p")))
    end)

    it("sequential: a protected sequential node, a new one after a delete", function()
        local n = c:persistent_node("/svc/seq/member-", "m", { sequential = true })
        assert.is_true(n:wait(5))
        local first = n:path()
        assert.matches("^/svc/seq/_c_[%x%-]+%-member%-%d+$", first)
        assert.truthy(other:delete(first))
        assert.truthy(zk.wait_until(function()
            return n:path() ~= nil and n:path() ~= first
        end, 5, c))
        assert.equal("m", (other:get(n:path())))
        assert.equal(1, #other:children("/svc/seq"))
        n:close()
        c:sync("/svc/seq")
        assert.same({}, other:children("/svc/seq"))
    end)

    it("raises on bad arguments", function()
        assert.has_error(function() c:persistent_node("rel", "x") end)
        assert.has_error(function() c:persistent_node("/", "x") end)
        assert.has_error(function() c:persistent_node("/x", 5) end)
        assert.has_error(function() c:persistent_node("/x", "x", { bogus = true }) end)
        assert.has_error(function() c:persistent_node("/x", "x", { ephemeral = "no" }) end)
        local n = c:persistent_node("/x", "x")
        assert.has_error(function() n:set(5) end)
        assert.has_error(function() n:wait(-1) end)
        assert.has_error(function() n.path({}) end)
        n:close()
    end)
end)
