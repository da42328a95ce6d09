-- layout = "kazoo" against a real server and REAL kazoo (Debian's
-- python3-kazoo, spec/peers/kazoo_lock.py): for the lock, both sides of
-- the rwlock, the semaphore and the election, a kazoo process and this one
-- contend on one path, kazoo first, then us, then kazoo again; each side
-- logs when it entered and left (CLOCK_MONOTONIC on both) and no two holds
-- overlap. Each side sees the other as a contender. The group and kazoo's
-- ShallowParty list each other's members.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local tcpproxy = require "helpers.tcpproxy"

local WAIT = 30    -- seconds: the peer's own bound (kazoo_lock.py's WAIT)

-- Is `name` named as kazoo names its nodes of `node_name` ("__lock__",
-- "__rlock__")? kazoo's Lock: prefix = uuid.uuid4().hex + _NODE_NAME (32
-- lowercase hex digits), created sequential: 10 digits after it.
local function kazoo_named(name, node_name)
    local pattern = "^" .. ("[0-9a-f]"):rep(32) .. (node_name:gsub("%p", "%%%0"))
                    .. ("%d"):rep(10) .. "$"
    return name:match(pattern) ~= nil
end

local function base(path)
    return path:match("[^/]+$")
end

describe("layout = \"kazoo\" #zk #kazoo #nosan", function()
    local root, c

    before_each(function()
        root = zk.new_root("kazoo_layout")
        c = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    -- Starts kazoo_lock.py on `path` (under our root) for `kind`.
    -- Not under ASan's LD_PRELOAD: Python is not built for it.
    local function kazoo(path, kind, max_leases)
        local log = ("%s/kazoo-layout-%s-%d.log"):format(zk.tmpdir(), kind, proc.getpid())
        os.remove(log)
        local argv = { "/usr/bin/python3", "spec/peers/kazoo_lock.py", zk.hosts() .. root, path,
                       kind, tostring(max_leases or 1) }
        local pid = assert(proc.spawn(argv, { stdout = log, stderr = log,
                                              env = { LD_PRELOAD = "" } }))
        return { pid = pid, log = log }
    end

    -- What kazoo's Lock(path).contenders() lists, one a line
    -- (spec/peers/kazoo_lease.py's "contenders").
    local function kazoo_contenders(path)
        local log = ("%s/kazoo-layout-contenders-%d.log"):format(zk.tmpdir(), proc.getpid())
        os.remove(log)
        local argv = { "/usr/bin/python3", "spec/peers/kazoo_lease.py", zk.hosts() .. root, path,
                       "contenders" }
        local pid = assert(proc.spawn(argv, { stdout = log, stderr = log,
                                              env = { LD_PRELOAD = "" } }))
        assert.truthy(proc.wait_exit(pid, WAIT), "kazoo did not finish")
        return proc.read_file(log) or ""
    end

    local function output(k)
        return proc.read_file(k.log) or ""
    end

    -- Waits until the peer printed `word` (a line starting with it).
    local function wait_for(k, word)
        local seen = zk.wait_until(function()
            return output(k):find("\n" .. word, 1, true) or output(k):sub(1, #word) == word
        end, WAIT, c)
        assert.truthy(seen, "kazoo did not print '" .. word .. "': " .. output(k))
    end

    -- The peer's holds { enter =, exit = } and what it saw, once it ended.
    local function finish(k)
        assert.truthy(proc.wait_exit(k.pid, WAIT + 10), "kazoo did not finish")
        local out = output(k)
        assert.truthy(out:find("\ndone\n", 1, true), out)
        local holds, contenders = {}, nil
        for word, rest in out:gmatch("(%a+) ([^\n]*)") do
            if word == "enter" then
                holds[#holds + 1] = { enter = tonumber(rest) }
            elseif word == "exit" then
                holds[#holds].exit = tonumber(rest)
            elseif word == "contenders" then
                contenders = rest
            end
        end
        assert.equal(2, #holds, out)
        return holds, contenders
    end

    -- kazoo held, then we held (from `ours.enter` to `ours.exit`), then
    -- kazoo again: three holds, none overlapping.
    local function assert_turns(holds, ours)
        assert.is_true(holds[1].exit <= ours.enter, "we entered before kazoo left")
        assert.is_true(ours.exit <= holds[2].enter, "kazoo entered before we left")
    end

    -- Holds `acquire`'s hold while kazoo contends: waits until `count()`
    -- says kazoo is in line, then `release()`. Returns our hold's times.
    local function hold_until_contended(count, release)
        local ours = { enter = proc.now() }
        assert.truthy(zk.wait_until(function() return count() == 2 end, WAIT, c),
                      "kazoo never joined the line")
        ours.exit = proc.now()
        release()
        return ours
    end

    it("lock: a kazoo Lock and ours exclude each other, and see each other", function()
        local k = kazoo("/lock", "lock")
        wait_for(k, "enter")
        local lock = c:lock("/lock", { layout = "kazoo", data = "lua" })
        assert.is_true(lock:acquire(WAIT))
        local node = lock:node()
        -- the fencing token is our node's czxid, as on Curator's layout
        local token = lock:token()
        assert.equal(assert(c:exists(lock:node())).czxid, token)
        local seen
        local ours = hold_until_contended(function()
            seen = lock:contenders()
            return seen and #seen
        end, function() assert.is_true(lock:release()) end)
        local holds, contenders = finish(k)
        assert_turns(holds, ours)
        -- kazoo's contenders(): both identifiers, the holder first
        assert.equal('["kazoo", "lua"]', contenders)
        -- ours: our node first, then kazoo's; both named as kazoo names
        -- its own (before: ours "_c_<uuid>-__lock__<seq>")
        assert.is_true(kazoo_named(seen[1].name, "__lock__"), seen[1].name)
        assert.equal(base(node), seen[1].name)
        assert.is_true(kazoo_named(seen[2].name, "__lock__"), seen[2].name)
    end)

    it("rwlock: our read lock waits for a kazoo WriteLock, and holds it off", function()
        local k = kazoo("/rw", "write")
        wait_for(k, "enter")
        local r = c:rwlock("/rw", { layout = "kazoo", data = "lua" }):read_lock()
        assert.is_true(r:acquire(WAIT))
        assert.is_true(kazoo_named(base(r:node()), "__rlock__"), r:node())
        local seen
        local ours = hold_until_contended(function()
            seen = r:contenders()
            return seen and #seen
        end, function() assert.is_true(r:release()) end)
        local holds, contenders = finish(k)
        assert_turns(holds, ours)
        assert.equal('["kazoo", "lua"]', contenders)
        assert.equal("__rlock__", seen[1].marker)
        assert.equal("__lock__", seen[2].marker)
        assert.is_true(kazoo_named(seen[2].name, "__lock__"), seen[2].name)
    end)

    it("rwlock: our write lock waits for a kazoo ReadLock, and holds it off", function()
        local k = kazoo("/rw", "read")
        wait_for(k, "enter")
        local w = c:rwlock("/rw", { layout = "kazoo", data = "lua" }):write_lock()
        assert.is_true(w:acquire(WAIT))
        assert.is_true(kazoo_named(base(w:node()), "__lock__"), w:node())
        local seen
        local ours = hold_until_contended(function()
            seen = w:contenders()
            return seen and #seen
        end, function() assert.is_true(w:release()) end)
        local holds, contenders = finish(k)
        assert_turns(holds, ours)
        assert.equal('["kazoo", "lua"]', contenders)
        assert.equal("__lock__", seen[1].marker)
        assert.equal("__rlock__", seen[2].marker)
        assert.is_true(kazoo_named(seen[2].name, "__rlock__"), seen[2].name)
    end)

    it("rwlock: our read lock and a kazoo ReadLock are held at once", function()
        local k = kazoo("/rw", "read")
        wait_for(k, "enter")
        local r = c:rwlock("/rw", { layout = "kazoo", data = "lua" }):read_lock()
        -- kazoo reads (it leaves once it sees our node): no wait for us
        assert.is_true(r:acquire(0))
        local entered = proc.now()
        local holds, contenders = finish(k)
        assert.is_true(entered < holds[1].exit, "we waited for kazoo's reader")
        -- kazoo's second read did not wait for ours either
        assert.is_true(r:held())
        assert.equal('["kazoo", "lua"]', contenders)
        assert.is_true(r:release())
    end)

    it("semaphore: kazoo's Semaphore and ours share the leases and the max", function()
        local k = kazoo("/sem", "semaphore", 1)
        wait_for(k, "enter")
        -- kazoo wrote the max into /sem: another max is refused, as kazoo does
        local other = c:semaphore("/sem", 2, { layout = "kazoo" })
        local no, err = other:acquire(0)
        assert.is_nil(no)
        assert.equal("invalid", err)
        local sem = c:semaphore("/sem", 1, { layout = "kazoo", data = "lua" })
        local lease = assert(sem:acquire(WAIT))
        -- kazoo's name: <path>/<uuid hex>
        assert.matches("^/sem/%x+$", lease:node())
        assert.equal(32, #lease:node():match("[^/]+$"))
        assert.equal(1, sem:leases())
        local seen
        local ours = hold_until_contended(function()
            seen = sem:participants()
            return seen and #seen
        end, function() assert.is_true(lease:release()) end)
        local holds, contenders = finish(k)
        assert_turns(holds, ours)
        -- kazoo's lease_holders() saw its own lease; we saw kazoo queue for the next
        assert.equal('["kazoo"]', contenders)
        -- (kazoo 2.8's Semaphore hands its lock the identifier already
        -- encoded: its lock node's data is Python's str() of the bytes)
        assert.same({ "lua", "b'kazoo'" }, seen)
        assert.equal("1", (c:get("/sem")))
    end)

    it("semaphore: a kazoo lease is counted, tried once, and lost with the session", function()
        local other = zk.client { chroot = root }
        local mine = c:semaphore("/sem", 1, { layout = "kazoo", data = "a" })
        local theirs = other:semaphore("/sem", 1, { layout = "kazoo", data = "b" })
        local lease = assert(mine:acquire(WAIT))
        local lost = {}
        lease:on_lost(function(reason) lost[#lost + 1] = reason end)
        -- full: a try-once answers at once, and leaves no node behind
        assert.same({ nil, "timeout" }, { theirs:acquire(0) })
        assert.equal(1, theirs:leases())
        assert.same({ "a" }, theirs:participants())
        -- (its lock node's delete is not waited for: list in its session, after it)
        assert.same({}, (other:children("/sem-__lock__")))
        -- our session ends: the lease goes with it, and the waiter gets it
        assert.truthy(zk.expire_session(c))
        assert.is_true(zk.wait_until(function() return #lost == 1 end, WAIT, c))
        -- "deleted" if the server removed the node while our connection was
        -- up (semaphore_spec says the same of Curator's layout)
        assert.truthy(lost[1] == "sessionexpired" or lost[1] == "deleted", lost[1])
        assert.is_false(lease:held())
        local next_lease = assert(theirs:acquire(WAIT))
        assert.is_true(next_lease:held())
        assert.same({ nil, "lost" }, { lease:release() })
        assert.is_true(next_lease:release())
        assert.same({}, (other:children("/sem")))
    end)

    -- A create whose reply was lost made our lease: the next look finds it
    -- by its name, counts it as ours (not as a holder we wait for) and
    -- adopts it, being our session's; another session's never.
    it("semaphore: a kazoo lease made by a lost create is found and adopted", function()
        local kazoo_lease = require "zkcoord.layout.kazoo_lease"
        assert(c:create("/sem", "1"))
        local q = kazoo_lease.new(c, "/sem", 1, "a")
        assert(c:create(q.node_path, "a", { ephemeral = true }))    -- as the lost create did
        assert.is_true(q:enter(WAIT))
        assert.is_true(q:is_through())
        assert.equal(q.node_path, q:node())
        assert.is_true(q:leave())
        assert.same({}, (c:children("/sem")))
        -- the same name made by another session is not ours: full, we wait
        local other = zk.client { chroot = root }
        local q2 = kazoo_lease.new(c, "/sem", 1, "a")
        assert(other:create(q2.node_path, "b", { ephemeral = true }))
        assert.same({ nil, "timeout" }, { q2:enter(0) })
        assert.is_false(q2:is_through())
        assert.equal("b", (c:get(q2.node_path)))
    end)

    it("election: kazoo's Election and ours elect one leader at a time", function()
        local k = kazoo("/elect", "election")
        wait_for(k, "enter")
        local e = c:election("/elect", { layout = "kazoo", id = "lua" })
        -- kazoo leads; its node is ours to see
        assert.same({ "kazoo" }, e:participants())
        assert.equal("kazoo", e:leader())
        assert.is_true(e:campaign(WAIT))
        assert.is_true(kazoo_named(base(e:node()), "__lock__"), e:node())
        local token = e:token()
        assert.equal(assert(c:exists(e:node())).czxid, token)
        local seen
        local ours = hold_until_contended(function()
            seen = e:participants()
            return seen and #seen
        end, function() e:resign() end)
        local holds, contenders = finish(k)
        assert_turns(holds, ours)
        assert.equal('["kazoo", "lua"]', contenders)
        assert.same({ "lua", "kazoo" }, seen)
    end)

    it("rwlock, semaphore: a downgrade node and the semaphore's lock node have kazoo's names",
       function()
        -- (before: "_c_<uuid>-downgrade-__rlock__<seq>", "_c_<uuid>-__lock__<seq>")
        local rw = c:rwlock("/rw", { layout = "kazoo" })
        assert.is_true(rw:write_lock():acquire(WAIT))
        assert.is_true(rw:read_lock():acquire(WAIT))    -- a downgrade: a reader to kazoo
        assert.is_true(kazoo_named(base(rw:read_lock():node()), "downgrade-__rlock__"),
                       rw:read_lock():node())
        assert.is_true(rw:write_lock():release())
        assert.is_true(rw:read_lock():release())
        -- a waiter queues on the semaphore's lock, <path>-__lock__
        local held = assert(c:semaphore("/sem", 1, { layout = "kazoo" }):acquire(WAIT))
        local other = zk.client { chroot = root }
        local got, gerr
        other:spawn(function()
            got, gerr = other:semaphore("/sem", 1, { layout = "kazoo" }):acquire(WAIT)
        end)
        local names
        assert.truthy(zk.wait_until(function()
            other:run(0.02)
            names = c:children("/sem-__lock__")
            return names and #names == 1
        end, WAIT), "the waiter did not queue on the semaphore's lock")
        assert.is_true(kazoo_named(names[1], "__lock__"), names[1])
        assert.is_true(held:release())
        assert.truthy(zk.wait_until(function()
            other:run(0.02)
            return got or gerr
        end, WAIT), "the waiter did not get the lease")
        assert.truthy(got, tostring(gerr))
        assert.is_true(got:release())
    end)

    -- A client through a proxy (stopped when the test ends) whose replies
    -- are dropped from now on: the requests reach the server.
    local function replies_dropped(opts)
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)$"))))
        finally(function() proxy:stop() end)
        local o = { servers = proxy.hosts, chroot = root }
        for k, v in pairs(opts) do o[k] = v end
        local a = zk.client(o)
        assert(proxy:drop_replies())
        return a, proxy
    end

    it("lock: a create whose reply was lost is found by kazoo's prefix, not made twice",
       function()
        -- The connection drops with the create's reply missing (no reply
        -- for 2/3 of the session timeout); the fault ends then, and in the
        -- same session the lock finds its node by the name it sent,
        -- "<uuid hex>__lock__", as kazoo's _find_node does.
        assert(c:create("/lost"))
        local a, proxy = replies_dropped { session_timeout = 4, request_timeout = 8 }
        local states = {}
        a:on_state(function(new)
            states[#states + 1] = new
            if new == "suspended" then assert(proxy:pass()) end
        end)
        local sid = a:session_id()
        local lock = a:lock("/lost", { layout = "kazoo", data = "lua" })
        assert.is_true(lock:acquire(WAIT))
        assert.equal("suspended", states[1])    -- the reply was lost indeed
        assert.equal(sid, a:session_id())
        local names = assert(c:children("/lost"))
        assert.equal(1, #names, table.concat(names, " "))
        assert.equal(base(lock:node()), names[1])
        assert.is_true(kazoo_named(names[1], "__lock__"), names[1])
        assert.equal(sid, assert(c:exists(lock:node())).ephemeral_owner)
        -- kazoo's Lock.contenders() sees one contender, ours
        assert.equal("lua\n", kazoo_contenders("/lost"))
        assert.is_true(lock:release())
        assert.same({}, (a:children("/lost")))
    end)

    it("lock: a try-once whose create reply was lost deletes its kazoo-named node", function()
        -- enter(0) does not wait for the connection: what the create made
        -- is found by its prefix once connected again in the same session
        -- (which outlives the fault: its ephemeral node does not go with
        -- it), and deleted
        assert(c:create("/once"))
        local a, proxy = replies_dropped { session_timeout = 6, request_timeout = 0.3 }
        local sid = a:session_id()
        local lock = a:lock("/once", { layout = "kazoo", data = "lua" })
        local ok, err = lock:acquire(0)
        assert.is_nil(ok)
        assert.truthy(err == "unknown" or err == "connectionloss" or err == "timeout", err)
        -- the create reached the server: kazoo's name
        local names
        assert.truthy(zk.wait_until(function()
            names = c:children("/once")
            return names and #names == 1
        end, WAIT), "the create did not reach the server")
        assert.is_true(kazoo_named(names[1], "__lock__"), names[1])
        assert(proxy:pass())
        assert.truthy(zk.wait_until(function()
            return #assert(c:children("/once")) == 0
        end, WAIT, a), "the node of the lost create stayed")
        assert.equal(sid, a:session_id())
    end)

    it("group: kazoo's ShallowParty and ours list each other", function()
        local k = kazoo("/party", "party")
        wait_for(k, "enter")
        local g = c:group("/party", { id = "lua", data = "lua-data", layout = "kazoo" })
        -- before we join (kazoo leaves once it sees us): kazoo's id as data
        assert.same({ kazoo = "kazoo" }, g:members())
        assert.is_true(g:join(WAIT))
        assert.truthy(proc.wait_exit(k.pid, WAIT + 10), "kazoo did not finish")
        assert.matches('\ncontenders %["kazoo", "lua"%]\n', output(k))
        -- kazoo left: our listing says so
        assert.same({ lua = "lua-data" }, g:members())
        assert.matches("^/party/%x+%-lua$", g.node_path)
        assert.equal(32, #g.node_path:match("/(%x+)%-lua$"))
        g:close()
    end)

    it("an unknown layout raises; curator stays the default", function()
        for _, make in ipairs({
            function(o) return c:lock("/x", o) end,
            function(o) return c:rwlock("/x", o) end,
            function(o) return c:election("/x", o) end,
            function(o) return c:semaphore("/x", 1, o) end,
            function(o) return c:group("/x", "id", nil, o) end,
        }) do
            assert.has_error(function() make { layout = "zk" } end)
            assert.has_error(function() make { layout = 1 } end)
        end
        assert.has_error(function() c:lock("/x", { layout = "zk" }) end,
                         "bad argument #2 to 'lock' (layout must be \"curator\" or \"kazoo\", "
                         .. "got \"zk\")")
        assert.has_error(function() c:semaphore("/x", 1, { layout = true }) end,
                         "bad argument #3 to 'semaphore' (layout must be \"curator\" or "
                         .. "\"kazoo\", got boolean)")
        local lock = c:lock("/x", { layout = "curator" })
        assert.is_true(lock:acquire(WAIT))
        assert.matches("%-lock%-%d+$", lock:node())
        lock:release()
    end)
end)
