-- The client's operations against a real ZooKeeper: results, error codes,
-- watches, multi, ACLs, chroot, binary data, limits and argument checks.
local zk = require "helpers.zk"
local zkcoord = require "zkcoord"

describe("client operations #zk", function()
    local root, c

    before_each(function()
        root = zk.new_root("client")
        c = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("creates, reads, updates and deletes a node", function()
        local path, stat = c:create("/a", "hello")
        assert.equal("/a", path)
        assert.is_number(stat.czxid)
        local data, st = c:get("/a")
        assert.equal("hello", data)
        assert.equal(0, st.version)
        assert.equal(5, st.data_length)
        local st2 = c:set("/a", "world", 0)
        assert.equal(1, st2.version)
        assert.equal("world", (c:get("/a")))
        assert.is_true(c:delete("/a", 1))
        assert.is_false(c:exists("/a"))
    end)

    it("returns stable error codes", function()
        assert.same({ nil, "nonode" }, { c:get("/missing") })
        assert.same({ nil, "nonode" }, { c:delete("/missing") })
        assert.same({ nil, "nonode" }, { c:set("/missing", "x") })
        assert.same({ nil, "nonode" }, { c:create("/missing/child") })
        c:create("/a", "1")
        assert.same({ nil, "nodeexists" }, { c:create("/a") })
        assert.same({ nil, "badversion" }, { c:set("/a", "2", 7) })
        assert.same({ nil, "badversion" }, { c:delete("/a", 7) })
        c:create("/a/b")
        assert.same({ nil, "notempty" }, { c:delete("/a") })
        c:create("/e", nil, { ephemeral = true })
        assert.same({ nil, "nochildrenforephemerals" }, { c:create("/e/x") })
    end)

    it("exists returns a stat, false for a missing node", function()
        assert.is_false(c:exists("/nothing"))
        c:create("/here", "x")
        local st = c:exists("/here")
        assert.equal(0, st.version)
        assert.is_nil(st.ephemeral_owner)
    end)

    it("supports every create mode", function()
        local p = c:create("/seq-", "", { sequential = true })
        assert.matches("^/seq%-%d%d%d%d%d%d%d%d%d%d$", p)
        local _, st = c:create("/eph", "", { ephemeral = true })
        assert.equal(c:session_id(), c:exists("/eph").ephemeral_owner)
        assert.is_number(st.czxid)
        local ep = c:create("/eseq-", "", { ephemeral = true, sequential = true })
        assert.matches("^/eseq%-%d+$", ep)
        assert.equal("/cont", c:create("/cont", "", { container = true }))
        assert.equal("/ttl", c:create("/ttl", "", { ttl = 60 }))
        assert.matches("^/ttlseq%-%d+$", c:create("/ttlseq-", "", { ttl = 60, sequential = true }))
        assert.equal("/x/y/z", c:create("/x/y/z", "deep", { parents = true }))
        assert.equal("deep", (c:get("/x/y/z")))
        -- parents are persistent by default, containers on request
        assert.is_nil(c:exists("/x").ephemeral_owner)
        assert.equal("/k/l", c:create("/k/l", "", { parents = "container" }))
    end)

    it("ephemeral nodes go with their session", function()
        local other = zk.client { chroot = root }
        other:create("/mine", "", { ephemeral = true })
        assert.truthy(c:exists("/mine"))
        other:close()
        assert.is_false(c:exists("/mine"))
    end)

    it("lists children with a stat", function()
        c:create("/p")
        for i = 1, 5 do c:create("/p/c" .. i) end
        local names, st = c:children("/p")
        table.sort(names)
        assert.same({ "c1", "c2", "c3", "c4", "c5" }, names)
        assert.equal(5, st.num_children)
        assert.same({}, (c:children("/p/c1")))
    end)

    it("keeps binary data intact, up to the 1 MiB limit", function()
        local bin = "a\0b\0\255\1" .. string.rep("\0", 100)
        c:create("/bin", bin)
        assert.equal(bin, (c:get("/bin")))
        -- ZooKeeper's limit is 1 MiB - 1 per request, path and headers included
        local big = string.rep("x", 1024 * 1024 - 200)
        assert.truthy(c:create("/big", big))
        assert.equal(#big, #(c:get("/big")))
        local mib = string.rep("y", 1024 * 1024)
        local ok, err, detail = c:create("/big2", mib)
        assert.is_nil(ok)
        assert.equal("toolarge", err)
        assert.matches("jute.maxbuffer", detail)
        assert.equal("toolarge", select(2, c:set("/big", mib)))
        assert.is_false(c:exists("/big2"))
        assert.equal("connected", c:state())
        c:create("/empty")
        assert.equal("", (c:get("/empty")))
        c:create("/zero", "")
        assert.equal("", (c:get("/zero")))
    end)

    it("refuses a path or a multi beyond the request limit with toolarge, staying connected",
       function()
        local long = "/" .. string.rep("p", 1024 * 1024)
        local ok, err, detail = c:get(long)
        assert.is_nil(ok)
        assert.equal("toolarge", err)
        assert.matches("jute.maxbuffer", detail)
        assert.equal("toolarge", select(2, c:exists(long)))
        assert.equal("toolarge", select(2, c:delete(long)))
        -- A guaranteed delete of such a path is dropped (logged), not resent for ever.
        assert.is_true(c:delete_guaranteed(long))
        local half = string.rep("h", 600 * 1024)
        local r, merr = c:multi { { "create", "/m1", data = half }, { "create", "/m2", data = half } }
        assert.is_nil(r)
        assert.equal("toolarge", merr)
        assert.is_false(c:exists("/m1"))
        assert.equal("connected", c:state())
        assert.same({}, c._retry_deletes)
    end)

    it("raises on a ttl beyond ZooKeeper's 40-bit milliseconds", function()
        assert.has_error(function() c:create("/t", "", { ttl = math.huge }) end,
                         "bad argument #3 to 'create' (ttl must be a positive number of seconds, "
                         .. "at most 1099511627.775 (about 34 years))")
        assert.has_error(function() c:create("/t", "", { ttl = 0 / 0 }) end)
        assert.has_error(function() c:create("/t", "", { ttl = 2 ^ 40 }) end)
    end)

    it("multi is all or nothing", function()
        c:create("/m", "0")
        local res = c:multi {
            { op = "create", path = "/m/a", data = "1" },
            { op = "set", path = "/m", data = "1", version = 0 },
            { op = "check", path = "/m", version = 1 },
        }
        assert.equal("/m/a", res[1].path)
        assert.equal(1, res[2].stat.version)
        local ok, err, results = c:multi {
            { op = "create", path = "/m/b" },
            { op = "delete", path = "/m/missing" },
        }
        assert.is_nil(ok)
        assert.equal("nonode", err)
        assert.equal("nonode", results[2].err)
        assert.is_false(c:exists("/m/b"))
        local ok2, err2 = c:multi {
            { op = "check", path = "/m", version = 0 },
            { op = "delete", path = "/m/a" },
        }
        assert.is_nil(ok2)
        assert.equal("badversion", err2)
        assert.truthy(c:exists("/m/a"))
    end)

    it("sync succeeds", function()
        c:create("/s")
        assert.is_true(c:sync("/s"))
    end)

    it("reads and writes ACLs; a second identity gets noauth", function()
        local alice = zk.client { chroot = root, auth = { scheme = "digest", credentials = "alice:secret" } }
        alice:create("/private", "x", { acl = "creator_all" })
        local acl = alice:get_acl("/private")
        assert.equal(1, #acl)
        assert.equal("digest", acl[1].scheme)
        assert.equal("rwcda", acl[1].perms)
        assert.matches("^alice:", acl[1].id)
        assert.equal("x", (alice:get("/private")))
        assert.same({ nil, "noauth" }, { c:get("/private") })
        assert.same({ nil, "noauth" }, { c:set("/private", "y") })
        local bob = zk.client { chroot = root, auth = { scheme = "digest", credentials = "bob:other" } }
        assert.same({ nil, "noauth" }, { bob:get("/private") })
        -- read-only for the world
        alice:create("/public", "p")
        assert.is_true(alice:set_acl("/public", "read"))
        assert.equal("p", (c:get("/public")))
        assert.same({ nil, "noauth" }, { c:set("/public", "q") })
        assert.equal("r", c:get_acl("/public")[1].perms)
        -- credentials never show up in what the client reports
        for _, v in pairs(alice:stats()) do
            assert.is_falsy(tostring(v):find("secret", 1, true))
        end
    end)

    it("a chroot keeps the client inside its namespace", function()
        c:create("/inside", "1")
        local admin = zk.admin()
        assert.equal("1", (admin:get(root .. "/inside")))
        assert.is_false(c:exists(root))
        local names = c:children("/")
        assert.same({ "inside" }, names)
    end)

    it("delivers data, exists and children watches fired by another session", function()
        local other = zk.client { chroot = root }
        local events = {}
        local function rec(ev) events[#events + 1] = ev.type .. " " .. ev.path end
        c:create("/w", "0")
        assert.equal("0", (c:get("/w", rec)))
        assert.is_false(c:exists("/later", rec))
        assert.same({}, (c:children("/w", rec)))
        other:set("/w", "1")
        other:create("/later")
        other:create("/w/kid")
        zk.wait_until(function() return #events == 3 end, 5, c)
        table.sort(events)
        assert.same({ "changed /w", "child /w", "created /later" }, events)
        -- one-shot: a second change is not reported
        other:set("/w", "2")
        c:dispatch(0.2)
        assert.equal(3, #events)
        assert.equal(0, c:stats().watches)
    end)

    it("a watch on a missing node with get is not left behind", function()
        assert.same({ nil, "nonode" }, { c:get("/nope", function() end) })
        assert.equal(0, c:stats().watches)
    end)

    it("remove_watches cancels a watch", function()
        c:create("/rw")
        local fired = false
        local fn = function() fired = true end
        c:get("/rw", fn)
        assert.equal(1, c:stats().watches)
        assert.equal(1, c:remove_watches("/rw", fn))
        assert.equal(0, c:stats().watches)
        c:set("/rw", "x")
        c:dispatch(0.2)
        assert.is_false(fired)
    end)

    it("errors in callbacks are caught and logged", function()
        local logged = {}
        local lc = zk.client { chroot = root, logger = function(level, msg)
            logged[#logged + 1] = level .. ": " .. msg
        end }
        lc:create("/cb")
        lc:get("/cb", function() error("boom in callback") end)
        lc:set("/cb", "1")
        lc:dispatch(0.2)
        assert.equal(1, #logged)
        assert.matches("boom in callback", logged[1])
        assert.equal("connected", lc:state())
        assert.truthy(lc:get("/cb"))
    end)

    it("pipelines requests: many futures in flight, results in order", function()
        c:create("/pipe")
        local fs = {}
        for i = 1, 200 do
            fs[i] = c:send("create", "/pipe/n" .. i, tostring(i))
        end
        for i = 1, 200 do
            assert.equal("/pipe/n" .. i, (fs[i]:wait()))
        end
        local gets = {}
        for i = 1, 200 do gets[i] = c:send("get", "/pipe/n" .. i) end
        for i = 200, 1, -1 do assert.equal(tostring(i), (gets[i]:wait())) end
        -- waiting twice returns the same result
        assert.equal("200", (gets[200]:wait()))
    end)

    it("raises on programming errors", function()
        assert.has_error(function() c:get("relative") end)
        assert.has_error(function() c:get(42) end)
        assert.has_error(function() c:get("/a/") end)
        assert.has_error(function() c:get("/a//b") end)
        assert.has_error(function() c:get("/a/../b") end)
        assert.has_error(function() c:get("/a\0b") end)
        assert.has_error(function() c:create("/a", 42) end)
        assert.has_error(function() c:create("/a", "", { bogus = true }) end)
        assert.has_error(function() c:create("/a", "", { ephemeral = true, ttl = 1 }) end)
        assert.has_error(function() c:set("/a", "x", 1.5) end)
        assert.has_error(function() c:set("/a", "x", -2) end)
        assert.has_error(function() c:get("/a", "notafunction") end)
        assert.has_error(function() c:create("/a", "", { acl = "nosuchacl" }) end)
        assert.has_error(function() c:multi({}) end)
        assert.has_error(function() c:multi({ { op = "explode", path = "/x" } }) end)
        assert.has_error(function() c:dispatch(-1) end)
        assert.has_error(function() c.get(nil, "/a") end)
        assert.has_error(function() zkcoord.connect { servers = zk.hosts(), bogus = 1 } end)
        assert.has_error(function() zkcoord.connect { servers = 42 } end)
        assert.has_error(function() zkcoord.connect { servers = zk.hosts(), session_timeout = -1 } end)
        assert.has_error(function() zkcoord.connect() end)
        -- the client still works afterwards
        assert.is_false(c:exists("/a"))
    end)

    it("returns closed after close, and close is idempotent", function()
        assert.is_true(c:close())
        assert.is_true(c:close())
        assert.equal("closed", c:state())
        assert.same({ nil, "closed" }, { c:get("/x") })
        assert.same({ nil, "closed" }, { c:create("/x") })
        assert.same({ nil, "closed" }, { c:exists("/x") })
        assert.same({ nil, "closed" }, { c:dispatch(0) })
    end)
end)
