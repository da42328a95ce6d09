-- The read-write lock against a real server: readers share, a writer
-- excludes everyone (checked across separate processes), arrival order,
-- reentrancy, downgrade, refused upgrade, try-lock, session expiry, and
-- foreign children under the lock path.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local event_log = require "helpers.events"
local tcpproxy = require "helpers.tcpproxy"
local zkcoord = require "zkcoord"

-- A contender process: `n` rounds of acquire, log, hold, log, release.
-- args: mode ("read" | "write"), chroot, path, n, hold seconds, log file, id
local CONTENDER = [[
local mode, root, path, n, hold, log, id = ...
local zkcoord = require "zkcoord"
local now = require("zkcoord.core").now
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), chroot = root,
                                   session_timeout = 10 })
local rw = c:rwlock(path)
local l = mode == "write" and rw:write_lock() or rw:read_lock()
local f = assert(io.open(log, "a"))
f:setvbuf("no")     -- one write(2) per line, O_APPEND: lines never interleave
for _ = 1, tonumber(n) do
    local ok, err = l:acquire(30)
    if not ok then
        f:write(("%s %s error %s\n"):format(mode, id, tostring(err)))
        os.exit(1)
    end
    f:write(("%s %s enter %.6f\n"):format(mode, id, now()))
    c:waiter():sleep(tonumber(hold))
    f:write(("%s %s leave %.6f\n"):format(mode, id, now()))
    l:release()
end
f:write(("%s %s done\n"):format(mode, id))
f:close()
c:close()
]]

