-- Security: ACLs are enforced with digest auth, a chroot keeps a client in
-- its namespace, and credentials never show up in what the client logs,
-- returns or raises. Digest ids are computed here (spec/helpers/digest.lua:
-- SHA-1 and base64 in plain LuaJIT), independently of the code under test.
local zk = require "helpers.zk"
local digest = require "helpers.digest"
local zkcoord = require "zkcoord"

-- A secret that cannot occur by accident in a log line or an address.
local function new_secret()
    local f = io.open("/dev/urandom", "rb")
    local b = f and f:read(8) or tostring(os.time())
    if f then f:close() end
    return "S3cr3t-" .. b:gsub(".", function(c) return ("%02x"):format(c:byte()) end)
end


-- Deletes a subtree, trying each client in turn for every node (the nodes
-- of a spec may only be deletable by their owner).
local function delete_tree(clients, path)
    for _, c in ipairs(clients) do
        local names = c:children(path)
        if names then
            for _, n in ipairs(names) do
                delete_tree(clients, (path == "/" and "" or path) .. "/" .. n)
            end
            break
        end
    end
    for _, c in ipairs(clients) do
        if c:delete(path) then
            return
        end
    end
end


describe("security #zk", function()
    local root, cleanup_clients

    before_each(function()
        root = zk.new_root("sec")
        cleanup_clients = { zk.admin() }
    end)

    after_each(function()
        delete_tree(cleanup_clients, root)
        zk.close_clients()
    end)

    local function digest_client(user, password, opts)
        local o = { chroot = root, auth = { scheme = "digest", credentials = user .. ":" .. password } }
        for k, v in pairs(opts or {}) do o[k] = v end
        local c = zk.client(o)
        table.insert(cleanup_clients, 1, c)
        return c
    end

    describe("digest ACLs", function()
        it("the digest id computed here is the one ZooKeeper records", function()
            assert.equal("a9993e364706816aba3e25717850c26c9cd0d89d", digest.sha1_hex("abc"))
            assert.equal("Zm9vYmFy", digest.base64("foobar"))
            assert.equal("Zm9vYg==", digest.base64("foob"))
            local pw = new_secret()
            local alice = digest_client("alice", pw)
            assert.truthy(alice:create("/mine", "x", { acl = "creator_all" }))
            local acl = assert(alice:get_acl("/mine"))
            assert.same({ { perms = "rwcda", scheme = "digest", id = digest.id("alice", pw) } }, acl)
        end)

        it("a creator_all node is noauth to another identity and to an anonymous client", function()
            local alice_pw = new_secret()
            local alice = digest_client("alice", alice_pw)
            local bob = digest_client("bob", new_secret())
            local anon = zk.client { chroot = root }
            assert.equal("/private", (alice:create("/private", "mine", { acl = "creator_all" })))
            assert.equal("/private/kid", (alice:create("/private/kid", "k", { acl = "creator_all" })))

            for name, other in pairs({ bob = bob, anonymous = anon }) do
                local function noauth(what, ...)
                    local r = { ... }
                    assert.same({ nil, "noauth" }, { r[1], r[2] }, name .. ": " .. what)
                end
                noauth("get", other:get("/private"))
                noauth("set", other:set("/private", "theirs"))
                noauth("children", other:children("/private"))
                noauth("create child", other:create("/private/new", "x"))
                noauth("delete child", other:delete("/private/kid"))
                noauth("get_acl", other:get_acl("/private"))
                noauth("set_acl", other:set_acl("/private", "open"))
                noauth("multi", other:multi { { op = "set", path = "/private", data = "x" } })
                noauth("send get", other:send("get", "/private"):wait())
                noauth("counter", other:counter("/private/ctr"):add(1))
                noauth("lock", other:lock("/private/lk"):acquire(0))
                -- ZooKeeper checks no ACL for exists(): a stat, not a leak of data
                assert.is_table(other:exists("/private"), name)
            end

            -- untouched, and the owner still reads and writes it
            assert.equal("mine", (alice:get("/private")))
            assert.same({ "kid" }, (alice:children("/private")))
            assert.truthy(alice:set("/private", "mine2"))
            -- the identity counts, not the session: a second session of alice reads it
            local alice2 = zk.client { chroot = root,
                                       auth = { scheme = "digest", credentials = "alice:" .. alice_pw } }
            assert.equal("mine2", (alice2:get("/private")))
        end)

        it("a digest id entry grants exactly the listed permissions", function()
            local owner_pw = new_secret()
            local owner = digest_client("owner", owner_pw)
            local pw = { carol = new_secret(), dave = new_secret(), erin = new_secret() }
            local acl = {
                { perms = "rwcda", scheme = "digest", id = digest.id("owner", owner_pw) },
                { perms = "r", scheme = "digest", id = digest.id("carol", pw.carol) },
                { perms = "cd", scheme = "digest", id = digest.id("dave", pw.dave) },
                { perms = "wa", scheme = "digest", id = digest.id("erin", pw.erin) },
            }
            assert.truthy(owner:create("/shared", "s", { acl = acl }))
            local got = assert(owner:get_acl("/shared"))
            assert.same(acl, got)

            local clients = {
                carol = digest_client("carol", pw.carol),
                dave = digest_client("dave", pw.dave),
                erin = digest_client("erin", pw.erin),
                ["carol with a wrong password"] = digest_client("carol", pw.carol .. "x"),
                anonymous = zk.client { chroot = root },
            }
            local expected = { carol = "r", dave = "cd", erin = "wa",
                               ["carol with a wrong password"] = "", anonymous = "" }
            local n = 0
            for who, c in pairs(clients) do
                n = n + 1
                local allowed = {}
                for p in expected[who]:gmatch(".") do allowed[p] = true end
                local function check(perm, what, ok, err)
                    if allowed[perm] then
                        assert.truthy(ok, who .. " should be allowed to " .. what .. ": "
                                          .. tostring(err))
                    else
                        assert.is_nil(ok, who .. " should not be allowed to " .. what)
                        assert.equal("noauth", err, who .. ": " .. what)
                    end
                end
                check("r", "get", c:get("/shared"))
                check("r", "list children", c:children("/shared"))
                check("w", "set", c:set("/shared", "by " .. n))
                check("c", "create a child", c:create("/shared/new-" .. n, "x"))
                assert.truthy(owner:create("/shared/kid-" .. n, "x"))
                check("d", "delete a child", c:delete("/shared/kid-" .. n))
                check("a", "set the ACL", c:set_acl("/shared", acl))
            end
            -- the ACL is still the one set (erin's set_acl wrote the same list)
            assert.same(acl, (owner:get_acl("/shared")))
        end)
    end)

    describe("chroot", function()
        local ns

        before_each(function()
            ns = root .. "/ns"
            local admin = zk.admin()
            assert.truthy(admin:create(ns))
            assert.truthy(admin:create(root .. "/outside", "o"))
            assert.truthy(admin:create(root .. "/outside/secret", "outside data"))
        end)

        it("resolves absolute paths under the chroot, never outside it", function()
            local admin = zk.admin()
            local c = zk.client { chroot = ns }
            assert.equal("/x", (c:create("/x", "1")))
            assert.equal("1", (admin:get(ns .. "/x")))
            assert.is_false(admin:exists(root .. "/x"))
            -- the sibling namespace is not reachable by its own name
            assert.same({ nil, "nonode" }, { c:get("/outside/secret") })
            assert.same({ nil, "nonode" }, { c:set("/outside/secret", "y") })
            assert.same({ nil, "nonode" }, { c:delete("/outside/secret") })
            assert.is_false(c:exists("/outside"))
            assert.same({ "x" }, (c:children("/")))
            -- creating it makes a new node inside, the outside one is untouched
            assert.truthy(c:create("/outside/secret", "in", { parents = true }))
            assert.equal("outside data", (admin:get(root .. "/outside/secret")))
            assert.equal("in", (admin:get(ns .. "/outside/secret")))
            -- sequential names, multi, watch events and recipes are inside too
            local seq = assert(c:create("/seq-", "", { sequential = true }))
            assert.matches("^/seq%-%d+$", seq)
            local res = assert(c:multi { { op = "create", path = "/m", data = "m" },
                                         { op = "set", path = "/x", data = "2" } })
            assert.equal("/m", res[1].path)
            assert.truthy(admin:exists(ns .. "/m"))
            local events = {}
            c:get("/x", function(ev) events[#events + 1] = ev.path end)
            admin:set(ns .. "/x", "3")
            zk.wait_until(function() return #events == 1 end, 5, c)
            assert.same({ "/x" }, events)
            local l = c:lock("/locks/a")
            assert.is_true(l:acquire(5))
            assert.matches("^/locks/a/_c_", l:node())
            assert.equal(1, #(admin:children(ns .. "/locks/a")))
            l:release()
            local w = assert(c:watch("/x", function() end))
            w:cancel()
        end)

        it("raises on paths that would climb out", function()
            local c = zk.client { chroot = ns }
            local bad = { "/..", "/../outside/secret", "/x/..", "/x/../../outside", "/.",
                          "/./x", "/../", "..", "../outside" }
            for _, p in ipairs(bad) do
                for _, call in ipairs({
                    function() return c:get(p) end,
                    function() return c:set(p, "x") end,
                    function() return c:create(p, "x") end,
                    function() return c:delete(p) end,
                    function() return c:exists(p) end,
                    function() return c:children(p) end,
                    function() return c:get_acl(p) end,
                    function() return c:set_acl(p, "open") end,
                    function() return c:sync(p) end,
                    function() return c:delete_guaranteed(p) end,
                    function() return c:multi { { op = "create", path = p } } end,
                    function() return c:send("get", p) end,
                    function() return c:lock(p) end,
                    function() return c:counter(p) end,
                    function() return c:barrier(p) end,
                    function() return c:watch(p, function() end) end,
                }) do
                    local ok, err = pcall(call)
                    assert.is_false(ok, p)
                    assert.matches("bad argument", tostring(err), 1, true)
                end
            end
            -- a chroot may not climb either
            assert.has_error(function()
                zkcoord.connect { servers = zk.hosts(), chroot = ns .. "/.." }
            end)
            assert.has_error(function()
                zkcoord.connect { servers = zk.hosts(), chroot = ns .. "/../outside" }
            end)
            -- nothing was written outside
            assert.equal("outside data", (zk.admin():get(root .. "/outside/secret")))
            assert.same({ "secret" }, (zk.admin():children(root .. "/outside")))
        end)

        it("a sequential create of '/' stays inside the chroot (K11, client/ops.lua)", function()
            local admin = zk.admin()
            local c = zk.client { chroot = ns }
            local ok1, p1 = pcall(c.create, c, "/", "x", { sequential = true })
            local ok2, p2 = pcall(c.multi, c, { { op = "create", path = "/", sequential = true } })
            local outside = {}
            for _, name in ipairs(admin:children(root) or {}) do
                if name:match("^ns%d+$") then
                    outside[#outside + 1] = name
                    admin:delete(root .. "/" .. name)
                end
            end
            if #outside > 0 then
                error("bug K11 is back: create('/', { sequential = true }) under a chroot made "
                        .. table.concat(outside, ", ") .. " outside it (see tools/fuzz/known.lua)")
                return
            end
            -- fixed: refused (raise), or made inside with a path that starts with '/'
            for _, r in ipairs({ { ok1, p1 }, { ok2, p2 } }) do
                if r[1] and type(r[2]) == "string" then
                    assert.matches("^/", r[2])
                end
            end
        end)

        it("a missing chroot creates nothing outside", function()
            -- connect refuses it (connect_spec); nothing is made either way
            local c, err = zkcoord.connect { servers = zk.hosts(), chroot = root .. "/missing" }
            assert.is_nil(c)
            assert.equal("nonode", err)
            assert.is_false(zk.admin():exists(root .. "/y"))
            assert.is_false(zk.admin():exists(root .. "/missing"))
        end)
    end)

    describe("credentials", function()
        -- Every string a value holds, recursively (plain tables by key and
        -- value; objects such as a returned client by their tostring(), since
        -- their private fields hold what they were given).
        local function strings(v, out, seen)
            out, seen = out or {}, seen or {}
            if type(v) == "table" and getmetatable(v) == nil then
                if seen[v] then return out end
                seen[v] = true
                for k, x in pairs(v) do
                    strings(k, out, seen)
                    strings(x, out, seen)
                end
            elseif v ~= nil then
                out[#out + 1] = tostring(v)
            end
            return out
        end

        it("never appear in logs, returns, errors, stats() or tostring()", function()
            local secret = new_secret()
            local seen = {}           -- everything the client said, one string each
            local function record(...)
                for _, s in ipairs(strings({ ... })) do
                    seen[#seen + 1] = s
                end
            end
            local function logger(level, msg)
                record(level, msg)
            end
            local function try(fn, ...)
                local r = { pcall(fn, ...) }
                record(unpack(r, 2))
                return unpack(r)
            end

            -- an identity with the secret, and an owner of protected nodes
            local alice = digest_client("alice", secret, { logger = logger })
            local owner = digest_client("owner", new_secret())
            assert.truthy(owner:create("/p", "x", { acl = "creator_all" }))
            assert.truthy(alice:create("/a", "x", { acl = "creator_all" }))

            -- failing authentication: an unknown scheme, a digest without a user
            for _, auth in ipairs({ { scheme = "bogus", credentials = "alice:" .. secret },
                                    { scheme = "digest", credentials = secret },
                                    { { scheme = "digest", credentials = "alice:" .. secret },
                                      { scheme = "bogus", credentials = secret } } }) do
                local _, c = try(zkcoord.connect, { servers = zk.hosts(), chroot = root,
                                                    auth = auth, logger = logger,
                                                    connect_timeout = 5 })
                if type(c) == "table" and c.close then
                    try(c.get, c, "/p")
                    c:dispatch(0.2)
                    record(tostring(c))
                    record(c:stats())
                    c:close()
                end
            end
            -- refused: noauth with its details
            try(alice.get, alice, "/p")
            try(alice.set, alice, "/p", "y")
            try(alice.children, alice, "/p")
            try(alice.create, alice, "/p/x")
            try(alice.set_acl, alice, "/p", "open")
            try(alice.multi, alice, { { op = "set", path = "/p", data = "y" } })
            try(function() return alice:lock("/p/lock"):acquire(0) end)
            -- bad calls that raise
            for _, call in ipairs({
                function() return alice:get(42) end,
                function() return alice:create("/x", {}) end,
                function() return alice:set("/x", "d", "v") end,
                function() return alice:multi { { op = "bogus" } } end,
                function() return alice:create("/x", "", { acl = "bogus" }) end,
                function() return alice:dispatch(-1) end,
                function() return alice:lock("/l", { bogus = true }) end,
                function()
                    return zkcoord.connect { servers = zk.hosts(), bogus = 1,
                                             auth = { scheme = "digest", credentials = "alice:" .. secret } }
                end,
                function()
                    return zkcoord.connect { servers = zk.hosts(), session_timeout = -1,
                                             auth = { scheme = "digest", credentials = "alice:" .. secret } }
                end,
                function()
                    return zkcoord.connect { servers = zk.hosts(),
                                             auth = { { scheme = "digest", credentials = "alice:" .. secret },
                                                      { scheme = 1, credentials = secret } } }
                end,
                function()
                    return zkcoord.connect { servers = "127.0.0.1:1", connect_timeout = 0.2,
                                             auth = { scheme = "digest", credentials = "alice:" .. secret } }
                end,
            }) do
                try(call)
            end
            -- a callback that fails is logged
            alice:get("/a", function() error("callback failed on purpose") end)
            alice:set("/a", "changed")
            alice:dispatch(0.2)
            -- session expiry: logged, and the new session authenticates again
            assert.is_true(zk.expire_session(alice))
            assert.is_true(alice:wait_connected(10))
            assert.equal("changed", (alice:get("/a")))
            record(tostring(alice))
            record(alice:stats())
            record(alice:session_id(), alice:state(), alice:session_timeout())
            alice:close()
            try(alice.get, alice, "/a")

            local logged = false
            for _, s in ipairs(seen) do
                assert.is_nil(s:find(secret, 1, true), "the secret leaked in: " .. s)
                if s:find("session lost", 1, true) or s:find("callback failed", 1, true) then
                    logged = true
                end
            end
            assert.is_true(logged, "the logger was never called")
            assert.truthy(#seen > 30)
        end)

        it("never appear in libzookeeper's own debug log", function()
            local secret = new_secret()
            local log = zk.tmpdir() .. "/zklog-" .. secret:sub(-6) .. ".txt"
            local code = [[
                local zkcoord = require "zkcoord"
                local hosts, root, secret = ...
                local c = assert(zkcoord.connect { servers = hosts, chroot = root, zk_log_level = 4,
                    auth = { scheme = "digest", credentials = "alice:" .. secret } })
                c:create("/dbg", "x", { acl = "creator_all" })
                c:get("/dbg")
                c:get("/missing")
                c:close()
                local b = zkcoord.connect { servers = hosts, zk_log_level = 4,
                    auth = { scheme = "bogus", credentials = "alice:" .. secret } }
                if b then b:close() end
                print("done")
            ]]
            local pid = assert(zk.spawn_lua(code, { zk.hosts(), root, secret }, log))
            assert.truthy(zk.proc.wait_exit(pid, 60))
            local text = zk.proc.read_file(log) or ""
            assert.matches("done", text, 1, true)
            assert.matches("ZOO_DEBUG", text, 1, true)        -- it did log, at length
            assert.is_nil(text:find(secret, 1, true), "the secret is in libzookeeper's log")
        end)
    end)
end)
