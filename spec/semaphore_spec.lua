-- The semaphore against a real server: leases in-process (try once,
-- timeout, counts, mismatched max, expiry) and 5 separate luajit processes
-- sharing 2 leases, also across a SIGKILLed holder.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local event_log = require "helpers.events"
local slots = require "helpers.slots"
local queue = require "zkcoord.queue"

-- A holder process. args: semaphore path, name, markers path, rounds, kill-me flag.
-- Each holder, once it has a lease, puts an ephemeral marker (same session
-- as its lease node, so both go together if it dies) under the markers
-- path and counts the markers: more than 2 is a violation seen by ZooKeeper
-- itself, whatever the clocks say.
local HOLDER = [[
local zkcoord = require "zkcoord"
local core = require "zkcoord.core"
local path, name, markers, rounds = ...
rounds = tonumber(rounds)
io.stdout:setvbuf("line")
local function log(what, extra)
    io.stdout:write(what, " ", string.format("%.6f", core.now()), " ", tostring(extra or ""), "\n")
end
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 2 })
local sem = c:semaphore(path, 2, { data = name })
log("ready")
for _ = 1, rounds do
    local lease, err = sem:acquire(20)
    if not lease then log("error", err) break end
    assert(c:create(markers .. "/" .. name, "", { ephemeral = true }))
    local n = #assert(c:children(markers))
    log("acquired", n)
    if n > 2 then log("violation", n) end
    if not lease:held() then log("error", "not-held") end
    c:waiter():sleep(0.1 + math.random() * 0.1)
    assert(c:delete(markers .. "/" .. name))
    log("released")
    assert(lease:release())
end
log("done")
c:close()
]]


