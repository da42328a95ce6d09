-- The work queue against a real server: order, claims, waiting, a
-- consumer's session end, kazoo's item names, lost replies of put and ack
-- (forced through a proxy), and 3 producers / 4 consumer processes with
-- one consumer SIGKILLed.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local tcpproxy = require "helpers.tcpproxy"

local PRODUCER = [[
local zkcoord = require "zkcoord"
local path, name, n = ...
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS") })
local q = c:work_queue(path)
for i = 1, tonumber(n) do assert(q:put(name .. "-" .. i)) end
io.stdout:write("done\n")
c:close()
]]

-- Logs "ack <item>" after every ack; with a hold, keeps each item that
-- long before acking (so a SIGKILL can catch one taken, not acked).
local CONSUMER = [[
local zkcoord = require "zkcoord"
local path, hold = ...
io.stdout:setvbuf("line")
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 2 })
local q = c:work_queue(path)
while true do
    local item, err = q:take(4)
    if not item then io.stdout:write("end ", tostring(err), "\n") break end
    io.stdout:write("took ", item.data, "\n")
    if tonumber(hold) > 0 then c:waiter():sleep(tonumber(hold)) end
    local ok, aerr = item:ack()
    io.stdout:write(ok and "ack " or "ackfail ", item.data, " ", tostring(aerr), "\n")
end
c:close()
]]

-- Through `hosts` (a proxy), mode "put" puts "first" and says "ready",
-- then puts "once"; mode "late" likewise, but gives the second put 0.5 s
-- and then serves its events 5 s more; mode "ack" takes an item and says
-- "took <data>", then acks it. The second step waits for the file `go`;
-- its result is logged.
local LOST_REPLY = [[
local zkcoord = require "zkcoord"
local hosts, path, go, mode = ...
io.stdout:setvbuf("line")
local c = assert(zkcoord.connect { servers = hosts, session_timeout = 10 })
local q, item = c:work_queue(path), nil
if mode == "put" or mode == "late" then
    assert(q:put("first"))
    io.stdout:write("ready\n")
else
    item = assert(q:take(10))
    io.stdout:write("took ", item.data, "\n")
end
while not io.open(go) do c:waiter():sleep(0.01) end
local ok, err
if mode == "put" then ok, err = q:put("once")
elseif mode == "late" then ok, err = q:put("undone", { timeout = 0.5 })
else ok, err = item:ack() end
io.stdout:write(mode, " ", tostring(ok), " ", tostring(err), "\n")
if mode == "late" then c:waiter():sleep(5) end
c:close()
]]

-- Runs spec/peers/kazoo_queue.py (kazoo's LockingQueue, Debian's
-- python3-kazoo) with `args` after hosts and path; returns its output.
-- Not under ASan's LD_PRELOAD: Python is not built for it.
local function kazoo(hosts, path, args)
    local log = ("%s/wq-kazoo-%d.log"):format(zk.tmpdir(), proc.getpid())
    os.remove(log)
    local argv = { "/usr/bin/python3", "spec/peers/kazoo_queue.py", hosts, path }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    local pid = assert(proc.spawn(argv, { stdout = log, stderr = log, env = { LD_PRELOAD = "" } }))
    assert.truthy(proc.wait_exit(pid, 60), "kazoo did not finish")
    return proc.read_file(log) or ""
end


-- A proxy to the server, stopped when the test ends.
local function start_proxy()
    local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)$"))))
    finally(function() proxy:stop() end)
    return proxy
end


