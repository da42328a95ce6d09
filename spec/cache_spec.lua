-- The tree cache against a real server: the initial load with data and
-- depth limits; added/updated/removed in order; exact equality with the
-- server after 500 random changes by another client, and again after a
-- session expiry during which the tree changed (only the real differences
-- reported); events that never go back for a path; close(); callbacks that
-- throw; failures and bad arguments.
local zk = require "helpers.zk"
local tcpproxy = require "helpers.tcpproxy"

local function join(base, name)
    return (base == "/" and "" or base) .. "/" .. name
end

-- path -> { data =, children = "a,b" } for the subtree at `path`, `depth`
-- levels deep, read from the server.
local function server_tree(client, path, depth, out, level)
    out, level = out or {}, level or 0
    local data, err = client:get(path)
    if not data then
        assert(err == "nonode", err)
        return out
    end
    local names = {}
    if level < depth then
        names = assert(client:children(path))
        table.sort(names)
    end
    out[path] = { data = data, children = table.concat(names, ",") }
    for _, n in ipairs(names) do
        server_tree(client, join(path, n), depth, out, level + 1)
    end
    return out
end

-- The same, from the cache's memory.
local function cache_tree(cache, path, out)
    out = out or {}
    local data = cache:get(path)
    if not data then
        return out
    end
    local names = assert(cache:children(path))
    out[path] = { data = data, children = table.concat(names, ",") }
    for _, n in ipairs(names) do
        cache_tree(cache, join(path, n), out)
    end
    return out
end

local function same_tree(a, b)
    for p, v in pairs(a) do
        local w = b[p]
        if not w or w.data ~= v.data or w.children ~= v.children then
            return false, p
        end
    end
    for p in pairs(b) do
        if not a[p] then
            return false, p
        end
    end
    return true
end

local function count(t)
    local n = 0
    for _ in pairs(t) do n = n + 1 end
    return n
end