local function read_log(file)
    local out = {}
    for line in (proc.read_file(file) or ""):gmatch("[^\n]+") do
        local mode, id, what, t = line:match("^(%S+) (%S+) (%S+) ?(%S*)$")
        out[#out + 1] = { mode = mode, id = id, what = what, t = tonumber(t), line = line }
    end
    return out
end


local function spawn(root, mode, path, n, hold, log, id)
    local pid = zk.spawn_lua(CONTENDER, { mode, root, path, n, hold, log, id },
                             log .. ".out")
    assert(pid, "spawn failed")
    return pid
end

local function wait_exit(pids, log)
    for _, pid in ipairs(pids) do
        if not proc.wait_exit(pid, 30) then
            proc.kill(pid, "KILL")
            error("contender " .. pid .. " did not finish: "
                  .. tostring(proc.read_file(log .. ".out")))
        end
    end
end

describe("rwlock #zk", function()
    local root, c1, c2

    before_each(function()
        root = zk.new_root("rwlock")
        c1 = zk.client { chroot = root }
        c2 = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    local function nodes(c)
        local names = c:children("/rw")
        table.sort(names or {})
        return names or {}
    end

    -- Deletes are sent without waiting, by each client: poll for the end.
    local function assert_no_nodes()
        assert.truthy(zk.wait_until(function() return #nodes(c1) == 0 end, 5, c1),
                      "nodes left: " .. table.concat(nodes(c1), " "))
    end

    -- No watch or request left behind on client `c`.
    local function assert_no_leaks(c)
        assert.truthy(zk.wait_until(function()
            local st = c:stats()
            return st.watches == 0 and st.pending == 0
        end, 5, c), "leaked watches or requests")
    end

    -- Waits until `n` lock nodes exist (a spawned contender has queued).
    local function wait_nodes(n)
        assert.truthy(zk.wait_until(function() return #nodes(c1) >= n end, 10, c1),
                      "expected " .. n .. " nodes")
    end

    it("lets two readers hold at once, with Curator's node names", function()
        local r1 = c1:rwlock("/rw"):read_lock()
        local r2 = c2:rwlock("/rw"):read_lock()
        assert.is_true(r1:acquire(5))
        assert.is_true(r2:acquire(5))
        assert.is_true(r1:held())
        assert.is_true(r2:held())
        assert.matches("^/rw/_c_[%x%-]+%-__READ__%d+$", r1:node())
        assert.matches("^/rw/_c_[%x%-]+%-__READ__%d+$", r2:node())
        assert.is_true(r2:token() > r1:token())
        assert.is_true(r1:release())
        assert.is_true(r2:release())
        assert.is_false(r1:held())
        assert_no_nodes()
        assert_no_leaks(c1)
        assert_no_leaks(c2)
    end)

    it("is the same lock object on every call", function()
        local rw = c1:rwlock("/rw")
        assert.equal(rw:read_lock(), rw:read_lock())
        assert.equal(rw:write_lock(), rw:write_lock())
        assert.are_not.equal(rw:read_lock(), rw:write_lock())
    end)

    it("excludes readers and writers while a writer holds", function()
        local w = c1:rwlock("/rw"):write_lock()
        assert.is_true(w:acquire(5))
        assert.matches("^/rw/_c_[%x%-]+%-__WRIT__%d+$", w:node())
        local rw2 = c2:rwlock("/rw")
        assert.same({ nil, "timeout" }, { rw2:read_lock():acquire(0.3) })
        assert.same({ nil, "timeout" }, { rw2:write_lock():acquire(0.3) })
        w:release()
        assert.is_true(rw2:read_lock():acquire(5))
        -- and a writer waits for a reader
        assert.same({ nil, "timeout" }, { w:acquire(0.3) })
        rw2:read_lock():release()
        assert.is_true(w:acquire(5))
        w:release()
    end)

    it("try-lock (timeout 0) returns timeout and leaves no node", function()
        local w = c1:rwlock("/rw"):write_lock()
        assert.is_true(w:acquire(5))
        local rw2 = c2:rwlock("/rw")
        assert.same({ nil, "timeout" }, { rw2:write_lock():acquire(0) })
        assert.same({ nil, "timeout" }, { rw2:read_lock():acquire(0) })
        assert.is_false(rw2:write_lock():held())
        -- c2's deletes are ordered before its next request
        assert.same({ (w:node():match("[^/]+$")) }, nodes(c2))
        w:release()
        assert_no_nodes()
        assert.is_true(rw2:read_lock():acquire(0))
        assert.is_true(c1:rwlock("/rw"):read_lock():acquire(0))
    end)

    it("is reentrant on both sides, per owner", function()
        local rw = c1:rwlock("/rw")
        local r, w = rw:read_lock(), rw:write_lock()
        assert.is_true(w:acquire(5))
        assert.is_true(w:acquire(5))
        assert.equal(2, w:count())
        w:release()
        assert.is_true(w:held())
        w:release()
        assert.is_false(w:held())
        assert.is_true(r:acquire(5))
        assert.is_true(r:acquire(0))
        assert.equal(2, r:count())
        -- another owner (a coroutine) on the same client and object waits for
        -- nobody to read, but a writing coroutine is refused while we read
        local co = coroutine.wrap(function()
            local ok = r:acquire(0)
            local held = r:held()
            r:release()
            local wok, werr = w:acquire(0)
            return ok, held, wok, werr
        end)
        local ok, held, wok, werr = co()
        assert.is_true(ok)
        assert.is_true(held)
        assert.is_nil(wok)
        assert.equal("timeout", werr)
        r:release()
        r:release()
        assert.equal(0, r:count())
        assert_no_nodes()
        assert_no_leaks(c1)
    end)

    it("never lets a writer overlap anyone (2 writer and 3 reader processes)", function()
        local log = zk.tmpdir() .. "/rw-" .. proc.getpid() .. "-" .. os.time() .. ".log"
        local pids = {}
        for i = 1, 2 do
            pids[#pids + 1] = spawn(root, "write", "/rw", 10, 0.01, log, "w" .. i)
        end
        for i = 1, 3 do
            pids[#pids + 1] = spawn(root, "read", "/rw", 10, 0.03, log, "r" .. i)
        end
        wait_exit(pids, log)
        local entries = read_log(log)
        assert.equal(5, event_log.count(entries, "done"), proc.read_file(log .. ".out") or "")
        assert.equal(0, event_log.count(entries, "error"))
        -- intervals per contender: enter .. leave
        local intervals, open = {}, {}
        for _, e in ipairs(entries) do
            if e.what == "enter" then
                open[e.id] = e.t
            elseif e.what == "leave" then
                intervals[#intervals + 1] = { mode = e.mode, id = e.id, from = open[e.id],
                                              to = e.t }
                open[e.id] = nil
            end
        end
        assert.equal(50, #intervals)
        local reader_overlaps = 0
        for i, a in ipairs(intervals) do
            for j = i + 1, #intervals do
                local b = intervals[j]
                if a.from < b.to and b.from < a.to then
                    assert.is_true(a.mode == "read" and b.mode == "read",
                        ("%s %s [%f, %f] overlaps %s %s [%f, %f]"):format(
                            a.mode, a.id, a.from, a.to, b.mode, b.id, b.from, b.to))
                    reader_overlaps = reader_overlaps + 1
                end
            end
        end
        assert.is_true(reader_overlaps > 0, "readers never overlapped")
        assert_no_nodes()
    end)

    it("grants in arrival order: a writer queued before a reader goes first", function()
        local log = zk.tmpdir() .. "/order-" .. proc.getpid() .. "-" .. os.time() .. ".log"
        local w = c1:rwlock("/rw"):write_lock()
        assert.is_true(w:acquire(5))
        local pids = { spawn(root, "write", "/rw", 1, 0.3, log, "w") }
        wait_nodes(2)
        pids[2] = spawn(root, "read", "/rw", 1, 0.05, log, "r")
        wait_nodes(3)
        w:release()
        wait_exit(pids, log)
        local by = {}
        for _, e in ipairs(read_log(log)) do
            by[e.id .. " " .. e.what] = e.t
        end
        assert.truthy(by["w enter"] and by["r enter"], proc.read_file(log) or "")
        assert.is_true(by["w leave"] <= by["r enter"])
    end)

    it("makes a reader wait behind a queued writer even while readers hold", function()
        local log = zk.tmpdir() .. "/fair-" .. proc.getpid() .. "-" .. os.time() .. ".log"
        local r1 = c1:rwlock("/rw"):read_lock()
        assert.is_true(r1:acquire(5))
        local pid = spawn(root, "write", "/rw", 1, 0.05, log, "w")
        wait_nodes(2)
        local r2 = c2:rwlock("/rw"):read_lock()
        assert.same({ nil, "timeout" }, { r2:acquire(0.3) })
        r1:release()
        assert.is_true(r2:acquire(10))
        wait_exit({ pid }, log)
        local by = {}
        for _, e in ipairs(read_log(log)) do
            by[e.id .. " " .. e.what] = e.t
        end
        assert.truthy(by["w leave"])
        r2:release()
    end)

    it("allows a downgrade: write, then read, then release the write", function()
        local log = zk.tmpdir() .. "/down-" .. proc.getpid() .. "-" .. os.time() .. ".log"
        local rw = c1:rwlock("/rw")
        local r, w = rw:read_lock(), rw:write_lock()
        assert.is_true(w:acquire(5))
        -- a writer queues behind us; it must not get in while we still read
        local pid = spawn(root, "write", "/rw", 1, 0.05, log, "w")
        wait_nodes(2)
        assert.is_true(r:acquire(1))
        assert.matches("__READ__%d+$", r:node())
        assert.is_true(w:release())
        assert.is_false(w:held())
        assert.is_true(r:held())
        -- another reader is behind the waiting writer: fair, it waits too
        assert.same({ nil, "timeout" }, { c2:rwlock("/rw"):read_lock():acquire(0.3) })
        zk.wait_until(function() return false end, 0.5, c1)
        assert.equal(0, #read_log(log), proc.read_file(log) or "")
        assert.is_true(r:held())
        r:release()
        wait_exit({ pid }, log)
        assert.equal(1, event_log.count(read_log(log), "enter"))
        assert_no_nodes()
        assert_no_leaks(c1)
        assert_no_leaks(c2)
    end)

    it("refuses an upgrade at once, with a clear error", function()
        local rw = c1:rwlock("/rw")
        local r, w = rw:read_lock(), rw:write_lock()
        assert.is_true(r:acquire(5))
        local t0 = proc.now()
        assert.error_matches(function() w:acquire(5) end,
            "cannot upgrade a read lock to a write lock: release the read lock first", 1, true)
        local ok, msg = pcall(function()
            local res = w:acquire()    -- the error points at this line
            return res
        end)
        assert.is_false(ok)
        assert.matches("^spec/rwlock_spec.lua:%d+: cannot upgrade", msg)
        assert.is_true(proc.now() - t0 < 1)
        assert.is_false(w:held())
        assert.equal(1, #nodes(c1))
        r:release()
        assert.is_true(w:acquire(5))
        w:release()
    end)

    it("reports a lost session through on_lost and held()", function()
        -- zk.expire_session races the client's own reconnect (the client may
        -- win its session back); behind a black-holed proxy it cannot. The
        -- cut comes right after the grant, while the own-node watch request
        -- may still be in flight (see the XXX in rwlock.lua).
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)"))))
        finally(function() proxy:stop() end)
        local c = zk.client { servers = proxy.hosts, chroot = root }
        local rw = c:rwlock("/rw")
        local r, w = rw:read_lock(), rw:write_lock()
        local lost = {}
        w:on_lost(function(reason) lost[#lost + 1] = "write " .. reason end)
        r:on_lost(function(reason) lost[#lost + 1] = "read " .. reason end)
        assert.is_true(w:acquire(5))
        assert.is_true(r:acquire(5))       -- downgrade path: both held
        local sid, pw = c:session_id(), c:session_password()
        proxy:blackhole()
        local other = assert(zkcoord.connect { servers = zk.hosts(), session_id = sid,
                                               session_password = pw, reconnect = false,
                                               session_timeout = c:session_timeout() })
        other:close()
        proxy:pass()
        assert.truthy(zk.wait_until(function() return #lost == 2 end, 10, c))
        table.sort(lost)
        assert.same({ "read sessionexpired", "write sessionexpired" }, lost)
        assert.is_false(w:held())
        assert.is_false(r:held())
        assert.same({ nil, "lost" }, { w:release() })
        assert.same({ nil, "notheld" }, { w:release() })
        -- the nodes went with the session: someone else gets the write lock
        assert.is_true(c2:rwlock("/rw"):write_lock():acquire(5))
        -- and the old client, in its new session, can queue again
        assert.truthy(zk.wait_until(function() return c:state() == "connected" end, 10, c))
        assert.same({ nil, "timeout" }, { r:acquire(0.2) })
    end)

    it("ignores foreign children under the lock path", function()
        local admin = zk.admin()
        admin:create(root .. "/rw")
        admin:create(root .. "/rw/config", "x")
        admin:create(root .. "/rw/lock-0000000000", "x")
        admin:create(root .. "/rw/zz__READ__x", "x")
        local w = c1:rwlock("/rw"):write_lock()
        assert.is_true(w:acquire(5))
        assert.same({ nil, "timeout" }, { c2:rwlock("/rw"):read_lock():acquire(0.2) })
        w:release()
        assert.is_true(c2:rwlock("/rw"):read_lock():acquire(5))
        assert.is_true(c1:rwlock("/rw"):read_lock():acquire(5))
    end)

    it("checks its arguments", function()
        assert.has_error(function() c1:rwlock("rw") end)
        assert.has_error(function() c1:rwlock("/rw", { bogus = 1 }) end)
        assert.has_error(function() c1:rwlock("/rw", { data = 5 }) end)
        assert.has_error(function() c1:rwlock("/rw"):read_lock():acquire(-1) end)
    end)
end)