-- Runs LOST_REPLY in `mode` in a child process through a proxy until its
-- log shows `ready`. Then the
-- proxy holds every byte back DELAY s, the child goes on (the go file),
-- during() sees the child's write reach the server, and the connection is
-- cut before the write's reply came back. Returns the child's log. The
-- write is the child's first request, or its second for an ack (which
-- first reads its claim).
local DELAY = 1.5
local function reply_lost(pids, mode, path, ready, during)
    local trips = mode == "ack" and 2 or 1
    local proxy = start_proxy()
    local log = ("%s/wq-lost-%d.log"):format(zk.tmpdir(), proc.getpid())
    local go = log .. ".go"
    os.remove(log)
    os.remove(go)
    local pid = assert(zk.spawn_lua(LOST_REPLY, { proxy.hosts, path, go, mode }, log))
    pids[#pids + 1] = pid
    assert.truthy(zk.wait_until(function()
        return (proc.read_file(log) or ""):find(ready, 1, true) ~= nil
    end, 20), "the child is not ready: " .. (proc.read_file(log) or ""))
    assert(proxy:delay(DELAY))
    local t0 = proc.now()
    assert(proc.write_file(go, "go"))
    during()
    assert(proxy:pass())
    assert(proxy:cut())
    -- the reply (due 2 * trips * DELAY after go at the earliest) was still held back
    local cut_at = proc.now() - t0
    assert.is_true(cut_at < 2 * trips * DELAY - 0.2, "the machine was too slow: cut after " .. cut_at)
    assert.truthy(proc.wait_exit(pid, 30), "the child did not finish")
    return proc.read_file(log) or ""
end


describe("work_queue #zk", function()
    local root, c, other
    local pids = {}

    before_each(function()
        root = zk.new_root("workq")
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

    it("takes by priority, then in order; release gives back, ack removes", function()
        local q = c:work_queue("/q")
        assert.equal(0, q:len())
        assert.same({ nil, "timeout" }, { q:take(0) })
        assert.is_true(q:put("b1"))
        assert.is_true(q:put("a1", { priority = 5 }))
        assert.is_true(q:put("b2"))
        assert.is_true(q:put("a2", { priority = 5 }))
        assert.equal(4, q:len())
        local i1 = assert(q:take(1))
        assert.equal("a1", i1.data)
        assert.is_true(i1:held())
        -- another consumer skips the taken item
        local i2 = assert(other:work_queue("/q"):take(1))
        assert.equal("a2", i2.data)
        assert.is_true(i1:release())
        assert.same({ nil, "notheld" }, { i1:release() })
        local again = assert(q:take(1))
        assert.equal("a1", again.data)
        assert.is_true(again:ack())
        assert.is_true(i2:ack())
        assert.same({ nil, "notheld" }, { i2:ack() })
        assert.equal("b1", assert(q:take(1)).data)
        assert.equal(2, q:len())      -- taken, not acked: still in the queue
        assert.equal("b2", assert(q:take(0)).data)    -- 0: what is there now
        assert.same({ nil, "timeout" }, { q:take(0) })
    end)

    it("a waiting take wakes on a put and on a claim going", function()
        local q = c:work_queue("/w")
        local took, waited
        c:spawn(function()
            local t0 = proc.now()
            took = q:take(5)
            waited = proc.now() - t0
        end)
        c:spawn(function()
            c:waiter():sleep(0.3)
            assert(other:work_queue("/w"):put("x"))
        end)
        assert.is_true(c:run(10))
        assert.equal("x", took.data)
        -- measured at load 2: 0.33 s
        assert.is_true(waited >= 0.25 and waited < 2, waited)
        -- other takes an item; our wait ends when other releases it
        assert.is_true(took:release())
        local held = assert(other:work_queue("/w"):take(1))
        c:spawn(function() took = q:take(5) end)
        c:spawn(function()
            c:waiter():sleep(0.3)
            held:release()
        end)
        assert.is_true(c:run(10))
        assert.equal("x", took.data)
    end)

    it("a consumer's session end puts its items back; its ack says lost", function()
        local q = other:work_queue("/s")
        assert(c:work_queue("/s"):put("job"))
        local item = assert(q:take(1))
        assert.truthy(zk.expire_session(other))
        assert.truthy(zk.wait_until(function() return other:state() == "connected" end, 10,
                                    other))
        assert.is_false(item:held())
        assert.same({ nil, "lost" }, { item:ack() })
        local again = assert(c:work_queue("/s"):take(5))
        assert.equal("job", again.data)
        assert.is_true(again:ack())
        assert.equal(0, c:work_queue("/s"):len())
    end)

    it("a consumer back from an expired session leaves the next holder's claim alone", function()
        -- a's session expires on the server while a is cut off (its claim
        -- goes); c takes the item; a reconnects in a new session. The item
        -- must stay c's alone: a third consumer finds nothing to take.
        local zkcoord = require "zkcoord"
        local proxy = start_proxy()
        local a = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 4 }
        assert(c:work_queue("/x"):put("job"))
        local lost = assert(a:work_queue("/x"):take(5))
        local sid, pw = a:session_id(), a:session_password()
        assert(proxy:blackhole())
        -- a second handle joins a's session and closes it: the server expires it
        assert(zkcoord.connect { servers = zk.hosts(), session_id = sid, session_password = pw,
                                 session_timeout = 4, reconnect = false }):close()
        local item = assert(c:work_queue("/x"):take(5))
        assert.equal("job", item.data)
        assert(proxy:pass())
        assert.truthy(zk.wait_until(function()
            return a:state() == "connected" and a:session_id() ~= sid
        end, 15, a), "a did not come back")
        a:dispatch(0.3)      -- what a's new session sends on connecting is applied
        assert(a:sync("/"))
        assert.same({ nil, "lost" }, { lost:ack() })
        assert.is_true(item:held())
        local st = assert(c:exists(item.claim), "the holder's claim was deleted")
        assert.equal(c:session_id(), st.ephemeral_owner)
        assert.same({ nil, "timeout" }, { zk.client { chroot = root }:work_queue("/x"):take(0.5) })
        assert.is_true(item:ack())
        assert.equal(0, c:work_queue("/x"):len())
    end)

    it("a claim deleted by another: held() turns false, its ack deletes nothing", function()
        local q1, q2 = c:work_queue("/d", { id = "one" }), other:work_queue("/d", { id = "two" })
        assert(q1:put("job"))
        local i1 = assert(q1:take(2))
        assert(zk.admin():delete(root .. i1.claim))
        local i2 = assert(q2:take(2))
        assert.equal("job", i2.data)
        assert.truthy(zk.wait_until(function() return not i1:held() end, 5, c),
                      "held() stayed true after the claim was deleted")
        assert.same({ nil, "lost" }, { i1:ack() })
        assert.is_true(i2:held())
        assert.equal(other:session_id(), assert(c:exists(i2.claim)).ephemeral_owner)
        assert.is_true(i2:ack())
        assert.equal(0, q1:len())
    end)

    it("item:token() is its claim's czxid while held; a later claim's is larger", function()
        local q = c:work_queue("/t")
        assert(q:put("job"))
        local i1 = assert(q:take(2))
        local t1 = assert(i1:token())
        assert.equal(assert(other:exists(i1.claim)).czxid, t1)
        assert.is_true(i1:release())
        assert.same({ nil, "notheld" }, { i1:token() })
        local i2 = assert(other:work_queue("/t"):take(2))
        local t2 = assert(i2:token())
        assert.is_true(t2 > t1)
        -- lost with the session: no token
        assert.truthy(zk.expire_session(other))
        assert.is_false(i2:held())
        assert.same({ nil, "notheld" }, { i2:token() })
        assert.has_error(function() i1.token({}) end)
    end)

    it("item:on_lost(fn(reason)) tells a claim lost with the session or deleted, once", function()
        local q = c:work_queue("/lost")
        for i = 1, 3 do assert(q:put("job" .. i)) end
        -- the session ends: the item is back in the queue
        local i1 = assert(q:take(2))
        local told = {}
        i1:on_lost(function(reason) told[#told + 1] = "1:" .. reason end)
        i1:on_lost(function(reason) told[#told + 1] = "1b:" .. reason end)
        assert.truthy(zk.expire_session(c))
        assert.truthy(zk.wait_until(function() return #told >= 2 end, 10, c))
        -- "deleted" if the server removed the claim while our connection was up
        local reason = told[1]:match("^1:(.*)$")
        assert.truthy(reason == "sessionexpired" or reason == "deleted", told[1])
        assert.same({ "1:" .. reason, "1b:" .. reason }, told)
        assert.is_false(i1:held())
        assert.same({ nil, "lost" }, { i1:ack() })
        -- someone deletes our claim
        told = {}
        local i2 = assert(q:take(2))
        i2:on_lost(function(r) told[#told + 1] = "2:" .. r end)
        assert(zk.admin():delete(root .. i2.claim))
        assert.truthy(zk.wait_until(function() return #told > 0 end, 5, c))
        assert.same({ "2:deleted" }, told)
        assert.is_false(i2:held())
        -- acked, then released: never told, not by a later session end either
        local i3 = assert(q:take(2))
        local i4 = assert(q:take(2))
        i3:on_lost(function(r) told[#told + 1] = "3:" .. r end)
        i4:on_lost(function(r) told[#told + 1] = "4:" .. r end)
        assert.is_true(i3:ack())
        assert.is_true(i4:release())
        assert.truthy(zk.expire_session(c))
        assert.truthy(zk.wait_until(function() return c:state() == "connected" end, 10, c))
        c:dispatch(0.2)
        assert.same({ "2:deleted" }, told)
        assert.has_error(function() i3:on_lost("x") end,
                         "bad argument #1 to 'on_lost' (function expected, got string)")
    end)

    it("item:on_lost has run when held() first answers false, cut off past the session timeout",
       function()
        local proxy = start_proxy()
        local a = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 2 }
        assert(c:work_queue("/k"):put("job"))
        local item = assert(a:work_queue("/k"):take(5))
        local told = {}
        item:on_lost(function(reason) told[#told + 1] = reason end)
        assert(proxy:blackhole())
        -- no news from the server: the clock rule ends the session
        local at_first_false
        assert.truthy(zk.wait_until(function()
            if item:held() then return false end
            at_first_false = #told
            return true
        end, 10, a))
        assert.equal(1, at_first_false)
        assert.same({ "sessionexpired" }, told)
        assert(proxy:pass())
    end)

    it("an ack sent before its claim's deletion was seen fails lost and deletes nothing", function()
        local q = c:work_queue("/e")
        assert(q:put("job"))
        local item = assert(q:take(2))
        -- no dispatch between the delete and the ack: the ack's multi finds
        -- the claim gone, or the watch has told
        assert(zk.admin():delete(root .. item.claim))
        assert.same({ nil, "lost" }, { item:ack() })
        assert.equal(1, q:len())
        local again = assert(other:work_queue("/e"):take(2))
        assert.is_true(again:ack())
    end)

    -- Two consumers race for one item. `a` took it through a proxy that
    -- then holds every byte back DELAY s; someone deletes a's claim and
    -- `other` takes the item. a's ack() or release() runs in the gap: the
    -- claim's deletion has not reached a yet (its event is in the proxy).
    -- Returns a's item and other's.
    local function raced(path)
        local proxy = start_proxy()
        local a = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 10 }
        assert(c:work_queue(path):put("job"))
        local mine = assert(a:work_queue(path):take(5))
        assert(proxy:delay(DELAY))
        local t0 = proc.now()
        assert(zk.admin():delete(root .. mine.claim))
        local theirs = assert(other:work_queue(path):take(5))
        assert.equal(mine.claim, theirs.claim)
        -- the deletion's event left the server after t0: it is still held back
        local late = proc.now() - t0
        assert.is_true(late < DELAY - 0.2, "the machine was too slow: took after " .. late)
        return mine, theirs
    end

    -- Another's claim and item are untouched: other holds the item.
    local function untouched(path, theirs)
        assert.is_true(theirs:held())
        assert.equal(other:session_id(), assert(c:exists(theirs.claim)).ephemeral_owner)
        assert.equal(1, c:work_queue(path):len())
        assert.is_true(theirs:ack())
        assert.equal(0, c:work_queue(path):len())
    end

    it("an ack in the gap before its claim's loss reached it deletes nothing of another's",
       function()
        -- before: the ack's multi deleted other's claim and the item, true
        local mine, theirs = raced("/gap")
        assert.same({ nil, "lost" }, { mine:ack() })
        assert.is_false(mine:held())
        untouched("/gap", theirs)
    end)

    it("a release in the gap before its claim's loss reached it leaves another's claim",
       function()
        -- before: the release deleted other's claim (the item free for a
        -- third consumer while other works on it), true
        local mine, theirs = raced("/gapr")
        assert.same({ nil, "lost" }, { mine:release() })
        assert.is_false(mine:held())
        untouched("/gapr", theirs)
    end)

    it("an ack of an item deleted by another gives its claim back", function()
        local q = c:work_queue("/f")
        assert(q:put("job"))
        local item = assert(q:take(2))
        assert(zk.admin():delete(root .. item.path))
        assert.same({ nil, "nonode" }, { item:ack() })
        assert.is_false(item:held())
        assert.truthy(zk.wait_until(function()
            return #assert(c:children("/f/taken")) == 0
        end, 3, c), "the claim stayed in taken/")
    end)

    it("takes kazoo's items (entry-<priority>-<seq>) in its order", function()
        assert(c:create("/k/entries", nil, { parents = true }))
        assert(c:create("/k/entries/entry-100-", "kazoo-late", { sequential = true }))
        assert(c:work_queue("/k"):put("ours", { priority = 100 }))
        assert(c:create("/k/entries/entry-001-", "kazoo-urgent", { sequential = true }))
        assert(c:create("/k/entries/other", "not an item"))
        local q = other:work_queue("/k")
        assert.equal(3, q:len())
        assert.equal("kazoo-urgent", assert(q:take(1)).data)
        assert.equal("kazoo-late", assert(q:take(1)).data)
        assert.equal("ours", assert(q:take(1)).data)
        assert.same({ nil, "timeout" }, { q:take(0) })
        assert.truthy(c:exists("/k/taken/entry-001-0000000002"))
    end)

    it("puts items kazoo's LockingQueue takes in priority, then arrival order", function()
        -- Mixed: ours, then kazoo's, then ours again, priorities interleaved.
        local q = c:work_queue("/mixed")
        local want = {}
        local function ours(prio, data)
            assert(q:put(data, { priority = prio }))
            want[#want + 1] = { prio, #want, data }
        end
        ours(100, "z1-100")
        ours(5, "z2-5")
        ours(100, "z3-100")
        local kput = { { 5, "k1-5" }, { 100, "k2-100" }, { 0, "k3-0" }, { 5, "k4-5" } }
        local args = { "put" }
        for _, k in ipairs(kput) do
            args[#args + 1] = k[1] .. ":" .. k[2]
            want[#want + 1] = { k[1], #want, k[2] }
        end
        assert.equal("", kazoo(zk.hosts() .. root, "/mixed", args))
        ours(5, "z4-5")
        ours(999, "z5-999")
        ours(0, "z6-0")
        -- our names are kazoo's: entry-<ppp>-<seq>
        local names = assert(c:children("/mixed/entries"))
        table.sort(want, function(a, b)
            if a[1] ~= b[1] then return a[1] < b[1] end
            return a[2] < b[2]
        end)
        local expect = {}
        for i, w in ipairs(want) do expect[i] = w[3] end
        local got = {}
        for line in kazoo(zk.hosts() .. root, "/mixed", { "take", "20", "1" }):gmatch("[^\n]+") do
            got[#got + 1] = line
        end
        table.insert(expect, "none")
        assert.same(expect, got)
        assert.equal(0, q:len())
        for _, name in ipairs(names) do
            assert.matches("^entry%-%d%d%d%-%d%d%d%d%d%d%d%d%d%d$", name)
        end
    end)

    it("an ack's receipt goes after it; one left behind is swept by a take, never taken", function()
        local q = c:work_queue("/rcpt")
        local function receipts()
            local names = assert(c:children("/rcpt/taken"))
            table.sort(names)
            return names
        end
        assert(q:put("one"))
        assert.is_true(assert(q:take(1)):ack())
        assert.truthy(zk.wait_until(function() return #receipts() == 0 end, 5, c),
                      "the ack's receipt stayed")
        -- left by ackers that died: one kept 1 s, one kept an hour
        assert(c:create("/rcpt/taken/ack-1", "1"))
        assert(c:create("/rcpt/taken/ack-2", "3600"))
        for _, d in ipairs { "two", "three", "four" } do assert(q:put(d)) end
        -- a take reads both: ack-2 is young and stays (ack-1 too, unless
        -- this machine took a second to get here)
        local item = assert(q:take(1))
        assert.equal("two", item.data)
        assert.is_true(item:ack())
        -- kazoo's consumer takes the items, not the receipts
        assert.equal("three\n", kazoo(zk.hosts() .. root, "/rcpt", { "take", "1", "1" }))
        assert.truthy(zk.wait_until(function() return #receipts() <= 2 end, 5, c),
                      "the ack's receipt stayed")
        local left = receipts()
        assert.equal("ack-2", left[#left])
        c:waiter():sleep(1.5)    -- ack-1 is past its time (a lower bound: no race)
        item = assert(q:take(1))
        assert.equal("four", item.data)
        assert.truthy(zk.wait_until(function() return #receipts() == 2 end, 5, c),
                      "the take did not sweep the old receipt")
        assert.same({ "ack-2", item.claim:match("[^/]+$") }, receipts())
        -- nor does `zkcoord locks` take one for a lock's node
        assert.is_nil(require("zkcoord.cli.locks").classify("ack-12884901889"))
        assert.is_true(item:ack())
        assert.same({ nil, "timeout" }, { q:take(0) })
        assert.equal(0, q:len())
    end)

    it("still takes items named as before (_c_<uuid>-p<ppp>-entry-<seq>), in order", function()
        assert(c:create("/old/entries", nil, { parents = true }))
        local e = "/old/entries/"
        assert(c:create(e .. "_c_11111111-1111-4111-8111-111111111111-p100-entry-", "old-100",
                        { sequential = true }))
        assert(c:work_queue("/old"):put("new-100"))
        assert(c:create(e .. "_c_22222222-2222-4222-8222-222222222222-p005-entry-", "old-5",
                        { sequential = true }))
        assert(c:work_queue("/old"):put("new-5", { priority = 5 }))
        local q = other:work_queue("/old")
        for _, want in ipairs({ "old-5", "new-5", "old-100", "new-100" }) do
            local item = assert(q:take(1))
            assert.equal(want, item.data)
            assert.is_true(item:ack())
        end
    end)

    it("a put whose reply was lost is not put again when its item was acked meanwhile", function()
        -- The producer's put reaches the server, a consumer takes and acks
        -- the item, the put's reply is lost. The producer reconnects in the
        -- same session and must find that its put happened, though the
        -- item is gone.
        local q = c:work_queue("/lost")
        local log = reply_lost(pids, "put", root .. "/lost", "ready", function()
            assert.is_true(assert(q:take(5)):ack())    -- "first"
            local item = assert(q:take(10))
            assert.equal("once", item.data)
            assert.is_true(item:ack())
        end)
        assert.equal("put true nil", log:match("put [^\n]*"))
        -- put once, acked once: nothing is left to take
        assert.equal(0, q:len())
        assert.same({ nil, "timeout" }, { q:take(0.5) })
    end)

    it("a put that timed out is undone when its reply comes late", function()
        local proxy = start_proxy()
        local slow = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 10 }
        local q = slow:work_queue("/late")
        assert.is_true(q:put("first"))
        assert.is_true(assert(other:work_queue("/late"):take(5)):ack())
        assert(proxy:delay(1))
        assert.same({ nil, "timeout" }, { q:put("late", { timeout = 0.5 }) })
        -- the put reaches the server, its reply comes after we gave up: undone
        assert.truthy(zk.wait_until(function() return other:work_queue("/late"):len() == 1 end,
                                    5, slow), "the put never reached the server")
        assert.truthy(zk.wait_until(function() return other:work_queue("/late"):len() == 0 end,
                                    10, slow), "the late item stayed")
        assert.truthy(zk.wait_until(function() return #assert(other:children("/late/puts")) == 0 end,
                                    10, slow), "the late receipt stayed")
    end)

    it("a put given up on whose reply was lost is undone: its item found by czxid", function()
        -- The put reaches the server, the producer stops waiting (timeout),
        -- the reply is lost; back in the same session, its receipt says the
        -- put happened, and the item with the receipt's czxid is deleted.
        local q = c:work_queue("/undo")
        local log = reply_lost(pids, "late", root .. "/undo", "ready", function()
            assert.is_true(assert(q:take(5)):ack())    -- "first"
            assert.truthy(zk.wait_until(function() return q:len() == 1 end, 2 * DELAY, c),
                          "the put did not reach the server")
            -- kazoo's name on an item a put may undo
            assert.matches("^entry%-100%-", assert(c:children("/undo/entries"))[1])
        end)
        assert.equal("late nil timeout", log:match("late [^\n]*"))
        assert.truthy(zk.wait_until(function() return q:len() == 0 end, 10, c), "the item stayed")
        assert.same({}, assert(c:children("/undo/puts")))
    end)

    it("an ack whose reply was lost answers true when it happened", function()
        -- The consumer's ack reaches the server (the item goes), its reply
        -- is lost. The ack's write is its second round trip.
        assert(c:work_queue("/acked"):put("job"))
        local log = reply_lost(pids, "ack", root .. "/acked", "took job", function()
            assert.truthy(zk.wait_until(function() return c:work_queue("/acked"):len() == 0 end,
                                        4 * DELAY, c), "the ack did not reach the server")
        end)
        assert.equal("ack true nil", log:match("ack [^\n]*"))
    end)

    -- Runs fn(go) when client `a` sends its next multi (an ack's write,
    -- after its look at the claim); go() sends it and returns its future.
    local function around_write(a, fn)
        local send = a.send
        a.send = function(self, op, ...)
            if op ~= "multi" then
                return send(self, op, ...)
            end
            a.send = nil    -- the class's again
            local ops = ...
            return fn(function() return send(self, op, ops) end)
        end
    end

    -- Through a proxy, a consumer with a short session takes "job"; then
    -- the proxy turns `mode` on, or with `at_write`, as the consumer's
    -- write goes out. Returns the consumer, its item, its session id and
    -- the proxy.
    local SHORT = 2
    local function taken_through_proxy(path, mode, opts, at_write)
        local proxy = start_proxy()
        local o = { servers = proxy.hosts, chroot = root, session_timeout = SHORT }
        for k, v in pairs(opts or {}) do o[k] = v end
        local a = zk.client(o)
        assert(c:work_queue(path):put("job"))
        local item = assert(a:work_queue(path):take(5))
        local sid = a:session_id()
        if not at_write then
            assert(proxy:set(mode))
        else
            around_write(a, function(go)
                assert(proxy:set(mode))
                return go()
            end)
        end
        return a, item, sid, proxy
    end

    -- The fault ends once the client counts its session lost (the clock
    -- rule: no reply for the session timeout).
    local function pass_when_lost(a, proxy)
        a:on_state(function(new)
            if new == "lost" then assert(proxy:pass()) end
        end)
    end

    it("an ack whose reply was dropped past the session timeout answers true", function()
        -- The ack reaches the server (claim and item go), no reply comes
        -- back until the session counts lost; the new session sees the item
        -- gone: the ack happened (before: "lost").
        local a, item, sid, proxy = taken_through_proxy("/dropped", "dropreplies",
                                                        { request_timeout = 3 * SHORT }, true)
        pass_when_lost(a, proxy)
        assert.same({ true }, { item:ack() })
        assert.not_equal(sid, a:session_id())
        assert.is_false(item:held())
        assert.equal(0, c:work_queue("/dropped"):len())
        assert.same({ nil, "notheld" }, { item:ack() })
        -- its receipt, read, is deleted
        assert.truthy(zk.wait_until(function() return #assert(c:children("/dropped/taken")) == 0 end,
                                    5, c), "the ack's receipt stayed")
    end)

    it("an ack left unknown when its session ended is decided by the next ack()", function()
        -- Replies stay dropped for the whole ack (the request timeout, the
        -- session timeout by default): "unknown", never "lost"; back in a
        -- new session, ack() again finds the item gone: true.
        local a, item, sid, proxy = taken_through_proxy("/later", "dropreplies", nil, true)
        assert.same({ nil, "unknown" }, { item:ack() })
        assert.equal(0, c:work_queue("/later"):len())    -- it did happen
        assert(proxy:pass())
        assert.truthy(zk.wait_until(function()
            return a:state() == "connected" and a:session_id() ~= sid
        end, 5 * SHORT, a), "a did not come back in a new session")
        assert.same({ true }, { item:ack() })
        assert.same({ nil, "notheld" }, { item:ack() })
    end)

    it("an ack lost with its session is not answered by another consumer's ack (seed 802140)",
       function()
        -- Our ack's multi is black-holed (never applied) and the session
        -- ends; the server expires it, another consumer takes the item and
        -- acks it. Back in a new session, ack() finds claim and item gone
        -- and no receipt of ours: "lost" (before: true, from the other's ack).
        -- (The request timeout keeps the receipt 60 s: its absence decides
        -- for 30 s, however slow the machine.)
        local a, item, sid, proxy = taken_through_proxy("/stolen", "blackhole",
                                                        { request_timeout = 3 * SHORT }, true)
        assert.same({ nil, "unknown" }, { item:ack() })
        -- the take waits on the claims' watch: our old session's claim goes first
        local theirs = assert(other:work_queue("/stolen"):take(10 * SHORT))
        assert.equal("job", theirs.data)
        assert.is_true(theirs:ack())
        assert(proxy:pass())
        assert.truthy(zk.wait_until(function()
            return a:state() == "connected" and a:session_id() ~= sid
        end, 5 * SHORT, a), "a did not come back in a new session")
        assert.same({ nil, "lost" }, { item:ack() })
        assert.is_false(item:held())
        assert.same({ nil, "notheld" }, { item:ack() })
        assert.same({}, assert(c:children("/stolen/taken")))
    end)

    -- As above, with session and request timeout 1 s: our receipt would be
    -- kept 10 s, so its absence decides only for 5 s after the ack began.
    -- The next ack() comes later: returns what it answers.
    local function asked_past_the_keep(path, stolen)
        local a, item, sid, proxy = taken_through_proxy(path, "blackhole",
                                                        { session_timeout = 1, request_timeout = 1 },
                                                        true)
        local t0 = proc.now()
        assert.same({ nil, "unknown" }, { item:ack() })
        if stolen then
            local theirs = assert(other:work_queue(path):take(10))
            assert.is_true(theirs:ack())
        end
        c:waiter():sleep(math.max(0, 5.5 - (proc.now() - t0)))    -- a lower bound: no race
        assert(proxy:pass())
        assert.truthy(zk.wait_until(function()
            return a:state() == "connected" and a:session_id() ~= sid
        end, 5, a), "a did not come back in a new session")
        return item
    end

    it("an ack asked when its receipt may be swept: the item gone is unknown, never a guess",
       function()
        -- (before: true, from the other consumer's ack)
        local item = asked_past_the_keep("/swept", true)
        assert.same({ nil, "unknown" }, { item:ack() })
        assert.same({ nil, "unknown" }, { item:ack() })
        assert.equal(0, c:work_queue("/swept"):len())
    end)

    it("an ack asked when its receipt may be swept: the item still there is lost", function()
        local item = asked_past_the_keep("/kept", false)
        assert.same({ nil, "lost" }, { item:ack() })
        assert.is_false(item:held())
        local again = assert(other:work_queue("/kept"):take(5))
        assert.is_true(again:ack())
    end)

    it("an ack that never reached the server past the session timeout answers lost", function()
        -- Black-holed both ways: the ack is not applied; once the session
        -- counts lost the item is back in the queue, and ack() says so.
        local a, item, _, proxy = taken_through_proxy("/never", "blackhole",
                                                      { request_timeout = 3 * SHORT })
        pass_when_lost(a, proxy)
        assert.same({ nil, "lost" }, { item:ack() })
        assert.is_false(item:held())
        local again = assert(c:work_queue("/never"):take(3 * SHORT))
        assert.equal("job", again.data)
        assert.is_true(again:ack())
        assert.equal(0, c:work_queue("/never"):len())
    end)

    -- A consumer takes "job" from `path`; just before its ack's multi goes
    -- out, its claim is deleted (so the multi is not applied), `meanwhile()`
    -- runs, and the connection is cut before the reply. Returns what the
    -- ack answered, the consumer, its item and its session id before.
    local function ack_without_claim(path, meanwhile)
        local proxy = start_proxy()
        local a = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 10 }
        assert(c:work_queue(path):put("job"))
        local item = assert(a:work_queue(path):take(5))
        local sid = a:session_id()
        around_write(a, function(go)
            assert(zk.admin():delete(root .. item.claim))
            meanwhile()
            assert(proxy:delay(1))    -- its reply cannot come before the cut
            local f = go()
            assert(proxy:cut())
            assert(proxy:pass())
            return f
        end)
        return { item:ack() }, a, item, sid
    end

    it("an ack whose claim someone deleted and whose reply was lost says lost; the item stays",
       function()
        -- Back in the same session the claim is gone: the item decides
        -- (before: taken for the ack's doing, true, and the item stayed in
        -- the queue for a second consumer to do again).
        local res, a, item, sid = ack_without_claim("/undone", function() end)
        assert.same({ nil, "lost" }, res)
        assert.equal(sid, a:session_id())
        assert.is_false(item:held())
        assert.equal(1, c:work_queue("/undone"):len())
        local again = assert(other:work_queue("/undone"):take(5))
        assert.is_true(again:ack())
    end)

    it("an ack whose claim was deleted and the item acked by another, reply lost, says lost",
       function()
        -- As above, but another consumer takes and acks the item before
        -- our multi goes out (not applied: our claim is gone). Back in the
        -- same session claim and item are gone, and no receipt of ours:
        -- "lost" (before: true, from the other's ack).
        local res, a, item, sid = ack_without_claim("/taken2", function()
            local theirs = assert(other:work_queue("/taken2"):take(5))
            assert.is_true(theirs:ack())
        end)
        assert.same({ nil, "lost" }, res)
        assert.equal(sid, a:session_id())
        assert.is_false(item:held())
        assert.equal(0, c:work_queue("/taken2"):len())
    end)

    it("after client:close() an item is not held, not told lost, and ack() says closed", function()
        -- before: held() still answered true after the close
        local a = zk.client { chroot = root }
        assert(c:work_queue("/closed"):put("job"))
        local item = assert(a:work_queue("/closed"):take(5))
        local told = {}
        item:on_lost(function(r) told[#told + 1] = r end)
        a:close()
        assert.is_false(item:held())
        assert.same({}, told)
        assert.same({ nil, "closed" }, { item:ack() })
        assert.same({ nil, "closed" }, { item:release() })
        -- the claim went with the closed session: the item is back
        local again = assert(c:work_queue("/closed"):take(5))
        assert.is_true(again:ack())
    end)

    it("raises on bad arguments", function()
        local q = c:work_queue("/b")
        assert.has_error(function() q:put(5) end)
        assert.has_error(function() q:put("x", { priority = 1000 }) end)
        assert.has_error(function() q:put("x", { priority = 1.5 }) end)
        assert.has_error(function() q:put("x", { bogus = 1 }) end)
        assert.has_error(function() q:take(-1) end)
        assert.has_error(function() c:work_queue("rel") end)
        assert.has_error(function() c:work_queue("/b", { id = 5 }) end)
        assert.has_error(function() q.take({}, 1) end)
    end)

    it("3 producers x 100 items, 4 consumers, one SIGKILLed: each item acked once", function()
        local path = root .. "/many"
        local clogs = {}
        for i = 1, 4 do
            clogs[i] = ("%s/wq-c-%d-%d.log"):format(zk.tmpdir(), proc.getpid(), i)
            os.remove(clogs[i])
            -- consumer 1 holds its item 30 s: the kill lands while it holds
            -- it (with a short hold, a test process stalled by load killed
            -- it between its ack and the ack's log line: an item acked
            -- and logged by nobody)
            pids[#pids + 1] = assert(zk.spawn_lua(CONSUMER, { path, i == 1 and 30 or 0 },
                                                  clogs[i]))
        end
        local victim = pids[1]
        local producers = {}
        for i = 1, 3 do
            producers[i] = assert(zk.spawn_lua(PRODUCER, { path, "p" .. i, 100 }))
            pids[#pids + 1] = producers[i]
        end
        -- kill consumer 1 while it holds an item it took
        assert.truthy(zk.wait_until(function()
            return (proc.read_file(clogs[1]) or ""):find("took") ~= nil
        end, 20), "consumer 1 took nothing")
        proc.kill(victim, "KILL")
        for _, pid in ipairs(pids) do
            if pid ~= victim then
                assert.truthy(proc.wait_exit(pid, 60), "a process did not finish")
            end
        end
        local acked, dup = {}, {}
        local victim_unacked
        for i = 1, 4 do
            local last_took
            for line in (proc.read_file(clogs[i]) or ""):gmatch("[^\n]+") do
                local what, data = line:match("^(%S+) (%S+)")
                if what == "took" then
                    last_took = data
                elseif what == "ack" then
                    if acked[data] then dup[#dup + 1] = data end
                    acked[data] = true
                    last_took = nil
                end
            end
            if i == 1 then victim_unacked = last_took end
        end
        if #dup > 0 then    -- the evidence, for a failure seen once under heavy load
            for i = 1, 4 do
                print(("\n[work_queue] consumer %d log:\n%s"):format(i, proc.read_file(clogs[i]) or ""))
            end
        end
        assert.same({}, dup)
        local missing = {}
        for p = 1, 3 do
            for k = 1, 100 do
                if not acked["p" .. p .. "-" .. k] then missing[#missing + 1] = p .. "-" .. k end
            end
        end
        assert.same({}, missing)
        -- the item the victim held went back and was acked by another consumer
        assert.truthy(victim_unacked, "the victim held no item when killed")
        assert.is_true(acked[victim_unacked])
        assert.equal(0, c:work_queue("/many"):len())
    end)
end)
