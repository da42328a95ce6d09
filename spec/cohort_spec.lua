-- The lock cohort (client:lock(path, { cohort = true })): owners of one
-- process share one node and hand the lock over locally, within a bound.
local zk = require "helpers.zk"
local zkcoord = require "zkcoord"
local cohort = require "zkcoord.cohort"
local lockmod = require "zkcoord.lock"
local line = require "zkcoord.line"
local contract = require "zkcoord.contract"

-- Is token pair (z, n) above (z0, n0)? (zkcoord.cohort's order)
local function above(z, n, z0, n0)
    return z > z0 or (z == z0 and n > n0)
end

-- Requests the server received on `client`'s connection (`cons`).
local function server_recved(client)
    local host, port = zk.hosts():match("([^,:]+):(%d+)")
    local text = assert(zk.proc.tcp_probe(host, tonumber(port), "cons", 5))
    local sid = "0x" .. client:session_id():lower():gsub("^0+", "")
    for l in text:gmatch("[^\n]+") do
        if l:lower():find("sid=" .. sid, 1, true) then
            return tonumber(l:match("recved=(%d+)"))
        end
    end
    error("session " .. sid .. " not in cons:\n" .. text)
end

-- A contender process: 8 coroutines, `rounds` grants each, on one cohort
-- lock; every holder checks its token pair against the fence znode and
-- writes its own with the version it read (a check-and-set: another
-- holder writing in between, or a stale token, is a failure).
local CONTENDER = [[
local path, rounds, out = ...
rounds = tonumber(rounds)
local zkcoord = require "zkcoord"
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 10 })
-- the count bound governs (a loaded machine makes 2 round trips slow)
local lock = c:lock(path .. "/l", { cohort = true, cohort_handoffs = 4, cohort_time = 1 })
local grants, local_grants, err = 0, 0, nil
for _ = 1, 8 do
    c:spawn(function()
        for _ = 1, rounds do
            local ok, e = lock:acquire(60)
            if not ok then err = err or ("acquire: " .. tostring(e)) return end
            local z, n = lock:token()
            if n > 0 then local_grants = local_grants + 1 end
            local data, stat = c:get(path .. "/fence")
            local z0, n0 = data:match("^(%d+) (%d+)$")
            z0, n0 = tonumber(z0), tonumber(n0)
            if not (z > z0 or (z == z0 and n > n0)) then
                err = err or ("stale token %d %d after %d %d"):format(z, n, z0, n0)
            end
            local ok2, e2 = c:set(path .. "/fence", ("%d %d"):format(z, n), stat.version)
            if not ok2 then err = err or ("fence set: " .. tostring(e2)) end
            grants = grants + 1
            assert(lock:release())
        end
    end)
end
c:run(120)
local f = assert(io.open(out, "w"))
f:write(("%d %d %s\n"):format(grants, local_grants, err or "ok"))
f:close()
c:close()
]]

-- A remote waiter (its own process): 5 acquires while the cohort is busy,
-- each "requested granted" in proc.now() time (the system's monotonic clock).
local REMOTE = [[
local path, out = ...
local zkcoord = require "zkcoord"
local proc = require "helpers.proc"
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 10 })
local lock = c:lock(path)
local lines = {}
proc.sleep(0.3)
assert(lock:acquire(30))     -- warm up (modules, JIT) before measuring
assert(lock:release())
for _ = 1, 5 do
    local t0 = proc.now()
    assert(lock:acquire(30))
    lines[#lines + 1] = ("%.6f %.6f\n"):format(t0, proc.now())
    assert(lock:release())
    proc.sleep(0.05)
end
c:close()
local f = assert(io.open(out, "w"))
f:write(table.concat(lines))
f:close()
]]