describe("semaphore #zk", function()
    local root, c, other
    local pids = {}

    before_each(function()
        root = zk.new_root("semaphore")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        for _, pid in ipairs(pids) do
            if proc.alive(pid) then proc.kill(pid, "KILL") end
        end
        pids = {}
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("grants max_leases leases, then makes the next one wait", function()
        local s = c:semaphore("/s", 2, { data = "c" })
        local so = other:semaphore("/s", 2, { data = "o" })
        local l1 = assert(s:acquire(5))
        -- acquire leaves its internal lock without waiting; c's next request
        -- is ordered after that delete (without it: so:acquire(0) found the
        -- lock taken, 1 run in 5 at load 2)
        assert(c:exists("/"))
        local l2 = assert(so:acquire(0))
        assert.is_true(l1:held())
        assert.is_true(l2:held())
        assert.equal(2, s:leases())
        assert.same({ nil, "timeout" }, { so:acquire(0) })
        local t0 = proc.now()
        assert.same({ nil, "timeout" }, { s:acquire(0.3) })
        assert.is_true(proc.now() - t0 >= 0.29)
        -- the failed tries left no node behind, lease or internal lock
        assert.equal(2, #c:children("/s/leases"))
        assert.truthy(zk.wait_until(function() return #c:children("/s/locks") == 0 end, 5, c))
        assert.same({ "c", "o" }, s:participants())
        -- the max is the semaphore node's data; Curator V2's layout below it
        assert.equal("2", (c:get("/s")))
        for _, n in ipairs(c:children("/s/leases")) do
            assert.matches("^_c_%x+%-%x+%-%x+%-%x+%-%x+%-lease%-%d+$", n)
        end
        assert.is_true(l1:release())
        assert.is_false(l1:held())
        assert.same({ nil, "notheld" }, { l1:release() })
        assert.equal(1, s:leases())
        local l3 = assert(so:acquire(0))
        assert.equal(2, s:leases())
        l2:release()
        l3:release()
        -- releases are sent without waiting: other's deletes land soon
        assert.truthy(zk.wait_until(function() return s:leases() == 0 end, 5, other))
    end)

    it("a waiter gets the lease as soon as a holder releases", function()
        local s = c:semaphore("/w", 1)
        local l1 = assert(s:acquire(5))
        -- release from another process while we wait
        local log = zk.tmpdir() .. "/sem-release.log"
        local pid = assert(zk.spawn_lua([[
            local zkcoord = require "zkcoord"
            local path = ...
            local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS") })
            local sem = c:semaphore(path, 1)
            local lease = assert(sem:acquire(10))
            io.stdout:write("got\n")
            lease:release()
            c:close()
        ]], { root .. "/w" }, log))
        pids[#pids + 1] = pid
        c:dispatch(0.5)
        assert.equal(1, s:leases())
        l1:release()
        assert.truthy(proc.wait_exit(pid, 10))
        assert.matches("got", proc.read_file(log))
    end)

    it("refuses a user with another max_leases", function()
        local s = c:semaphore("/m", 2)
        local l = assert(s:acquire(5))
        local bad = other:semaphore("/m", 3)
        local ok, err, detail = bad:acquire(1)
        assert.is_nil(ok)
        assert.equal("invalid", err)
        assert.matches("2 leases, not 3", detail)
        assert.equal(1, #c:children("/m/leases"))
        l:release()
        -- a node without data is claimed by the first user
        c:create("/bare")
        local lb = assert(other:semaphore("/bare", 4):acquire(5))
        assert.equal("4", (c:get("/bare")))
        assert.equal("invalid", select(2, c:semaphore("/bare", 1):acquire(0)))
        lb:release()
    end)

    it("a lease is lost with its session, and on_lost tells", function()
        local s = c:semaphore("/x", 1)
        local lease = assert(s:acquire(5))
        local lost
        lease:on_lost(function(reason) lost = reason end)
        assert.truthy(zk.expire_session(c))
        assert.truthy(zk.wait_until(function() return lost ~= nil end, 10, c))
        -- "deleted" if the server removed the node while our connection was up
        assert.truthy(lost == "sessionexpired" or lost == "deleted", lost)
        assert.is_false(lease:held())
        assert.same({ nil, "lost" }, { lease:release() })
        -- the lease is free for others at once
        assert.truthy(other:semaphore("/x", 1):acquire(2))
    end)

    it("lease:token() is its node's czxid while held, larger for each later lease", function()
        local s = c:semaphore("/x", 2)
        local l1 = assert(s:acquire(5))
        local l2 = assert(other:semaphore("/x", 2):acquire(5))
        local t1, t2 = assert(l1:token()), assert(l2:token())
        assert.equal(assert(other:exists(l1:node())).czxid, t1)
        assert.equal(assert(c:exists(l2:node())).czxid, t2)
        assert.is_true(t2 > t1)
        assert.is_true(l1:release())
        assert.same({ nil, "notheld" }, { l1:token() })
        local l3 = assert(s:acquire(5))
        assert.is_true(assert(l3:token()) > t2)
        -- lost with the session: no token
        assert.truthy(zk.expire_session(other))
        assert.is_false(l2:held())
        assert.same({ nil, "notheld" }, { l2:token() })
        assert.has_error(function() l3.token({}) end)
        assert.is_true(l3:release())
    end)

    it("a waiter whose session expired leaves no free lease unused", function()
        local third = zk.client { chroot = root }
        local h = assert(c:semaphore("/s", 1):acquire(5))
        local la, ea, lb, eb
        other:spawn(function() la, ea = other:semaphore("/s", 1):acquire(10) end)
        local function count()
            return #c:children("/s/locks") + #c:children("/s/leases")
        end
        local function turn()
            other:run(0.02)
            third:run(0.02)
        end
        -- A holds the internal lock and waits in the lease line
        assert.truthy(zk.wait_until(function() turn() return count() == 3 end, 10))
        local sid = other:session_id()
        assert.truthy(zk.expire_session(other))
        -- A is back in line in its new session
        assert.truthy(zk.wait_until(function()
            turn()
            for _, name in ipairs(c:children("/s/leases")) do
                local st = c:exists("/s/leases/" .. name)
                if st and st.ephemeral_owner == other:session_id()
                   and st.ephemeral_owner ~= sid then
                    return true
                end
            end
        end, 10))
        third:spawn(function() lb, eb = third:semaphore("/s", 1):acquire(6) end)
        -- B waits too (the old code: in the lease line; now: for the lock)
        assert.truthy(zk.wait_until(function() turn() return count() == 4 end, 10))
        assert(h:release())
        assert.truthy(zk.wait_until(function() turn() return la or ea or lb or eb end, 10))
        -- A gets the free lease while B still waits (the old code: only
        -- when B's acquire timed out)
        assert.is_nil(eb)
        assert.truthy(la, tostring(ea))
        assert(la:release())
        assert.truthy(zk.wait_until(function() turn() return lb or eb end, 10))
        assert.truthy(lb, tostring(eb))
        assert(lb:release())
    end)

    it("raises on bad arguments", function()
        assert.has_error(function() c:semaphore("/s", 0) end)
        assert.has_error(function() c:semaphore("/s", 1.5) end)
        assert.has_error(function() c:semaphore("/s", "2") end)
        assert.has_error(function() c:semaphore("s", 2) end)
        assert.has_error(function() c:semaphore("/s", 2, { bogus = 1 }) end)
        assert.has_error(function() c:semaphore("/s", 2):acquire(-1) end)
    end)

    it("5 processes never hold more than 2 leases, also across a SIGKILLed holder", function()
        local path, markers = root .. "/sem", root .. "/holders"
        zk.admin():create(markers)
        local logs = {}
        for i = 1, 5 do
            logs[i] = ("%s/sem-%d-%d.log"):format(zk.tmpdir(), proc.getpid(), i)
            os.remove(logs[i])
            pids[i] = assert(zk.spawn_lua(HOLDER, { path, "h" .. i, markers, 5 }, logs[i]))
        end
        -- SIGKILL one process while it holds a lease
        local victim = zk.wait_until(function()
            for i = 1, 5 do
                local ev = event_log.read(logs[i])
                if #ev > 0 and ev[#ev].what == "acquired" and event_log.count(ev, "acquired") >= 2 then
                    return i
                end
            end
        end, 15)
        assert.truthy(victim, "no holder to kill")
        proc.kill(pids[victim], "KILL")
        for i = 1, 5 do
            if i ~= victim then
                assert.truthy(proc.wait_exit(pids[i], 25), "holder " .. i .. " did not finish")
            end
        end
        local max_seen = 0
        for i = 1, 5 do
            local ev = event_log.read(logs[i])
            local text = proc.read_file(logs[i])
            assert.equal(0, event_log.count(ev, "violation"), text)
            assert.equal(0, event_log.count(ev, "error"), text)
            for _, e in ipairs(ev) do
                if e.what == "acquired" then
                    max_seen = math.max(max_seen, tonumber(e.extra))
                end
            end
            if i ~= victim then
                assert.equal(5, event_log.count(ev, "acquired"), text)
                assert.equal(1, event_log.count(ev, "done"), text)
            end
        end
        assert.is_true(max_seen <= 2)
        assert.equal(2, max_seen)      -- the two leases were used at once
        -- the killed holder's lease went with its session
        assert.same({}, (zk.admin():children(path .. "/leases")))
        assert.same({}, (zk.admin():children(path .. "/locks")))
        assert.same({}, (zk.admin():children(markers)))
    end)
    -- The waiter must wake when ANY holder leaves, not only the one n places
    -- below it (before: C waited its whole timeout with a lease free).
    local function free_slot_case(take, give)
        local third = zk.client { chroot = root }
        local ha = assert(take(c, 5))
        local hb = assert(take(other, 5))
        local got, waited
        third:spawn(function()
            local t0 = proc.now()
            got = { take(third, 3) }
            waited = proc.now() - t0
        end)
        third:spawn(function()
            third:waiter():sleep(0.3)
            give(hb)            -- B (the higher holder) leaves; A still holds
        end)
        assert.is_true(third:run(10))
        assert.truthy(got[1], tostring(got[2]))
        -- measured at load 2: 0.30-0.33 s
        assert.is_true(waited < 1.5, ("waited %.2f s with a slot free"):format(waited))
        give(ha)
        give(got[1])
    end

    it("a free lease goes to the waiter whichever holder leaves (three clients)", function()
        free_slot_case(function(cl, t)
            return cl:semaphore("/free", 2):acquire(t)
        end, function(lease) lease:release() end)
    end)

    it("queue.rule_fewer_than wakes the waiter whichever holder leaves", function()
        free_slot_case(function(cl, t)
            local q = queue.new(cl, "/rule", { marker = "slot-", rule = queue.rule_fewer_than(2) })
            local ok, err = q:enter(t)
            if not ok then return nil, err end
            return q
        end, function(q) q:leave() end)
    end)

    it("grants leases in arrival order", function()
        local s = c:semaphore("/order", 1)
        local held = assert(s:acquire(5))
        local order = {}
        -- three coroutines of one client (a wait in one lets the others run)
        for i = 1, 3 do
            other:spawn(function()
                -- arrive in order 1, 2, 3: each once the one before is in the
                -- internal lock's line (0.15 s apart was not enough at load 11)
                while #assert(other:children("/order/locks")) < i - 1 do
                    other:waiter():sleep(0.01)
                end
                local lease = assert(other:semaphore("/order", 1):acquire(10))
                order[#order + 1] = i
                other:waiter():sleep(0.05)
                lease:release()
            end)
        end
        other:spawn(function()
            other:waiter():sleep(0.8)
            held:release()
        end)
        assert.is_true(other:run(15))
        assert.same({ 1, 2, 3 }, order)
    end)

    -- Several processes, uneven holds: one holds 1 s each round, the others
    -- 20-100 ms. A slot free while someone waits must be handed over within
    -- a few round trips, never left for the long holder's release.
    for _, case in ipairs { { n = 2, workers = 5 }, { n = 3, workers = 6 } } do
        it(("%d processes on %d leases: no slot stays free while one waits"):format(
                case.workers, case.n), function()
            local path = root .. "/idle" .. case.n
            local logs = {}
            for i = 1, case.workers do
                logs[i] = ("%s/idle-%d-%d-%d.log"):format(zk.tmpdir(), proc.getpid(), case.n, i)
                os.remove(logs[i])
                pids[#pids + 1] = assert(zk.spawn_lua(slots.WORKER, {
                    path, "w" .. i, case.n, i == 1 and 3 or 12, i == 1 and 1.0 or 0,
                    "semaphore" }, logs[i]))
            end
            for _, pid in ipairs(pids) do
                assert.truthy(proc.wait_exit(pid, 40), "a worker did not finish")
            end
            local r = slots.analyze(logs, case.n)
            local text = proc.read_file(logs[1])
            assert.equal(0, r.errors, text)
            assert.equal(3 + 12 * (case.workers - 1), r.grants)
            assert.is_true(r.max_holders <= case.n)
            assert.equal(case.n, r.max_holders)
            print(("\n%d of %d leases: longest free-while-waiting %.3f s (%d over 0.5 s), "
                   .. "%.1f %% of %.1f s"):format(case.n, case.workers, r.max_idle, r.long_idles,
                                                100 * r.idle_share, r.span))
            -- The old code: 3 idle times over 0.5 s and 68-77 % of the run
            -- idle (docs/RELIABILITY.md); one stall of a loaded machine
            -- (a sanitizer run) may make one long idle time, not three.
            -- An idle time ends when the grant's read went out, not when the
            -- granted process got the CPU to log it (helpers/slots.lua): at
            -- load 2, 20 runs: 1.8-5.0 % idle, longest 0.082 s; ASan, 5
            -- runs: 3.3-5.8 % (ended at the log line, issue 22 saw 16-39 %).
            -- On the old code the waiter's read went out only after the long
            -- holder's release: its idle times stay 1 s long. At load 15
            -- (two soaks, a CI run and a chaos run on 2 cores) one run in
            -- 20 reached 37.7 %: the bound is 0.5, the old code's 68 % above.
            assert.is_true(r.long_idles <= 1, ("%d times a slot stayed free over 0.5 s while "
                                               .. "one waited (longest %.3f s)")
                                              :format(r.long_idles, r.max_idle))
            assert.is_true(r.idle_share < 0.5, ("a slot was free while one waited %.1f %% of "
                                                 .. "the run"):format(100 * r.idle_share))
        end)
    end
end)
