-- Paths made and removed whole, against a real server: client:ensure_path
-- (idempotent, persistent or container parents, ACL, others creating the
-- same nodes) and client:delete(path, { recursive = true }) (children
-- first, the top's version, others changing the tree meanwhile).
local zk = require "helpers.zk"
local zkserver = require "helpers.zkserver"
local zkcoord = require "zkcoord"

describe("paths #zk", function()
    local root, c, other

    before_each(function()
        root = zk.new_root("paths")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("ensure_path makes the node and its ancestors, and is idempotent", function()
        assert.same({ true }, { c:ensure_path("/a/b/c") })
        for _, p in ipairs({ "/a", "/a/b", "/a/b/c" }) do
            local st = assert(other:exists(p))
            assert.equal(0, st.data_length)
            assert.is_nil(st.ephemeral_owner)
        end
        assert.same({ true }, { c:ensure_path("/a/b/c") })
        assert.same({ true }, { c:ensure_path("/a/b") })
        assert.same({ true }, { c:ensure_path("/") })
        -- create stays a create: an existing node is "nodeexists"
        assert.same({ nil, "nodeexists" }, { c:create("/a/b/c", "x", { parents = true }) })
        -- others made some of the ancestors: their nodes are ours too
        assert(other:create("/x/y", nil, { parents = true }))
        assert.same({ true }, { c:ensure_path("/x/y/z/w") })
        assert.truthy(other:exists("/x/y/z/w"))
    end)

    it("ensure_path in many coroutines at once: each answers true", function()
        local results = {}
        for i = 1, 6 do
            c:spawn(function()
                results[i] = { c:ensure_path("/race/" .. (i % 2) .. "/leaf") }
            end)
            other:spawn(function()
                results[i + 6] = { other:ensure_path("/race/" .. (i % 2) .. "/leaf") }
            end)
        end
        assert.is_true(c:run(10))
        assert.is_true(other:run(10))
        for i = 1, 12 do
            assert.same({ true }, results[i])
        end
        assert.same({ "0", "1" }, (function()
            local names = assert(c:children("/race"))
            table.sort(names)
            return names
        end)())
    end)

    it("ensure_path with an ACL; a failure is an answer", function()
        local acl = { { scheme = "world", id = "anyone", perms = "rc" } }
        assert.is_true(c:ensure_path("/ro/leaf", { acl = acl }))
        assert.same({ { scheme = "world", id = "anyone", perms = "rc" } },
                    (assert(other:get_acl("/ro/leaf"))))
        assert.same({ nil, "noauth" }, { other:set("/ro/leaf", "x") })
        -- a failure is an answer: no children under an ephemeral node
        assert(c:create("/eph", nil, { ephemeral = true }))
        assert.same({ nil, "nochildrenforephemerals" }, { c:ensure_path("/eph/x") })
    end)

    -- /t: a/b/c, a/d, e
    local function tree(client)
        for _, p in ipairs({ "/t/a/b/c", "/t/a/d", "/t/e" }) do
            assert(client:create(p, "x", { parents = true }))
        end
    end

    it("delete recursive removes the tree, children first", function()
        tree(other)
        assert.same({ true }, { c:delete("/t", { recursive = true }) })
        assert.is_false(other:exists("/t"))
        -- gone already: fine
        assert.same({ true }, { c:delete("/t", { recursive = true }) })
        -- the options form without recursive is the plain delete
        assert(other:create("/solo", "x"))
        assert.same({ nil, "nonode" }, { c:delete("/nothing", {}) })
        tree(other)
        assert.same({ nil, "notempty" }, { c:delete("/t", {}) })
        assert.is_true(c:delete("/solo", { version = 0 }))
        -- the number form still works
        assert(other:create("/n", "x"))
        assert.same({ nil, "badversion" }, { c:delete("/n", 3) })
        assert.is_true(c:delete("/n", 0))
        -- the async form
        assert.is_true(c:send("delete", "/t", { recursive = true }):wait())
        assert.is_false(other:exists("/t"))
    end)

    it("delete recursive checks the top's version before deleting anything", function()
        tree(other)
        assert(other:set("/t", "v1"))
        assert.same({ nil, "badversion" }, { c:delete("/t", { recursive = true, version = 0 }) })
        assert.truthy(other:exists("/t/a/b/c"))
        assert.is_true(c:delete("/t", { recursive = true, version = 1 }))
        assert.is_false(other:exists("/t"))
    end)

    it("delete recursive goes on when children come and go meanwhile", function()
        -- A second coroutine adds children under /t/a while the delete lists
        -- and deletes (their requests interleave in one session): the
        -- delete sees "notempty" and looks again.
        tree(c)
        local made, done = 0, false
        c:spawn(function()
            assert.is_true(c:delete("/t", { recursive = true, timeout = 10 }))
            done = true
        end)
        c:spawn(function()
            for _ = 1, 3 do
                if done or not c:create("/t/a/new-", "", { sequential = true }) then
                    break
                end
                made = made + 1
            end
        end)
        assert.is_true(c:run(15))
        assert.is_true(done)
        assert.is_true(made >= 1)
        assert.is_false(other:exists("/t"))
    end)

    it("raises on bad arguments", function()
        assert.has_error(function() c:ensure_path("a") end)
        assert.has_error(function() c:ensure_path("/a", { bogus = 1 }) end, "bad argument #2 to"
                         .. " 'ensure_path' (unknown option 'bogus' (container, acl, timeout))")
        assert.has_error(function() c:ensure_path("/a", { acl = "nope" }) end)
        assert.has_error(function() c:delete("/a", { recursive = true, version = "x" }) end)
        assert.has_error(function() c:delete("/a", { bogus = true }) end)
        assert.has_error(function() c:delete("/", { recursive = true }) end,
                         "bad argument #1 to 'delete' (cannot delete the root recursively)")
        assert.has_error(function() c.ensure_path({}, "/a") end)
    end)
end)


describe("ensure_path's containers on a server that checks them every 0.5 s #zk #slow", function()
    local server, c

    setup(function()
        server = assert(zkserver.start { jvm_flags = { "-Dznode.container.checkIntervalMs=500" } })
        -- a fresh JVM may stall a second: no connection loss over that
        c = assert(zkcoord.connect { servers = server.hosts, session_timeout = 10 })
    end)

    teardown(function()
        if c then c:close() end
        if server then server:destroy() end
    end)

    it("makes container parents on request: the server removes them once empty", function()
        assert.is_true(c:ensure_path("/box/inner", { container = true }))
        assert.is_true(c:ensure_path("/keep/inner"))
        assert.is_true(c:delete("/box/inner"))
        assert.is_true(c:delete("/keep/inner"))
        assert.truthy(zk.wait_until(function() return c:exists("/box") == false end, 10, c),
                      "the container parent stayed")
        assert.truthy(c:exists("/keep"))
    end)
end)