-- An on_change recorder: every event, and a per-path check that versions
-- never go back (a "removed" ends an incarnation; the next "added" must be
-- a newer one).
local function recorder()
    local r = { events = {}, errors = {}, last = {} }
    r.fn = function(ev)
        r.events[#r.events + 1] = ev
        local p = ev.path
        if not p then return end
        local last = r.last[p]
        if ev.type == "added" then
            if last and not last.removed then
                r.errors[#r.errors + 1] = "added twice: " .. p
            elseif last and ev.stat.czxid <= last.czxid then
                r.errors[#r.errors + 1] = "re-added an older node: " .. p
            end
            r.last[p] = { czxid = ev.stat.czxid, mzxid = ev.stat.mzxid, version = ev.stat.version }
        elseif ev.type == "updated" then
            if not last or last.removed then
                r.errors[#r.errors + 1] = "updated before added: " .. p
            elseif ev.stat.czxid ~= last.czxid or ev.stat.mzxid <= last.mzxid
                    or ev.stat.version <= last.version then
                r.errors[#r.errors + 1] = ("went back at %s: version %d after %d")
                                          :format(p, ev.stat.version, last.version)
            end
            r.last[p] = { czxid = ev.stat.czxid, mzxid = ev.stat.mzxid, version = ev.stat.version }
        elseif ev.type == "removed" then
            if not last or last.removed then
                r.errors[#r.errors + 1] = "removed while absent: " .. p
            else
                last.removed = true
            end
        end
    end
    function r.types(from)
        local out = {}
        for i = from or 1, #r.events do
            local ev = r.events[i]
            out[#out + 1] = ev.type .. (ev.path and " " .. ev.path or "")
        end
        return out
    end
    return r
end


-- n random creates, sets and deletes (leaves mostly, now and then a
-- subtree) at depths 1..4 below base, by `writer`; step(i) after each.
local function random_changes(writer, base, n, seed, step)
    math.randomseed(seed)
    local paths = { base }           -- what exists, by our own writes
    local function pick_parent()
        -- depth 0..3 below base
        for _ = 1, 10 do
            local p = paths[math.random(#paths)]
            local _, levels = p:sub(#base + 1):gsub("/", "")
            if levels <= 3 then return p end
        end
        return base
    end
    local ops = { create = 0, set = 0, delete = 0 }
    for i = 1, n do
        local roll = math.random()
        if roll < 0.45 or #paths < 5 then
            local p = join(pick_parent(), "n" .. i)
            if writer:create(p, "v" .. i) then
                paths[#paths + 1] = p
                ops.create = ops.create + 1
            end
        elseif roll < 0.8 then
            local p = paths[math.random(#paths)]
            assert(writer:set(p, "s" .. i))
            ops.set = ops.set + 1
        else
            -- delete a leaf (now and then a whole subtree, leaves first)
            local p
            for _ = 1, 10 do
                p = paths[math.random(2, #paths)]
                local leaf = true
                for _, q in ipairs(paths) do
                    if q:sub(1, #p + 1) == p .. "/" then leaf = false break end
                end
                if leaf or math.random() < 0.1 then break end
            end
            zk.delete_tree(writer, p)
            local keep = {}
            for _, q in ipairs(paths) do
                if q ~= p and q:sub(1, #p + 1) ~= p .. "/" then keep[#keep + 1] = q end
            end
            paths = keep
            ops.delete = ops.delete + 1
        end
        step(i)
    end
    return ops
end


describe("cache #zk", function()
    local root, c, other

    before_each(function()
        root = zk.new_root("cache")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    local function make(tree)
        for _, item in ipairs(tree) do
            assert(other:create(item[1], item[2]))
        end
    end

    local TREE = {
        { "/t", "top" }, { "/t/a", "A" }, { "/t/b", "" }, { "/t/a/x", "AX\0bin" },
        { "/t/a/y", "AY" }, { "/t/a/x/deep", "D" },
    }

    it("loads a tree with its data before returning, and honours depth", function()
        make(TREE)
        -- count the requests the load sends: one get and one children per node
        local sent = {}
        c.send = function(self, op, ...)
            sent[op] = (sent[op] or 0) + 1
            return getmetatable(self).__index.send(self, op, ...)
        end
        local cache = assert(c:cache("/t"))
        c.send = nil
        assert.same({ sync = 1, get = 6, children = 6 }, sent)
        local data, stat = cache:get("/t/a/x")
        assert.equal("AX\0bin", data)
        assert.equal(0, stat.version)
        assert.equal("D", (cache:get("/t/a/x/deep")))
        assert.equal("", (cache:get("/t/b")))
        assert.same({ "a", "b" }, cache:children("/t"))
        assert.same({ "x", "y" }, cache:children("/t/a"))
        assert.same({}, cache:children("/t/a/x/deep"))
        assert.same({ nil, "nonode" }, { cache:get("/t/zz") })
        assert.same({ nil, "nonode" }, { cache:children("/t/zz") })
        assert.is_true(same_tree(server_tree(other, "/t", math.huge), cache_tree(cache, "/t")))
        cache:close()

        local d1 = assert(c:cache("/t", { depth = 1 }))
        assert.equal("A", (d1:get("/t/a")))
        assert.same({}, d1:children("/t/a"))         -- at the limit: not mirrored
        assert.has_error(function() d1:get("/t/a/x") end)
        assert.has_error(function() d1:children("/t/a/x") end)
        assert.equal(3, count(cache_tree(d1, "/t")))
        d1:close()

        local d0 = assert(c:cache("/t", { depth = 0 }))
        assert.equal("top", (d0:get("/t")))
        assert.same({}, d0:children("/t"))
        assert.has_error(function() d0:get("/t/a") end)
        d0:close()

        -- a missing root: empty, then filled when it appears
        local m = assert(c:cache("/later"))
        assert.same({ nil, "nonode" }, { m:get("/later") })
        local r = recorder()
        m:on_change(r.fn)
        assert.same({ "initialized" }, r.types())
        assert(other:create("/later", "here"))
        assert(other:create("/later/kid", "k"))
        assert.truthy(zk.wait_until(function() return m:get("/later/kid") == "k" end, 5, c))
        assert.same({ "initialized", "added /later", "added /later/kid" }, r.types())
        assert.same({ "kid" }, m:children("/later"))
        m:close()
    end)

    it("the whole tree from '/' under a chroot, and a cache of one leaf", function()
        make(TREE)
        local whole = assert(c:cache("/"))
        assert.equal("top", (whole:get("/t")))
        assert.equal("D", (whole:get("/t/a/x/deep")))
        assert.is_true(same_tree(server_tree(other, "/", math.huge), cache_tree(whole, "/")))
        whole:close()
        local leaf = assert(c:cache("/t/a/x/deep"))
        assert.same({}, leaf:children("/t/a/x/deep"))
        assert.has_error(function() leaf:get("/t/a/x") end)   -- outside
        leaf:close()
    end)

    it("reports added, updated and removed in order, children before parents", function()
        make(TREE)
        local cache = assert(c:cache("/t"))
        local r = recorder()
        assert.equal(r.fn, cache:on_change(r.fn))
        -- the mirror first, parents first, then "initialized"
        assert.same({ "added /t", "added /t/a", "added /t/a/x", "added /t/a/x/deep",
                      "added /t/a/y", "added /t/b", "initialized" }, r.types())
        local n = #r.events
        assert(other:create("/t/c", "c1"))
        assert.truthy(zk.wait_until(function() return cache:get("/t/c") == "c1" end, 5, c))
        assert(other:set("/t/c", "c2"))
        assert.truthy(zk.wait_until(function() return cache:get("/t/c") == "c2" end, 5, c))
        assert(other:set("/t/c", "c3"))
        assert(other:delete("/t/c"))
        assert.truthy(zk.wait_until(function() return cache:get("/t/c") == nil end, 5, c))
        local t = r.types(n + 1)
        -- the last set and the delete may fold into one read: no "updated" c3 then
        assert.same({ "added /t/c", "updated /t/c" }, { t[1], t[2] })
        assert.equal("removed /t/c", t[#t])
        assert.equal("c1", r.events[n + 1].data)
        assert.equal("c2", r.events[n + 2].data)
        assert.equal(1, r.events[n + 2].stat.version)
        -- a subtree deleted leaf first: removed in that order
        n = #r.events
        assert(other:delete("/t/a/x/deep"))
        assert(other:delete("/t/a/x"))
        assert(other:delete("/t/a/y"))
        assert(other:delete("/t/a"))
        assert.truthy(zk.wait_until(function() return cache:get("/t/a") == nil end, 5, c))
        assert.same({ "removed /t/a/x/deep", "removed /t/a/x", "removed /t/a/y", "removed /t/a" },
                    r.types(n + 1))
        -- the root deleted and created again
        n = #r.events
        assert(other:delete("/t/b"))
        assert(other:delete("/t"))
        assert.truthy(zk.wait_until(function() return cache:get("/t") == nil end, 5, c))
        assert(other:create("/t", "again"))
        assert.truthy(zk.wait_until(function() return cache:get("/t") == "again" end, 5, c))
        assert.same({ "removed /t/b", "removed /t", "added /t" }, r.types(n + 1))
        assert.same({}, r.errors)
        cache:close()
    end)

    it("equals the server exactly after 500 random changes at several levels", function()
        make({ { "/r", "root" } })
        local cache = assert(c:cache("/r"))
        local r = recorder()
        cache:on_change(r.fn)
        local ops = random_changes(other, "/r", 500, 12, function(i)
            if i % 50 == 0 then
                c:dispatch(0)               -- let the cache work while we write
            end
        end)
        assert.is_true(ops.create > 100 and ops.set > 100 and ops.delete > 30,
                       ("creates %d, sets %d, deletes %d"):format(ops.create, ops.set, ops.delete))
        local want = server_tree(other, "/r", math.huge)
        local ok, where = zk.wait_until(function()
            return same_tree(want, cache_tree(cache, "/r"))
        end, 10, c)
        if not ok then
            ok, where = same_tree(want, cache_tree(cache, "/r"))
        end
        assert.is_true(ok, "first difference at " .. tostring(where))
        assert.is_true(count(want) > 50, count(want) .. " nodes")
        assert.same({}, r.errors)
        -- every event's path is inside, the last event of each live path
        -- shows the server's data
        for p, v in pairs(want) do
            assert.equal(v.data, (cache:get(p)))
        end
        cache:close()
    end)

    it("converges with a depth limit while sessions expire amid random changes", function()
        make({ { "/m", "root" } })
        local cache = assert(c:cache("/m", { depth = 2 }))
        local r = recorder()
        cache:on_change(r.fn)
        local sid = c:session_id()
        random_changes(other, "/m", 300, 7, function(i)
            if i % 30 == 0 then
                c:dispatch(0)
            end
            if i == 100 or i == 200 then
                assert.is_true(zk.expire_session(c))
            end
        end)
        assert.not_equal(sid, c:session_id())
        local want = server_tree(other, "/m", 2)
        local ok, where = zk.wait_until(function()
            return same_tree(want, cache_tree(cache, "/m"))
        end, 10, c)
        if not ok then
            ok, where = same_tree(want, cache_tree(cache, "/m"))
        end
        assert.is_true(ok, "first difference at " .. tostring(where))
        assert.is_true(count(want) > 8, count(want) .. " nodes")
        assert.same({}, r.errors)
        cache:close()
        assert.equal(0, c:stats().watches)
    end)

    it("equals the server again after a session expiry during which the tree changed", function()
        make({ { "/e", "" }, { "/e/a", "a0" }, { "/e/b", "b0" }, { "/e/b/x", "x0" },
               { "/e/b/y", "y0" }, { "/e/c", "c0" }, { "/e/c/k", "k0" }, { "/e/d", "d0" } })
        local cache = assert(c:cache("/e"))
        local r = recorder()
        cache:on_change(r.fn)
        local n = #r.events
        local sid = c:session_id()
        local changed = false
        -- The old session is gone when "lost" runs, the new one not yet
        -- connected: change the tree then (no watch of ours sees it).
        c:on_state(function(new)
            if new == "lost" and not changed then
                changed = true
                assert(other:set("/e/a", "a1"))
                assert(other:delete("/e/b/x"))
                assert(other:create("/e/c/new", "n1"))
                assert(other:set("/e/c/k", "k0"))     -- same data, new version
                zk.delete_tree(other, "/e/d")
            end
        end)
        assert.is_true(zk.expire_session(c))
        assert.is_true(changed)
        assert.is_truthy(zk.wait_until(function()
            return c:state() == "connected" and cache:get("/e/c/new") == "n1"
                and cache:get("/e/d") == nil and cache:get("/e/b/x") == nil
                and cache:get("/e/a") == "a1"
        end, 10, c))
        c:dispatch(0.3)                           -- nothing else may come
        assert.not_equal(sid, c:session_id())
        assert.is_true(same_tree(server_tree(other, "/e", math.huge), cache_tree(cache, "/e")))
        local t = r.types(n + 1)
        table.sort(t)
        assert.same({ "added /e/c/new", "removed /e/b/x", "removed /e/d",
                      "updated /e/a", "updated /e/c/k" }, t)
        assert.same({}, r.errors)
        -- the new session's watches work
        assert(other:set("/e/b/y", "y1"))
        assert.truthy(zk.wait_until(function() return cache:get("/e/b/y") == "y1" end, 5, c))
        cache:close()
    end)

    it("equals the server again after a connection loss in the same session", function()
        make({ { "/s", "" }, { "/s/a", "a0" }, { "/s/b", "b0" }, { "/s/b/x", "x0" } })
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)"))))
        local pc = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 6 }
        local cache = assert(pc:cache("/s"))
        local r = recorder()
        cache:on_change(r.fn)
        local n = #r.events
        local sid = pc:session_id()
        -- a change whose event may reach us just before the cut: its read then fails
        assert(other:set("/s/a", "a1"))
        proxy:blackhole()
        assert.truthy(zk.wait_until(function() return pc:state() == "suspended" end, 6, pc))
        assert(other:set("/s/a", "a2"))
        assert(other:create("/s/b/y", "y1"))
        assert(other:delete("/s/b/x"))
        assert(other:create("/s/c", "c1"))
        pc:dispatch(0.2)
        proxy:pass()
        assert.truthy(zk.wait_until(function()
            return pc:state() == "connected" and cache:get("/s/a") == "a2"
                and cache:get("/s/b/y") == "y1" and cache:get("/s/b/x") == nil
                and cache:get("/s/c") == "c1"
        end, 10, pc))
        pc:dispatch(0.2)
        assert.equal(sid, pc:session_id())
        assert.is_true(same_tree(server_tree(other, "/s", math.huge), cache_tree(cache, "/s")))
        -- a1 may show or fold into a2; nothing else, each once
        local t, seen_a = {}, 0
        for _, ty in ipairs(r.types(n + 1)) do
            if ty == "updated /s/a" then seen_a = seen_a + 1 else t[#t + 1] = ty end
        end
        table.sort(t)
        assert.same({ "added /s/b/y", "added /s/c", "removed /s/b/x" }, t)
        assert.is_true(seen_a == 1 or seen_a == 2)
        assert.same({}, r.errors)
        cache:close()
        assert.equal(0, pc:stats().watches)
        pc:close()
        proxy:stop()
    end)

    it("drops a reply older than what it holds (as from a lagging server)", function()
        make(TREE)
        local cache = assert(c:cache("/t"))
        local r = recorder()
        cache:on_change(r.fn)
        local n = #r.events
        local function older(st, field)
            local o = {}
            for k, v in pairs(st) do o[k] = v end
            o[field] = st[field] - 1
            return o
        end
        -- a data reply with an older mzxid, as a read's reply would come in
        local node = cache._nodes["/t/a"]
        local _, st = cache:get("/t/a")
        cache._inflight, node.dbusy = cache._inflight + 1, true
        cache:_data_reply(node, c:session_id(), false, "older", older(st, "mzxid"))
        assert.equal("A", (cache:get("/t/a")))
        -- a listing with an older pzxid that lacks a child
        local top = cache._nodes["/t"]
        local _, tst = c:children("/t")
        cache._inflight, top.cbusy = cache._inflight + 1, true
        cache:_children_reply(top, c:session_id(), false, { "b" }, older(tst, "pzxid"))
        assert.same({ "a", "b" }, cache:children("/t"))
        -- both were read again (after a sync): still the server's state, no event
        c:dispatch(0.2)
        assert.equal(n, #r.events)
        assert.is_true(same_tree(server_tree(other, "/t", math.huge), cache_tree(cache, "/t")))
        -- a newer one is taken
        assert(other:set("/t/a", "A2"))
        assert.truthy(zk.wait_until(function() return cache:get("/t/a") == "A2" end, 5, c))
        assert.same({ "updated /t/a" }, r.types(n + 1))
        cache:close()
    end)

    it("close() stops events and leaves no watch registered", function()
        make(TREE)
        local w0 = c:stats().watches
        local l0 = c:stats().listeners
        local cache = assert(c:cache("/t"))
        assert.equal(w0 + 6 + 6, c:stats().watches)     -- a data and a child watch per node
        local r = recorder()
        cache:on_change(r.fn)
        local n = #r.events
        assert.is_true(cache:close())
        assert.is_true(cache:close())                     -- idempotent
        assert.equal(w0, c:stats().watches)
        assert.equal(l0, c:stats().listeners)
        assert(other:set("/t/a", "after"))
        assert(other:create("/t/new"))
        c:dispatch(0.3)
        assert.equal(n, #r.events)
        assert.same({ nil, "closed" }, { cache:get("/t/a") })
        assert.same({ nil, "closed" }, { cache:children("/t") })
        assert.same({ nil, "closed" }, { cache:on_change(r.fn) })
        -- and a cache whose reads are still in flight
        local q = assert(c:cache("/t"))
        assert(other:create("/t/more"))
        q:close()
        c:dispatch(0.2)
        assert.equal(w0, c:stats().watches)
    end)

    it("logs an on_change callback that throws and goes on", function()
        local logged = {}
        local lc = zk.client { chroot = root, logger = function(level, msg)
            if level == "error" then logged[#logged + 1] = msg end
        end }
        make({ { "/f", "" } })
        local cache = assert(lc:cache("/f"))
        local good = recorder()
        cache:on_change(function() error("boom") end)
        cache:on_change(good.fn)
        assert(other:create("/f/x", "1"))
        assert.truthy(zk.wait_until(function() return cache:get("/f/x") == "1" end, 5, lc))
        assert(other:set("/f/x", "2"))
        assert.truthy(zk.wait_until(function() return cache:get("/f/x") == "2" end, 5, lc))
        assert.same({ "added /f", "initialized", "added /f/x", "updated /f/x" }, good.types())
        assert.is_true(#logged >= 4)
        assert.truthy(logged[1]:find("boom", 1, true))
        assert.truthy(logged[1]:find("on_change", 1, true))
        cache:close()
    end)

    it("keeps events in order when on_change itself waits on the client", function()
        make({ { "/w", "" }, { "/w/k", "0" } })
        local cache = assert(c:cache("/w"))
        local r = recorder()
        local depth, max_depth = 0, 0
        cache:on_change(function(ev)
            depth = depth + 1
            max_depth = math.max(max_depth, depth)
            r.fn(ev)
            if ev.path then
                c:exists(ev.path)       -- a round trip: replies and events come in meanwhile
            end
            depth = depth - 1
        end)
        local n = #r.events
        for i = 1, 30 do
            other:send("set", "/w/k", tostring(i))
            other:send("create", "/w/n" .. i, tostring(i))
        end
        assert(other:sync("/w"))
        assert.truthy(zk.wait_until(function()
            return cache:get("/w/k") == "30" and cache:get("/w/n30") == "30"
        end, 10, c))
        c:dispatch(0.2)
        assert.equal(1, max_depth)            -- never a call inside another
        assert.same({}, r.errors)
        assert.is_true(#r.events - n >= 31)
        assert.is_true(same_tree(server_tree(other, "/w", math.huge), cache_tree(cache, "/w")))
        cache:close()
    end)

    it("returns nil, err when the load fails or takes too long, leaving nothing behind", function()
        make(TREE)
        local w0, l0 = c:stats().watches, c:stats().listeners
        assert.same({ nil, "timeout" }, { c:cache("/t", { timeout = 0 }) })
        c:dispatch(0.2)
        assert.equal(w0, c:stats().watches)
        assert.equal(l0, c:stats().listeners)
        -- a root we may not read
        assert(other:create("/secret", "s", { acl = { { perms = "w", scheme = "world", id = "anyone" } } }))
        assert.same({ nil, "noauth" }, { c:cache("/secret") })
        -- a node inside we may not read: logged, the rest is mirrored, get() says why
        local logged = {}
        local lc = zk.client { chroot = root, logger = function(level, msg)
            if level == "error" then logged[#logged + 1] = msg end
        end }
        assert(other:create("/t/a/locked", "s",
                            { acl = { { perms = "w", scheme = "world", id = "anyone" } } }))
        local cache = assert(lc:cache("/t"))
        assert.same({ nil, "noauth" }, { cache:get("/t/a/locked") })
        assert.same({ "x", "y" }, cache:children("/t/a"))
        assert.equal("AY", (cache:get("/t/a/y")))
        assert.equal(1, #logged)
        assert.truthy(logged[1]:find("/t/a/locked", 1, true))
        cache:close()
        local closed = zk.client { chroot = root }
        closed:close()
        assert.same({ nil, "closed" }, { closed:cache("/t") })
    end)

    it("raises on bad arguments", function()
        make({ { "/b", "" }, { "/b/k", "" } })
        assert.has_error(function() c:cache() end)
        assert.has_error(function() c:cache("relative") end)
        assert.has_error(function() c:cache("/b/") end)
        assert.has_error(function() c:cache("/b", "opts") end)
        assert.has_error(function() c:cache("/b", { deep = 1 }) end)
        assert.has_error(function() c:cache("/b", { depth = -1 }) end)
        assert.has_error(function() c:cache("/b", { depth = 1.5 }) end)
        assert.has_error(function() c:cache("/b", { depth = "2" }) end)
        assert.has_error(function() c:cache("/b", { timeout = -1 }) end)
        assert.has_error(function() c:cache("/b", { timeout = "1" }) end)
        assert.has_error(function() c.cache({}, "/b") end)
        local cache = assert(c:cache("/b"))
        assert.has_error(function() cache:get() end)
        assert.has_error(function() cache:get("b/k") end)
        assert.has_error(function() cache:get("/bb") end)          -- beside, not inside
        assert.has_error(function() cache:get("/") end)
        assert.has_error(function() cache:children(42) end)
        assert.has_error(function() cache:on_change("fn") end)
        assert.has_error(function() cache.get({}, "/b") end)
        assert.has_error(function() cache.close(nil) end)
        assert.equal("", (cache:get("/b/k")))                       -- still fine
        cache:close()
        assert.has_error(function() cache:get("/elsewhere") end)   -- raises after close too
        assert.equal("function", type(c.cache))               -- client:cache()
    end)
end)


-- Inside nginx: each worker keeps a cache made in a timer; a request makes
-- and closes one of its own (its constructor waits on the ngx waiter).
local CACHE_APP = [==[
local zn = require "zkcoord.ngx"
local ROOT = "@ROOT@"
local _M = {}
local cache, cache_err

function _M.init_worker()
    zn.init_worker { servers = os.getenv("ZK_HOSTS"), session_timeout = 4, sock_dir = "/tmp" }
    ngx.timer.at(0, function(premature)
        if premature then return end
        local c, err = zn.client()
        if not c then cache_err = "no client: " .. tostring(err) return end
        cache, cache_err = c:cache(ROOT .. "/n")
    end)
end

function _M.get()
    if not cache then
        ngx.say(ngx.worker.pid(), " none ", tostring(cache_err))
        return
    end
    local data = cache:get(ROOT .. "/n/" .. ngx.var.arg_k)
    ngx.say(ngx.worker.pid(), " ", tostring(data), " ", #cache:children(ROOT .. "/n"))
end

function _M.own()
    local c = assert(zn.client())
    local mine, err = c:cache(ROOT .. "/n", { timeout = 5 })
    if not mine then
        ngx.say("error ", err)
        return
    end
    local n = #mine:children(ROOT .. "/n")
    mine:close()
    ngx.say("ok ", n, " ", c:stats().watches)
end

return _M
]==]

local CACHE_HTTP = [[
    init_worker_by_lua_block { require("app").init_worker() }
    exit_worker_by_lua_block { require("zkcoord.ngx").exit_worker() }
    server {
        listen 127.0.0.1:@PORT@ reuseport;
        location = /get { content_by_lua_block { require("app").get() } }
        location = /own { content_by_lua_block { require("app").own() } }
    }
]]

describe("cache in nginx #zk #ngx", function()
    local nginx = require "helpers.nginx"
    local root, n

    before_each(function()
        root = zk.new_root("cache-ngx")
        assert(zk.admin():create(root .. "/n"))
        assert(zk.admin():create(root .. "/n/k", "v1"))
    end)

    after_each(function()
        if n then n:destroy() end
        zk.delete_tree(zk.admin(), root)
    end)

    -- Polls /get?k=<k> until every worker reports `want` (and `kids` children).
    local function all_workers_see(k, want, kids)
        local seen = {}
        return zk.wait_until(function()
            local status, body = n:get("/get?k=" .. k, 2)
            if status == 200 then
                local pid, v, nk = body:match("^(%d+) (%S+) (%d+)")
                if v == want and tonumber(nk) == kids then seen[tonumber(pid)] = true end
            end
            for _, pid in ipairs(n:worker_pids()) do
                if not seen[pid] then return false end
            end
            return true
        end, 15)
    end

    it("every worker's cache follows the server; a request's own cache closes clean", function()
        local err
        n, err = nginx.start { workers = 2, env = { ZK_HOSTS = zk.hosts() },
                               vars = { ROOT = root }, lua_modules = { app = CACHE_APP },
                               http = CACHE_HTTP }
        assert(n, err)
        assert.truthy(all_workers_see("k", "v1", 1), n:log_tail())
        assert(zk.admin():set(root .. "/n/k", "v2"))
        assert(zk.admin():create(root .. "/n/k2", "x"))
        assert.truthy(all_workers_see("k", "v2", 2), n:log_tail())
        for _ = 1, 10 do
            local status, body = n:get("/own", 5)
            assert.equal(200, status)
            -- the worker's own cache keeps its 3 nodes' 6 watches; the request's are gone
            assert.equal("ok 2 6", body:match("^(.-)%s*$"))
        end
        assert(zk.admin():delete(root .. "/n/k2"))
        assert.truthy(all_workers_see("k", "v2", 1), n:log_tail())
        local log = n:error_log()
        assert.is_falsy(log:find("callback failed", 1, true), log)
        assert.is_falsy(log:find("[error]", 1, true), log)
    end)
end)