describe("lock cohort #zk", function()
    local root, c

    before_each(function()
        root = zk.new_root("cohort")
        c = zk.client { chroot = root, session_timeout = 10 }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("keeps mutual exclusion and strictly increasing tokens across 3 processes x 8 coroutines",
       function()
        assert(zk.admin():create(root .. "/fence", "0 0"))
        local rounds, pids, outs = 15, {}, {}
        for i = 1, 3 do
            outs[i] = zk.tmpdir() .. ("/cohort-%d-%d.out"):format(zk.proc.getpid(), i)
            os.remove(outs[i])
            pids[i] = assert(zk.spawn_lua(CONTENDER, { root, rounds, outs[i] },
                                          outs[i] .. ".log"))
        end
        local total, locals = 0, 0
        for i = 1, 3 do
            assert.is_true(zk.proc.wait_exit(pids[i], 120))
            local text = assert(zk.proc.read_file(outs[i]), zk.proc.read_file(outs[i] .. ".log"))
            local g, l, verdict = text:match("^(%d+) (%d+) (.-)\n")
            assert.equal("ok", verdict)
            total, locals = total + tonumber(g), locals + tonumber(l)
        end
        assert.equal(3 * 8 * rounds, total)
        -- The fence saw every grant, local ones included, in token order.
        local _, stat = zk.admin():get(root .. "/fence")
        assert.equal(total, stat.version)
        assert.is_true(locals > 0, "no local handoff happened")
        assert.same({}, (zk.admin():children(root .. "/l")))
    end)

    it("hands over locally without a request to the server", function()
        local lock = c:lock("/l", { cohort = true, cohort_handoffs = 100000, cohort_time = 60 })
        local gate = c:waiter():event()
        local grants, tokens = 0, {}
        -- The first holder waits until all others queued: from then on
        -- every grant is a local handoff.
        c:spawn(function()
            assert(lock:acquire(10))
            tokens[#tokens + 1] = { lock:token() }
            gate:wait(10)
            grants = grants + 1
            assert(lock:release())
        end)
        for _ = 1, 15 do
            c:spawn(function()
                for _ = 1, 20 do
                    assert(lock:acquire(10))
                    grants = grants + 1
                    tokens[#tokens + 1] = { lock:token() }
                    assert(lock:release())
                end
            end)
        end
        local before
        c:spawn(function()
            c:waiter():sleep(0.2)      -- everyone queued behind the holder
            before = server_recved(c)
            gate:set()
        end)
        assert.is_true(c:run(30))
        local after = server_recved(c)
        assert.truthy(zk.wait_until(function()
            return #assert(zk.admin():children(root .. "/l")) == 0
        end))
        assert.equal(1 + 15 * 20, grants)
        for i = 2, #tokens do
            assert.is_true(above(tokens[i][1], tokens[i][2], tokens[i - 1][1], tokens[i - 1][2]))
        end
        assert.equal(tokens[1][1], tokens[#tokens][1])   -- one node for all
        -- 300 grants: the delete of the one node, the watch on the line
        -- and on the node, maybe a ping. Without the cohort: 900 and more.
        assert.is_true(after - before <= 6, "requests: " .. (after - before))
        local st = zk.admin():exists(root .. "/l")
        assert.equal(2, st.cversion)     -- one create, one delete under the lock
    end)

    it("passes a node on at most cohort_handoffs times while a remote waiter is in line",
       function()
        local K = 3
        local lock = c:lock("/l", { cohort = true, cohort_handoffs = K, cohort_time = 60 })
        local first = zk.client { chroot = root }:lock("/l", { owner = "first" })
        assert(first:acquire(5))      -- the line: first, then our node ...
        local grants, at_block = {}, nil
        for _ = 1, 8 do
            c:spawn(function()
                assert(lock:acquire(20))
                grants[#grants + 1] = { lock:token() }
                c:waiter():sleep(0.002)
                assert(lock:release())
            end)
        end
        c:spawn(function()
            c:waiter():sleep(0.2)
            -- ... then a remote waiter's node (one that stays until we delete it)
            local waiter = assert(zk.admin():create(root .. "/l/_c_" .. zkcoord.line.uuid()
                                                    .. "-lock-", "", { sequential = true,
                                                                       ephemeral = true }))
            assert(first:release())
            c:waiter():sleep(0.3)
            at_block = #grants
            assert(zk.admin():delete(waiter))
        end)
        assert.is_true(c:run(30))
        assert.equal(K + 1, at_block)        -- our node went after K local handoffs
        assert.equal(8, #grants)
        for i = 1, K + 1 do
            assert.same({ grants[1][1], i - 1 }, grants[i])
        end
        assert.is_true(grants[K + 2][1] > grants[1][1])   -- a new node, behind the waiter
    end)

    it("serves a remote process within a short wait while local owners keep wanting the lock",
       function()
        local lock = c:lock("/l", { cohort = true })   -- default bounds: 16, 0.01 s
        local out = zk.tmpdir() .. ("/cohort-remote-%d.out"):format(zk.proc.getpid())
        os.remove(out)
        local pid = assert(zk.spawn_lua(REMOTE, { root .. "/l", out }, out .. ".log"))
        local grant_times = {}
        for _ = 1, 8 do
            c:spawn(function()
                while zk.proc.alive(pid) do
                    assert(lock:acquire(10))
                    grant_times[#grant_times + 1] = zk.proc.now()
                    c:waiter():sleep(0.001)
                    assert(lock:release())
                end
            end)
        end
        assert.is_true(c:run(60))
        local text = assert(zk.proc.read_file(out), zk.proc.read_file(out .. ".log"))
        local waits, during = 0, 0
        for t0, t1 in text:gmatch("(%S+) (%S+)\n") do
            t0, t1 = tonumber(t0), tonumber(t1)
            waits = waits + 1
            local n = 0
            for _, t in ipairs(grant_times) do
                if t > t0 and t < t1 then
                    n = n + 1
                end
            end
            -- Without a bound the remote would wait until the local owners
            -- stop, which they do only when it is done: its acquire(30).
            assert.is_true(t1 - t0 < zk.SESSION_TIMEOUT / 2,
                           ("remote waited %.3f s, %d local grants"):format(t1 - t0, n))
            during = during + n
        end
        assert.equal(5, waits)
        assert.is_true(during > 0, "no local owner got the lock while the remote waited")
    end)

    it("tells the holder of a lost node, and never hands that node to a local waiter", function()
        local lock = c:lock("/l", { cohort = true })
        local lost, released, granted = {}, nil, {}
        lock:on_lost(function(reason, owner) lost[#lost + 1] = { reason, owner } end)
        local holder_co, lost_czxid
        c:spawn(function()
            holder_co = coroutine.running()
            assert(lock:acquire(10))
            lost_czxid = lock:token()
            while #lost == 0 and not contract.is_closed(c) do
                c:waiter():sleep(0.02)
            end
            assert.is_false(lock:held())
            released = { lock:release() }
        end)
        for i = 1, 3 do
            c:spawn(function()
                c:waiter():sleep(0.05)
                local ok, err = lock:acquire(30)
                assert(ok, err)
                local z, n = lock:token()
                granted[#granted + 1] = { i = i, z = z, n = n, serial = contract.serial(c) }
                assert(lock:release())
            end)
        end
        c:spawn(function()
            c:waiter():sleep(0.3)       -- the waiters queued locally
            local sid, pw = c:session_id(), c:session_password()
            while #lost == 0 do
                local o = zkcoord.connect { servers = zk.hosts(), session_id = sid,
                                            session_password = pw, connect_timeout = 2,
                                            session_timeout = 10, reconnect = false }
                if o then
                    o:close()
                end
                c:waiter():sleep(0.5)
            end
        end)
        assert.is_true(c:run(60))
        assert.equal(1, #lost)
        -- "deleted" when the server removed the node while our connection
        -- was still up (the session was closed under us), as lock_spec says
        assert.truthy(lost[1][1] == "sessionexpired" or lost[1][1] == "deleted", lost[1][1])
        assert.equal(holder_co, lost[1][2])
        assert.same({ nil, "lost" }, released)
        assert.equal(3, #granted)
        for _, g in ipairs(granted) do
            assert.is_true(g.z > lost_czxid, "a waiter was handed the lost node")
        end
        for k = 2, 3 do
            assert.is_true(above(granted[k].z, granted[k].n, granted[k - 1].z, granted[k - 1].n))
        end
    end)

    it("frees the node of a holder that learns of its loss only by release()", function()
        local lock = c:lock("/l", { cohort = true })    -- no on_lost, no local waiter
        assert(lock:acquire(5))
        local z0 = lock:token()
        assert.is_true(zk.expire_session(c))
        assert.same({ nil, "lost" }, { lock:release() })
        -- The cohort let the node go at that release: a try-once gets in,
        -- once the new session is there (before, it answers connectionloss:
        -- seen under load)
        assert(c:wait_connected(10))
        assert.same({ true }, { lock:acquire(0) })
        assert.is_true(lock:token() > z0)
        assert(lock:release())
    end)

    it("watches the node for an on_lost registered after acquire", function()
        local lock = c:lock("/l", { cohort = true })
        assert(lock:acquire(5))
        local lost
        lock:on_lost(function(reason) lost = reason end)
        assert(zk.admin():delete(root .. lock:node()))
        assert.truthy(zk.wait_until(function() return lost end, 10, c))
        assert.equal("deleted", lost)
        assert.same({ nil, "lost" }, { lock:release() })
    end)

    it("tells the current local holder of a revocation request, and gives that node up",
       function()
        local other = zk.client { chroot = root, session_timeout = 10 }
        local names = { "a", "b", "c" }
        local locks, done, got, asked = {}, {}, {}, {}
        for i, o in ipairs(names) do
            locks[o] = c:lock("/rv", { owner = o, cohort = true, cohort_handoffs = 100,
                                       cohort_time = 60 })
            locks[o]:on_revoke(function(owner, node) asked[#asked + 1] = { o, owner, node } end)
            done[o] = c:waiter():event()
            c:spawn(function()
                c:waiter():sleep(0.1 * (i - 1))     -- a holds, then b and c queue locally
                assert(locks[o]:acquire(10))
                local z, n = locks[o]:token()
                got[o] = { node = locks[o]:node(), z = z, n = n }
                done[o]:wait(10)
                assert(locks[o]:release())
            end)
        end
        local function wait_for(f)
            local deadline = zk.proc.now() + 10
            while not f() and zk.proc.now() < deadline do
                c:waiter():sleep(0.01)
            end
            assert.truthy(f())
        end
        local checked, failure
        c:spawn(function()
            -- (a failed assert in a spawned coroutine is only logged)
            checked, failure = pcall(function()
                c:waiter():sleep(0.4)
                done.a:set()                              -- a local handoff to b
                wait_for(function() return got.b end)
                assert.same({ got.a.node, 1 }, { got.b.node, got.b.n })
                assert(lockmod.revoke(other, got.b.node))
                wait_for(function() return #asked > 0 end)
                assert.same({ { "b", "b", got.b.node } }, asked)   -- b's, not a's
                assert.is_true(locks.b:held())            -- releasing is b's decision
                done.b:set()
                -- The revoked node is not passed on: c joins the line again.
                wait_for(function() return got.c end)
                assert.not_equal(got.b.node, got.c.node)
                assert.same(0, got.c.n)
                assert.is_true(got.c.z > got.b.z)
                c:sync("/rv")
                assert.equal(1, #asked)
                done.c:set()
            end)
        end)
        assert.is_true(c:run(30))
        assert.is_true(checked, failure)
        assert.truthy(zk.wait_until(function()      -- a release does not wait for its delete
            return #assert(zk.admin():children(root .. "/rv")) == 0
        end))
    end)

    it("tells every reader of a shared read node of a revocation request", function()
        local other = zk.client { chroot = root, session_timeout = 10 }
        local asked, readers = {}, {}
        for i = 1, 3 do
            readers[i] = c:rwlock("/rw", { owner = "r" .. i, cohort = true, cohort_time = 60 })
                :read_lock()
            readers[i]:on_revoke(function(owner) asked[#asked + 1] = owner end)
        end
        assert(readers[1]:acquire(5))
        assert(readers[2]:acquire(5))
        local node = readers[1]:node()
        assert.equal(node, readers[2]:node())
        assert(lockmod.revoke(other, node))
        assert.truthy(zk.wait_until(function() return #asked == 2 end, 10, c))
        table.sort(asked)
        assert.same({ "r1", "r2" }, asked)
        -- No reader joins a revoked node.
        assert(readers[3]:acquire(5))
        assert.not_equal(node, readers[3]:node())
        for i = 1, 3 do
            assert(readers[i]:release())
        end
    end)

    it("lets a queued owner time out and leaves the queue clean", function()
        local lock = c:lock("/l", { cohort = true, cohort_time = 60 })   -- holds 0.3 s
        local res = {}
        c:spawn(function()
            assert(lock:acquire(10))
            c:waiter():sleep(0.3)
            assert(lock:release())
        end)
        c:spawn(function()
            c:waiter():sleep(0.02)
            res.timed = { lock:acquire(0.1) }
            res.try = { lock:acquire(0) }
        end)
        c:spawn(function()
            c:waiter():sleep(0.05)
            res.late = { lock:acquire(5) }
            res.late_n = select(2, lock:token())
            assert(lock:release())
        end)
        assert.is_true(c:run(20))
        assert.same({ nil, "timeout" }, res.timed)
        assert.same({ nil, "timeout" }, res.try)
        assert.same({ true }, res.late)
        assert.equal(1, res.late_n)   -- handed over locally, past the one that left
        assert.same({}, (c:children("/l")))
    end)

    it("gives a seat a line position's interface: interrupt ends a wait in the queue or the line",
       function()
        local other = zk.client { chroot = root, session_timeout = 10 }
        local remote = other:lock("/l")
        assert(remote:acquire(5))     -- the cohort's leader waits in the line
        local d = line.driver { marker = "lock-", rule = require("zkcoord.line.rules").first }
        local new = cohort.positions({ cohort = true }, d)
        local a, b = new(c, "/l", d, {}), new(c, "/l", d, {})
        local res = {}
        c:spawn(function() res.a = { a:enter(10) } end)
        c:spawn(function() res.b = { b:enter(10) } end)
        c:spawn(function()
            c:sync("/")      -- a joins the line for the cohort, b queues behind it
            res.through = a:is_through()
            b:interrupt()
            a:interrupt()
        end)
        assert.is_true(c:run(20))
        assert.is_false(res.through)
        assert.same({ nil, "interrupted" }, res.b)
        assert.same({ nil, "interrupted" }, res.a)
        assert.same({ remote:node():match("[^/]+$") }, (c:children("/l")))
        assert(remote:release())
        local s = new(c, "/l", d, {})    -- the cohort is idle again
        assert.same({ true }, { s:enter(5) })
        assert.is_true(s:is_through())
        local z, n = s:token()
        assert.equal(s:stat().czxid, z)
        assert.equal(0, n)
        s:leave()
        assert.is_false(s:is_through())
        assert.same({ nil, "notheld" }, { s:token() })
        assert.truthy(zk.wait_until(function() return #c:children("/l") == 0 end, 5, c))
    end)

    it("ends a seat's enter() interrupted while it is handed the node: the node goes on", function()
        local d = line.driver { marker = "lock-", rule = require("zkcoord.line.rules").first }
        local new = cohort.positions({ cohort = true }, d)
        local a, b = new(c, "/l", d, {}), new(c, "/l", d, {})
        assert.same({ true }, { a:enter(5) })
        local res = {}
        c:spawn(function() res.b = { b:enter(10) } end)
        c:spawn(function()
            c:sync("/")      -- b is queued
            a:leave()        -- hands the node to b, which has not resumed yet
            b:interrupt()
        end)
        assert.is_true(c:run(20))
        assert.same({ nil, "interrupted" }, res.b)
        assert.is_false(b:is_through())
        assert.truthy(zk.wait_until(function() return #c:children("/l") == 0 end, 5, c),
                      "the node was not let go")
    end)

    it("is reentrant per owner", function()
        local lock = c:lock("/l", { cohort = true })
        assert(lock:acquire(5))
        assert(lock:acquire(5))
        assert.equal(2, lock:count())
        assert(lock:release())
        assert.is_true(lock:held())
        assert(lock:release())
        assert.is_false(lock:held())
        assert.same({ nil, "notheld" }, { lock:release() })
    end)

    it("excludes a lock without the cohort on the same path", function()
        local plain = zk.client { chroot = root }:lock("/l")
        local lock = c:lock("/l", { cohort = true })
        assert(lock:acquire(5))
        assert.same({ nil, "timeout" }, { plain:acquire(0.2) })
        assert(lock:release())
        assert(plain:acquire(5))
        assert.same({ nil, "timeout" }, { lock:acquire(0.2) })
        assert(plain:release())
    end)

    it("lets the readers of one process share one read node", function()
        local rl = c:rwlock("/rw", { cohort = true }):read_lock()
        local n, tokens, gate = 0, {}, c:waiter():event()
        local nodes
        for i = 1, 8 do
            c:spawn(function()
                assert(rl:acquire(10))
                tokens[i] = { rl:token() }
                n = n + 1
                if n == 8 then
                    nodes = #assert(c:children("/rw"))
                    gate:set()
                end
                gate:wait(10)
                assert(rl:release())
            end)
        end
        assert.is_true(c:run(20))
        assert.equal(1, nodes)
        local seen = {}
        for i = 1, 8 do
            assert.equal(tokens[1][1], tokens[i][1])
            seen[tokens[i][2]] = true
        end
        for k = 0, 7 do
            assert.is_true(seen[k])
        end
        assert.truthy(zk.wait_until(function() return #assert(c:children("/rw")) == 0 end, 5, c))
    end)

    it("lets a writer of the same process in within the bound while readers keep coming",
       function()
        local HANDOFFS, READERS = 4, 8
        local rw = c:rwlock("/rw", { cohort = true, cohort_handoffs = HANDOFFS, cohort_time = 60 })
        local rl, wl = rw:read_lock(), rw:write_lock()
        local readers, writing, bad, stop, reads, writes, most, after = 0, false, nil, false, 0, 0, 0, 0
        for _ = 1, READERS do
            c:spawn(function()
                while not stop do
                    assert(rl:acquire(10))
                    if writing then bad = "a reader while the writer writes" end
                    readers, reads = readers + 1, reads + 1
                    c:waiter():sleep(0.002)
                    readers = readers - 1
                    assert(rl:release())
                end
            end)
        end
        -- Lists the line with a watch once the read node is alone in it (the
        -- last writer's node gone). The watch fires at the next change, the
        -- writer's node, on the same event as the read node's own watch of
        -- the line, which tells it a remote waiter is behind: `reads` then.
        local function watch_line()
            for _ = 1, 50 do
                local mark, ev = {}, c:waiter():event()
                local names = assert(c:children("/rw", function()
                    mark.reads = mark.reads or reads
                    ev:set()
                end))
                if #names == 1 then
                    return mark
                end
                ev:wait(5)
            end
            error("the line never came down to the read node")
        end
        c:spawn(function()
            c:waiter():sleep(0.05)
            for _ = 1, 5 do
                local mark = watch_line()
                local r0 = reads
                local ok, err = wl:acquire(5)
                assert(ok, err)
                -- Before the read node hears of the writer (a round trip, long
                -- under load: 232 reads once at load 9) readers join it
                -- freely; after, cohort_handoffs grants at most, and each
                -- reader at most once more (granted before, counted when it
                -- runs; or run between the two watches' callbacks). Without
                -- a bound: thousands (until the token's range ends).
                most = math.max(most, reads - r0)
                after = math.max(after, reads - assert(mark.reads, "the line's change unseen"))
                if readers > 0 then bad = "the writer while " .. readers .. " read" end
                writing, writes = true, writes + 1
                c:waiter():sleep(0.005)
                writing = false
                assert(wl:release())
                c:waiter():sleep(0.01)
            end
            stop = true
        end)
        assert.is_true(c:run(60))
        assert.is_nil(bad)
        assert.equal(5, writes)
        assert.is_true(after <= HANDOFFS + 2 * READERS,
                       ("reads once the read node knew the writer waited: %d (%d while it waited)")
                           :format(after, most))
        assert.is_true(reads > 5 * 5, "the readers hardly ran: " .. reads)
    end)

    it("downgrades: a writer's read lock is its own node, never shared", function()
        local rw = c:rwlock("/rw", { cohort = true })
        local rl, wl = rw:read_lock(), rw:write_lock()
        assert(wl:acquire(5))
        assert(rl:acquire(5))
        assert.is_nil(select(2, rl:token()))     -- the downgrade node: no cohort
        assert(wl:release())
        assert.is_true(rl:held())
        assert(rl:release())
    end)

    it("lets the next acquire in after a loss that only held() noticed", function()
        local a = c:lock("/l", { cohort = true, owner = "A" })   -- no on_lost, no waiter
        local b = c:lock("/l", { cohort = true, owner = "B" })
        assert(a:acquire(5))
        assert.is_true(zk.expire_session(c))
        assert.is_false(a:held())
        assert.same({ true }, { b:acquire(1) })
        assert.same({ nil, "lost" }, { a:release() })
        assert(b:release())
        assert.same({ true }, { a:acquire(1) })
        assert(a:release())
        assert.same({}, (c:children("/l")))
    end)

    it("makes one local leader when a release finds the node lost", function()
        local L, res = {}, {}
        for _, o in ipairs { "A", "B", "C" } do
            L[o] = c:lock("/l", { cohort = true, owner = o, cohort_time = 60 })
        end
        assert(L.A:acquire(5))
        local z0 = L.A:token()
        for _, o in ipairs { "B", "C" } do
            c:spawn(function()
                res[o] = { L[o]:acquire(5) }
                res[o .. "z"] = L[o]:token()
                c:waiter():sleep(0.5)
                res[o .. "r"] = { L[o]:release() }
            end)
        end
        c:spawn(function()
            c:sync("/")      -- B and C queued (their watches answered)
            assert(zk.admin():delete(root .. L.A:node()))
            zk.proc.sleep(0.3)     -- the delete reaches the process, unread
            L.A._holds.A.q:leave()      -- what an nginx request's tie does
        end)
        assert.is_true(c:run(20))
        assert.same({ true }, res.B)
        assert.same({ true }, res.C)
        assert.same({ true }, res.Br)
        assert.same({ true }, res.Cr)
        assert.is_true(res.Bz > z0 and res.Cz > z0)
        assert.same({}, (c:children("/l")))
    end)

    it("does not let a reader join a read node deleted under a remote writer", function()
        local other = zk.client { chroot = root, session_timeout = 10 }
        local ra = c:rwlock("/rw", { cohort = true, owner = "A", cohort_time = 60 }):read_lock()
        local rb = c:rwlock("/rw", { cohort = true, owner = "B", cohort_time = 60 }):read_lock()
        assert(ra:acquire(5))
        assert(zk.admin():delete(root .. ra:node()))
        local w = other:rwlock("/rw"):write_lock()
        assert(w:acquire(5))
        assert.same({ nil, "timeout" }, { rb:acquire(1) })
        assert.is_false(rb:held())
        assert.is_true(w:held())
        assert(w:release())
    end)

    it("does not hand on a deleted node while a remote process holds the lock", function()
        local other = zk.client { chroot = root, session_timeout = 10 }
        local a = c:lock("/l", { cohort = true, owner = "A" })   -- no on_lost
        local b = c:lock("/l", { cohort = true, owner = "B" })
        local r = other:lock("/l", { owner = "R" })
        assert(a:acquire(5))
        assert(zk.admin():delete(root .. a:node()))
        assert(r:acquire(5))
        local res = {}
        c:spawn(function()
            res.b = { b:acquire(1) }
            res.bh = b:held()
        end)
        c:spawn(function() res.a = { a:release() } end)
        assert.is_true(c:run(20))
        assert.same({ nil, "timeout" }, res.b)
        assert.is_false(res.bh)
        assert.is_true(r:held())
        assert(r:release())
    end)

    it("does not grant, nor tell on_lost, a node lost between its handoff and the acquire's return",
       function()
        local a = c:lock("/l", { cohort = true, owner = "A" })
        local b = c:lock("/l", { cohort = true, owner = "B" })
        local lost, res = {}, {}
        for _, l in ipairs { a, b } do
            l:on_lost(function(reason, owner) lost[#lost + 1] = reason .. "," .. owner end)
        end
        assert(a:acquire(5))
        local z0, node = a:token(), a:node()
        c:spawn(function()
            res.b = { b:acquire(5) }
            res.bh, res.bz = b:held(), b:token()
            assert(b:release())
        end)
        c:spawn(function()
            c:sync("/")     -- B queued, its node's watches answered
            assert(a:release())      -- handed to B, which has not resumed
            assert(zk.admin():delete(root .. node))
            zk.proc.sleep(0.3)       -- the delete reaches the process, unread
            contract.current_state(c)        -- read now, before B resumes
        end)
        assert.is_true(c:run(20))
        assert.same({}, lost)
        assert.same({ true }, res.b)
        assert.is_true(res.bh)
        assert.is_true(res.bz > z0)
        assert.same({}, (c:children("/l")))
    end)

    it("passes the lead on when joining the line raises", function()
        local boom = true
        local d = line.driver { marker = "lock-", rule = function(e, me)
            if boom then
                error("rule bug")
            end
            return me == 1 or e[me - 1]
        end }
        local l = lockmod.new(c, "/l", { cohort = true }, d)
        local ok, err = pcall(l.acquire, l, 1)
        assert.is_false(ok)
        assert.truthy(tostring(err):find("rule bug", 1, true))
        boom = false
        assert.same({ true }, { l:acquire(1) })
        assert(l:release())
    end)

    it("gives the token pair as one number while it is exact", function()
        assert.equal(5 * 4096 + 3, cohort.number(5, 3))
        assert.is_true(cohort.number(5, 4095) < cohort.number(6, 0))
        assert.is_nil(cohort.number(2 ^ 41, 0))
    end)

    it("checks its options", function()
        assert.has_error(function() c:lock("/l", { cohort = 1 }) end)
        assert.has_error(function() c:lock("/l", { cohort = true, cohort_handoffs = -1 }) end)
        assert.has_error(function() c:lock("/l", { cohort = true, cohort_time = "x" }) end)
    end)
end)


-- A zkcoord process of 4 coroutines on one cohort lock, CuratorPeer's
-- protocol per coroutine: an ephemeral marker while it holds, counted, so
-- ZooKeeper itself sees an overlap with Curator's holders.
local COHORT_PEER = [[
local path, markers, rounds = ...
rounds = tonumber(rounds)
local zkcoord = require "zkcoord"
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 4 })
-- cohort_time 1 s: local handoffs go on while Curator's contenders wait.
local lock = c:lock(path, { cohort = true, cohort_time = 1 })
local acquired, locals, bad = 0, 0, nil
for i = 1, 4 do
    c:spawn(function()
        local me = markers .. "/w-lua" .. i
        for _ = 1, rounds do
            local ok, err = lock:acquire(30)
            if not ok then bad = bad or ("error " .. tostring(err)) return end
            if select(2, lock:token()) > 0 then locals = locals + 1 end
            assert(c:create(me, "", { ephemeral = true }))
            local n = 0
            for _, m in ipairs(assert(c:children(markers))) do
                if m:sub(1, 1) == "w" then n = n + 1 end
            end
            if n > 1 then bad = bad or ("violation " .. n) end
            acquired = acquired + 1
            c:waiter():sleep(0.01)
            assert(c:delete(me))
            assert(lock:release())
        end
    end)
end
c:run(120)
print(("%d %d %s"):format(acquired, locals, bad or "ok"))
c:close()
]]

-- The same for the rwlock: 4 reader coroutines sharing a read node and one
-- writer coroutine of the same process.
local RW_COHORT_PEER = [[
local path, markers, rounds = ...
rounds = tonumber(rounds)
local zkcoord = require "zkcoord"
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 4 })
local rw = c:rwlock(path, { cohort = true, cohort_time = 1 })
local acquired, shared, bad = 0, 0, nil
local function side(l, kind, name, counted, limit)
    return function()
        local me = markers .. "/" .. kind .. "-" .. name
        for _ = 1, rounds do
            local ok, err = l:acquire(30)
            if not ok then bad = bad or ("error " .. tostring(err)) return end
            if kind == "r" and select(2, l:token()) > 0 then shared = shared + 1 end
            assert(c:create(me, "", { ephemeral = true }))
            local n = 0
            for _, m in ipairs(assert(c:children(markers))) do
                if counted:find(m:sub(1, 1), 1, true) then n = n + 1 end
            end
            if n > limit then bad = bad or ("violation " .. kind .. " " .. n) end
            acquired = acquired + 1
            c:waiter():sleep(0.01)
            assert(c:delete(me))
            assert(l:release())
        end
    end
end
for i = 1, 4 do
    c:spawn(side(rw:read_lock(), "r", "lua" .. i, "w", 0))
end
c:spawn(side(rw:write_lock(), "w", "luaw", "wr", 1))
c:run(120)
print(("%d %d %s"):format(acquired, shared, bad or "ok"))
c:close()
]]

describe("lock cohort beside Curator's InterProcessMutex #zk #nosan", function()
    local curator = require "helpers.curator"
    local root

    setup(function()
        curator.compile("CuratorPeer")
    end)

    before_each(function()
        root = zk.new_root("cohort-curator")
    end)

    after_each(function()
        zk.delete_tree(zk.admin(), root)
    end)

    -- Runs a Curator peer per mode and the zkcoord process `peer` on one
    -- path; checks Curator's side; returns the zkcoord process's counts.
    local function beside_curator(modes, peer, rounds)
        local path, markers = root .. "/r", root .. "/markers"
        assert(zk.admin():create(markers))
        local logs, pids = {}, {}
        for i, mode in ipairs(modes) do
            logs[i] = ("%s/%s-%d.log"):format(zk.tmpdir(), root:gsub("/", "_"), i)
            pids[i] = curator.spawn("CuratorPeer", { mode, zk.hosts(), path, markers,
                                                     "java" .. i, rounds, 10 }, logs[i])
        end
        local lua_log = ("%s/%s-lua.log"):format(zk.tmpdir(), root:gsub("/", "_"))
        pids[#pids + 1] = assert(zk.spawn_lua(peer, { path, markers, rounds }, lua_log))
        for _, pid in ipairs(pids) do
            assert.truthy(zk.proc.wait_exit(pid, 120), "a contender did not finish")
        end
        for i = 1, #modes do
            local text = zk.proc.read_file(logs[i]) or ""
            assert.is_nil(text:match("violation"), text)
            assert.is_nil(text:match("error"), text)
            local _, n = text:gsub("acquired %d+", "")
            assert.equal(rounds, n, text)
        end
        local text = zk.proc.read_file(lua_log) or ""
        local acquired, locals, verdict = text:match("(%d+) (%d+) (%S+)")
        assert.equal("ok", verdict, text)
        return tonumber(acquired), tonumber(locals)
    end

    it("excludes Curator's holders while handing over locally", function()
        local acquired, locals = beside_curator({ "lock", "lock" }, COHORT_PEER, 8)
        assert.equal(4 * 8, acquired)
        assert.is_true(locals > 0, "no local handoff")
    end)

    it("rwlock: Curator's readers and writers and a cohort of readers exclude correctly",
       function()
        local acquired, shared = beside_curator({ "read", "write" }, RW_COHORT_PEER, 8)
        assert.equal(5 * 8, acquired)
        assert.is_true(shared > 0, "no reader joined a shared node")
    end)
end)


-- ---------------------------------------------------------------------------
-- Under faults (the chaos tool's kinds: server kills, a paused holder, an
-- expired session): 3 contender processes x 8 coroutines on one cohort lock
-- against a 3-node ensemble, every holder writing its token
-- (cohort.number(czxid, n)) to the chaos run's fenced resource
-- (tools/chaos/resource.lua: refuses a token below the last accepted).

-- A contender process: 8 coroutines looping acquire / two fenced writes /
-- release until DIR/stop; publishes its session (for the expiry) in
-- DIR/c<ID>.session; writes its grants and state changes to DIR/c<ID>.out
-- at the end:
--   G who token enter_t leave_t notice    (notice: "-", "heldfalse", "fenced", "release:<err>")
--   S state t
local FAULT_CONTENDER = [[
local servers, dir, id, st = ...
id, st = tonumber(id), tonumber(st)
package.path = "tools/?.lua;" .. package.path
local zkcoord = require "zkcoord"
local cohort = require "zkcoord.cohort"
local proc = require "helpers.proc"
local resource = require "chaos.resource"
local hex = require("chaos.util").hex
local now = zkcoord.now
local hard = now() + 120
local function stopping() return proc.file_exists(dir .. "/stop") or now() > hard end
local c
while not c and not stopping() do
    c = zkcoord.connect { servers = servers, session_timeout = st, connect_timeout = 10,
                          logger = function() end }
end
local out = {}
local function publish()
    local sid, pw = c:session_id(), c:session_password()
    if sid and pw then
        proc.write_file_atomic(("%s/c%d.session"):format(dir, id), sid .. " " .. hex(pw) .. "\n")
    end
end
publish()
c:on_state(function(new)
    out[#out + 1] = ("S %s %.6f"):format(new, now())
    if new == "connected" then publish() end
end)
local res = assert(resource.open(dir .. "/lock.res"))
local lock = c:lock("/lock", { cohort = true, cohort_handoffs = 8, cohort_time = 0.05 })
local fails = 0
for k = 1, 8 do
    c:spawn(function()
        local seq = 0
        while not stopping() do
            seq = seq + 1
            local ok = lock:acquire(3)
            if ok then
                local tok = assert(cohort.number(lock:token()))
                local who = ("p%d.%d.%d"):format(id, k, seq)
                local t0, notice = now(), nil
                for step = 1, 2 do
                    if not lock:held() then notice = "heldfalse" break end
                    local acc = res:offer(tok, who, 10)
                    if acc == false then notice = "fenced" break end
                    if step == 1 then c:waiter():sleep(0.003) end
                end
                local t1 = now()
                local rok, rerr = lock:release()
                if not rok then notice = notice or ("release:" .. tostring(rerr)) end
                out[#out + 1] = ("G %s %.0f %.6f %.6f %s"):format(who, tok, t0, t1, notice or "-")
            else
                fails = fails + 1
            end
            c:waiter():sleep(0.001 * math.random(0, 5))
        end
    end)
end
c:run(150)
out[#out + 1] = "F " .. fails
out[#out + 1] = "done"
c:close()
res:close()
proc.write_file(("%s/c%d.out"):format(dir, id), table.concat(out, "\n") .. "\n")
]]


-- The checker: mutual exclusion and token order from the grants and the
-- resource's decision log; returns a list of violations.
local function check_fault_run(dir, grants, states, windows, st)
    package.path = "tools/?.lua;" .. package.path
    local resource = require "chaos.resource"
    local bad = {}
    local function violation(fmt, ...) bad[#bad + 1] = fmt:format(...) end

    -- Excused: a grant that noticed its loss, or whose process had a fault
    -- (pause, expiry) or lost its session around it. Not a suspended
    -- connection (a server kill): the session and the node live on.
    local function excused(g)
        if g.notice ~= "-" then
            return "notice"
        end
        for _, w in ipairs(windows[g.pid] or {}) do
            if w[1] <= g.leave + 1 and w[2] >= g.enter - st - 1 then
                return "fault"
            end
        end
        for _, s in ipairs(states[g.pid] or {}) do
            if s.new == "lost" and s.t >= g.enter - st - 1 and s.t <= g.leave + 1 then
                return "state:" .. s.new
            end
        end
        return false
    end
    local why = {}
    for _, g in ipairs(grants) do
        g.excused = excused(g)
        if g.excused then why[g.excused] = (why[g.excused] or 0) + 1 end
    end

    -- Mutual exclusion: overlapping grants (any two coroutines, local ones
    -- too) only when the older (lower token) one had lost its lock.
    table.sort(grants, function(a, b) return a.enter < b.enter end)
    local overlaps = 0
    for i, g in ipairs(grants) do
        for j = i + 1, #grants do
            local h = grants[j]
            if h.enter >= g.leave then break end
            local old, new = g, h
            if h.token < g.token then old, new = h, g end
            if old.excused then
                overlaps = overlaps + 1
            else
                violation("two live holders: %s (%.0f) [%.4f, %.4f] and %s (%.0f) [%.4f, %.4f]",
                          old.who, old.token, old.enter, old.leave,
                          new.who, new.token, new.enter, new.leave)
            end
        end
    end

    -- Token order: a live grant's token is above every live grant that
    -- ended before it began.
    local by_leave = {}
    for _, g in ipairs(grants) do
        if not g.excused then by_leave[#by_leave + 1] = g end
    end
    table.sort(by_leave, function(a, b) return a.leave < b.leave end)
    local next_, max, max_who = 1, -1, nil
    for _, g in ipairs(grants) do
        while by_leave[next_] and by_leave[next_].leave < g.enter do
            local e = by_leave[next_]
            if e.token > max then max, max_who = e.token, e.who end
            next_ = next_ + 1
        end
        if not g.excused and g.token <= max then
            violation("token order: %s has %.0f, not above %s's %.0f", g.who, g.token,
                      max_who, max)
        end
    end

    -- The fenced resource: accepted tokens strictly increase across grants;
    -- a refusal only below the last accepted; every write inside a grant.
    local by_who = {}
    for _, g in ipairs(grants) do by_who[g.who] = g end
    local last, last_who = -1, nil
    local entries = resource.read(dir .. "/lock.res")
    for i, e in ipairs(entries) do
        if e.malformed then
            violation("resource line %d malformed", i)
        elseif e.ok then
            if e.token < last or (e.token == last and e.who ~= last_who) then
                violation("stale write accepted: line %d %s %.0f after %s %.0f", i, e.who,
                          e.token, tostring(last_who), last)
            end
            last, last_who = e.token, e.who
        elseif e.token >= last then
            violation("line %d refused %.0f above the last accepted %.0f", i, e.token, last)
        end
        local g = e.who and by_who[e.who]
        if not e.malformed and (not g or g.token ~= e.token or e.t < g.enter
                                or e.t > g.leave + 0.001) then
            violation("write outside a grant: line %d %s", i, tostring(e.who))
        end
    end
    local excused_n, whys = 0, {}
    for k, n in pairs(why) do
        excused_n = excused_n + n
        whys[#whys + 1] = k .. " " .. n
    end
    table.sort(whys)
    return bad, ("%d writes, %d grants excused (%s), %d overlaps excused"):format(#entries,
        excused_n, table.concat(whys, ", "), overlaps)
end


-- 23-34 s at load 1-10 (the ensemble's start, 17 s of faults, the stop). At
-- load 1: 4,323 grants (3,841 local handoffs), 1,178 excused (a fault on
-- their process around them, or they noticed), 302 overlaps all of an
-- excused older grant, 0 violations. With local handoffs that do not bump
-- n, it fails (token order, and the resource accepts one token twice).
describe("lock cohort under faults #zk #slow", function()
    local zkserver = require "helpers.zkserver"

    it("keeps mutual exclusion and token order across 3 processes x 8 coroutines while "
       .. "servers are killed, a holder paused and sessions expired", function()
        package.path = "tools/?.lua;" .. package.path
        local hex = require "chaos.util"
        local proc = zk.proc
        local now = zkcoord.now
        local ST = 3         -- contenders' session timeout (the ensemble's tick is 0.5 s)
        local dir = assert(proc.mktemp_dir("zkcoord-cohort-faults-"))
        local ens = assert(zkserver.start_ensemble { size = 3, tick_time = 500, timeout = 120 })
        local admin = assert(zkcoord.connect { servers = ens.hosts, session_timeout = 10,
                                               connect_timeout = 30, logger = function() end })
        assert(admin:create("/lock"))
        local pids, windows, faults = {}, {}, {}
        for i = 1, 3 do
            pids[i] = assert(zk.spawn_lua(FAULT_CONTENDER, { ens.hosts, dir, i, ST },
                                          ("%s/c%d.log"):format(dir, i)))
            windows[i] = {}
        end
        local function fault(kind, i, from)
            faults[#faults + 1] = kind
            if i then
                local w = windows[i]
                w[#w + 1] = { from, now() }
            end
        end
        -- The contender whose session owns the first node in line (the
        -- holder); any one when the line is empty.
        local function holder()
            local names = admin:children("/lock") or {}
            table.sort(names, function(a, b)
                return tonumber(a:match("(%d+)$")) < tonumber(b:match("(%d+)$"))
            end)
            local st = names[1] and admin:exists("/lock/" .. names[1])
            for i = 1, 3 do
                local sid = (proc.read_file(("%s/c%d.session"):format(dir, i)) or ""):match("^(%x+)")
                if st and sid == st.ephemeral_owner then
                    return i
                end
            end
            return math.random(1, 3)
        end
        local function expire(i)
            local from = now()
            local sid, pw = (proc.read_file(("%s/c%d.session"):format(dir, i)) or "")
                :match("^(%x+) (%x+)")
            for _ = 1, sid and 3 or 0 do       -- a server may be restarting
                local o, err = zkcoord.connect { servers = ens.hosts, session_id = sid,
                                                 session_password = hex.unhex(pw),
                                                 connect_timeout = 3, session_timeout = ST,
                                                 reconnect = false, logger = function() end }
                if o then o:close() end
                if o or err == "sessionexpired" then
                    fault("expire_session", i, from)
                    return
                end
            end
        end
        local function kill_server(idx, kind)
            assert(ens:wait_ready(60))
            idx = idx or ens:leader()
            ens.servers[idx]:kill()
            fault(kind)
            proc.sleep(2)
            ens.servers[idx]:start { wait = false }
        end

        proc.sleep(3)                                 -- the contenders get going
        kill_server(nil, "kill_leader")
        proc.sleep(2)
        local p, from = holder(), now()
        proc.kill(pids[p], "STOP")                    -- past its session timeout
        proc.sleep(ST + 1.5)
        proc.kill(pids[p], "CONT")
        fault("pause_holder", p, from)
        proc.sleep(1.5)
        expire(holder())
        proc.sleep(1.5)
        local leader = assert(ens:wait_ready(60)) and ens:leader()
        kill_server(leader % 3 + 1, "kill_follower")
        proc.sleep(1.5)
        expire(holder())
        proc.sleep(2)
        proc.write_file(dir .. "/stop", "stop\n")

        local grants, states, fails, locals = {}, {}, 0, 0
        for i = 1, 3 do
            -- acquire(3) and a pause's reconnect bound a contender's stop
            assert.is_true(proc.wait_exit(pids[i], 60), "contender " .. i .. " did not stop")
            local text = proc.read_file(("%s/c%d.out"):format(dir, i))
            assert.truthy(text and text:find("\ndone\n"),
                          "contender " .. i .. ": " .. tostring(proc.read_file(
                              ("%s/c%d.log"):format(dir, i))))
            states[i] = {}
            for l in text:gmatch("[^\n]+") do
                local who, tok, t0, t1, notice = l:match("^G (%S+) (%d+) (%S+) (%S+) (%S+)$")
                if who then
                    grants[#grants + 1] = { who = who, token = tonumber(tok), enter = tonumber(t0),
                                            leave = tonumber(t1), notice = notice, pid = i }
                    if tonumber(tok) % 4096 > 0 then locals = locals + 1 end
                end
                local s, t = l:match("^S (%S+) (%S+)$")
                if s then states[i][#states[i] + 1] = { new = s, t = tonumber(t) } end
                fails = fails + (tonumber(l:match("^F (%d+)$")) or 0)
            end
        end
        local bad, figures = check_fault_run(dir, grants, states, windows, ST)
        local report = ("%d grants (%d local handoffs), %d failed acquires, %s, faults: %s\n%s")
            :format(#grants, locals, fails, figures, table.concat(faults, " "),
                    table.concat(bad, "\n", 1, math.min(#bad, 20)))
        -- Every node goes (the contenders closed their sessions).
        local empty = zk.wait_until(function()
            local kids = admin:children("/lock")
            return kids and #kids == 0
        end, 10 + ST)
        admin:close()
        ens:destroy()
        assert.equal(0, #bad, report)
        assert.truthy(empty, "lock nodes left behind")
        assert.equal(5, #faults, report)
        -- The work went on around the faults, local handoffs included
        -- (measured at load 1: 4,426 grants, 3,933 of them local handoffs).
        assert.is_true(#grants >= 100 and locals >= 20, report)
        proc.rm_rf(dir)
    end)
end)
