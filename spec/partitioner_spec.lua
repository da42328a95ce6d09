-- Group membership and the partitioner against a real server: members and
-- their data, re-joining after expiry; partitions covered exactly once
-- when stable and never owned by two members at once while members join,
-- leave and lose their session.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local tcpproxy = require "helpers.tcpproxy"
local util = require "zkcoord.util"
local contract = require "zkcoord.contract"

-- Pumps every client until cond() holds (or the timeout).
local function settle(clients, cond, timeout)
    local deadline = proc.now() + (timeout or 10)
    while true do
        if cond() then
            return true
        end
        if proc.now() > deadline then
            return false
        end
        for _, cl in ipairs(clients) do
            if cl:state() ~= "closed" then cl:dispatch(0.01) end
        end
    end
end

describe("group #zk", function()
    local root, c, other

    before_each(function()
        root = zk.new_root("group")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("members, data, on_change, leave; Curator GroupMember's layout", function()
        local a = c:group("/g", { id = "a", data = "data-a" })
        local b = other:group("/g", { id = "b", data = "data-b" })
        local seen = {}
        assert(a:on_change(function(m) seen[#seen + 1] = m end))
        assert.same({}, seen[1])
        assert.is_true(a:join(5))
        assert.is_true(b:join(5))
        assert.same({ a = "data-a", b = "data-b" }, a:members())
        assert.truthy(settle({ c, other }, function()
            local last = seen[#seen]
            return last.a and last.b
        end))
        assert.equal("data-b", (c:get("/g/b")))
        assert.equal(other:session_id(), (c:exists("/g/b")).ephemeral_owner)
        assert.truthy(b:set("data-b2"))
        assert.equal("data-b2", b:members().b)
        assert.is_true(b:leave())
        assert.truthy(settle({ c, other }, function()
            return seen[#seen].b == nil
        end))
        assert.same({ a = "data-a" }, a:members())
        a:close()
    end)

    it("a member is back after its session expires", function()
        local b = other:group("/g", { id = "b", data = "x" })
        assert.is_true(b:join(5))
        assert.truthy(zk.expire_session(other))
        assert.truthy(settle({ c, other }, function()
            local st = c:exists("/g/b")
            return st and st.ephemeral_owner == other:session_id()
        end))
        assert.same({ b = "x" }, c:group("/g", { id = "z" }):members())
        b:close()
    end)

    -- Issue 33: a persistent node with the member's name never goes by
    -- itself: join() says so at once instead of timing out.
    it("join() answers nodeexists at once when a persistent node has our name", function()
        assert(other:create("/g/a", "old", { parents = true }))
        local a = c:group("/g", { id = "a", data = "data-a" })
        local t0 = proc.now()
        assert.same({ nil, "nodeexists" }, { a:join(5) })
        assert.is_true(proc.now() - t0 < 1, "took " .. (proc.now() - t0))
        assert.equal("old", (other:get("/g/a")))
        a:close()
        assert.equal("old", (other:get("/g/a")))
    end)

    -- Issue 28: a view whose data reads were cut off half-way is read again
    -- once connected: it equals the server's members within a round trip
    -- of the heal. The cut falls exactly between the listing (which saw b)
    -- and b's data read: that read is held in the proxy (2 s delay) and the
    -- connection is cut under it, so it fails.
    it("a view cut off half-way converges once connected again", function()
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)"))))
        local pc = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 6 }
        local view, t_view, t_conn
        local g = pc:group("/g", { id = "watcher" })
        assert(g:on_change(function(m) view, t_view = m, proc.now() end))
        pc:on_state(function(st) if st == "connected" then t_conn = proc.now() end end)
        local cut = false
        pc.send = function(cl, op, path, ...)
            if cut or op ~= "get" or path ~= "/g/b" then
                return getmetatable(cl).__index.send(cl, op, path, ...)
            end
            cut = true
            assert(proxy:delay(2))
            local f = getmetatable(cl).__index.send(cl, op, path, ...)
            assert(proxy:cut())
            assert(proxy:pass())
            return f
        end
        local sid = pc:session_id()
        local b = other:group("/g", { id = "b", data = "data-b" })
        assert.is_true(b:join(5))
        assert.truthy(settle({ pc, other }, function() return cut and pc:state() == "connected" end))
        pc.send = nil
        assert.truthy(settle({ pc, other }, function() return view and view.b == "data-b" end, 5),
                      "the view never saw b")
        assert.equal(sid, pc:session_id())
        -- a round trip after the reconnect (measured 0.002-0.09 s, one server, load 5)
        assert.is_true(t_view - t_conn < 1, ("took %.3f s"):format(t_view - t_conn))
        g:close()
        b:close()
        pc:close()
        proxy:stop()
    end)

    it("raises on bad arguments", function()
        assert.has_error(function() c:group("/g", { id = "" }) end,
            "bad argument #2 to 'group' (id must be a non-empty string without '/' or control "
            .. 'characters, got "")')
        assert.has_error(function() c:group("/g", { id = "a/b" }) end)
        assert.has_error(function() c:group("/g", { id = 5 }) end)
        assert.has_error(function() c:group("/g", { id = "a", data = 5 }) end,
                         "bad argument #2 to 'group' (data must be a string or nil, got number)")
        assert.has_error(function() c:group("/g", { id = "a", bogus = 1 }) end)
        assert.has_error(function() c:group("/g", { id = "a" }):on_change(5) end)
        -- the deprecated positional form checks its arguments as before
        assert.has_error(function() c:group("/g", "") end)
        assert.has_error(function() c:group("/g", "a/b") end)
        assert.has_error(function() c:group("/g", 5) end)
        assert.has_error(function() c:group("/g", nil, "data") end)
        assert.has_error(function() c:group("/g", "a", 5) end,
                         "bad argument #3 to 'group' (data must be a string or nil, got number)")
        -- no id: "<hostname>:<pid>", as an election's
        assert.matches(":%d+$", c:group("/g").id)
    end)

    it("the positional group(path, id, data) still works and warns once per process", function()
        util.deprecated_reset()
        local warned = {}
        local lc = zk.client { chroot = root, logger = function(_, msg)
            if msg:find("deprecated", 1, true) then warned[#warned + 1] = msg end
        end }
        local a = lc:group("/g", "a", "data-a")
        local b = lc:group("/g", "b")
        assert.equal("a", a.id)
        assert.is_true(a:join(5))
        assert.is_true(b:join(5))
        assert.same({ a = "data-a", b = "" }, assert(other:group("/g", {}):members()))
        assert.equal(1, #warned)
        assert.truthy(warned[1]:find("client:group(path, id, data) is deprecated", 1, true))
        assert.truthy(warned[1]:find("use client:group(path, { id =, data = })", 1, true))
        -- the new form tells nothing
        lc:group("/g", { id = "c" })
        util.deprecated_reset()
        lc:group("/g", { id = "d", data = "x" })
        assert.equal(1, #warned)
    end)
end)

describe("partitioner #zk", function()
    local root
    local clients

    before_each(function()
        root = zk.new_root("part")
        clients = {}
        for i = 1, 3 do clients[i] = zk.client { chroot = root, session_timeout = 2 } end
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("covers every partition once when stable, never twice at a moment", function()
        local N = 8
        local views = {}          -- member -> set of partitions it believes it owns
        local overlaps = {}
        local function record(id)
            return function(owned)
                local set = {}
                for _, p in ipairs(owned) do set[p] = true end
                views[id] = set
                for p in pairs(set) do
                    for other_id, other in pairs(views) do
                        if other_id ~= id and other[p] then
                            overlaps[#overlaps + 1] = ("%d: %s and %s"):format(p, id, other_id)
                        end
                    end
                end
            end
        end
        local function covered(ps)
            local count = {}
            for _, p in ipairs(ps) do
                for _, q in ipairs(p:owned()) do count[q] = (count[q] or 0) + 1 end
            end
            for q = 0, N - 1 do
                if count[q] ~= 1 then return false end
            end
            for _, p in ipairs(ps) do     -- and every member has its share
                if #p:owned() == 0 then return false end
            end
            return true
        end
        local parts = {}
        for i, id in ipairs { "a", "b", "c" } do
            parts[i] = assert(clients[i]:partitioner("/p", { partitions = N, id = id }))
            parts[i]:on_change(record(id))
            assert.truthy(settle(clients, function() return covered(parts) end),
                          "not covered with " .. i .. " members")
        end
        -- stable with three: the sorted ids share them round-robin
        assert.same({ 0, 3, 6 }, parts[1]:owned())
        assert.same({ 1, 4, 7 }, parts[2]:owned())
        assert.same({ 2, 5 }, parts[3]:owned())
        -- b leaves
        parts[2]:close()
        table.remove(parts, 2)
        assert.truthy(settle(clients, function() return covered(parts) end), "not covered")
        assert.same({ 0, 2, 4, 6 }, parts[1]:owned())
        -- c's session expires: it drops everything at once, then takes its share again
        local dropped = false
        parts[2]:on_change(function(owned) if #owned == 0 then dropped = true end end)
        assert.truthy(zk.expire_session(clients[3]))
        assert.truthy(settle(clients, function() return dropped and covered(parts) end, 15),
                      "not covered after the expiry")
        assert.same({ 1, 3, 5, 7 }, parts[2]:owned())
        assert.same({}, overlaps)
        for _, p in ipairs(parts) do p:close() end
        clients[1]:sync("/p/owners")
        assert.same({}, clients[1]:children("/p/owners"))
    end)

    -- Separate processes; one joins late, one is SIGKILLed. From their logs
    -- (monotonic clock, shared by the processes): no partition is owned by
    -- two members at any moment, and once stable every one has one owner.
    it("across processes, with one SIGKILLed: never two owners, then full coverage", function()
        local N, path = 8, root .. "/procs"
        local MEMBER = [[
local zkcoord = require "zkcoord"
local core = require "zkcoord.core"
local path, name, n, seconds = ...
io.stdout:setvbuf("line")
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 2 })
local p = assert(c:partitioner(path, { partitions = tonumber(n), id = name }))
p:on_change(function(owned)
    io.stdout:write(("owned %.6f %s\n"):format(core.now(), table.concat(owned, ",")))
end)
local stop = core.now() + tonumber(seconds)
while core.now() < stop do c:dispatch(0.05) end
p:close()
io.stdout:write(("closed %.6f\n"):format(core.now()))
c:close()
]]
        local logs, mpids = {}, {}
        local function start(i, seconds)
            logs[i] = ("%s/part-%d-%d.log"):format(zk.tmpdir(), proc.getpid(), i)
            os.remove(logs[i])
            mpids[i] = assert(zk.spawn_lua(MEMBER, { path, "m" .. i, N, seconds }, logs[i]))
        end
        for i = 1, 3 do start(i, 9) end
        proc.sleep(1.5)
        start(4, 7.5)
        proc.sleep(1.5)
        local killed_at = proc.now()
        proc.kill(mpids[2], "KILL")
        local stable_at = killed_at + 4.5          -- the 2 s session expired, shares moved
        for i, pid in ipairs(mpids) do
            if i ~= 2 then assert.truthy(proc.wait_exit(pid, 20), "member " .. i) end
        end
        -- Ownership intervals per partition: [from, to) per member.
        local intervals = {}
        for q = 0, N - 1 do intervals[q] = {} end
        local at_stable = {}
        for i = 1, 4 do
            local held, since = {}, {}
            local last_t
            local function drop(q, t)
                intervals[q][#intervals[q] + 1] = { i, since[q], t }
                held[q] = nil
            end
            for line in (proc.read_file(logs[i]) or ""):gmatch("[^\n]+") do
                local what, t, list = line:match("^(%S+) (%S+) ?(.*)$")
                t = tonumber(t)
                if what == "owned" then
                    local now_set = {}
                    for q in list:gmatch("%d+") do now_set[tonumber(q)] = true end
                    for q in pairs(held) do
                        if not now_set[q] then drop(q, t) end
                    end
                    for q in pairs(now_set) do
                        if not held[q] then held[q], since[q] = true, t end
                    end
                    if t <= stable_at then
                        at_stable[i] = now_set
                    end
                    last_t = t
                elseif what == "closed" then
                    for q in pairs(held) do drop(q, t) end
                    last_t = t
                end
            end
            -- the killed member acts no more: its view ends with it
            for q in pairs(held) do drop(q, i == 2 and killed_at or last_t) end
        end
        for q = 0, N - 1 do
            local iv = intervals[q]
            for a = 1, #iv do
                for b = a + 1, #iv do
                    local x, y = iv[a], iv[b]
                    if x[1] ~= y[1] then
                        assert.is_false(x[2] < y[3] and y[2] < x[3],
                            ("partition %d: member %d [%.3f, %.3f) and member %d [%.3f, %.3f)")
                                :format(q, x[1], x[2], x[3], y[1], y[2], y[3]))
                    end
                end
            end
        end
        -- Stable after the kill: members 1, 3 and 4 own every partition once.
        local count = {}
        for _, i in ipairs { 1, 3, 4 } do
            for q in pairs(at_stable[i] or {}) do count[q] = (count[q] or 0) + 1 end
        end
        for q = 0, N - 1 do
            assert.equal(1, count[q], "partition " .. q .. " after the kill")
        end
    end)

    -- Issue 28: a member owns only the node it created in its session. Its
    -- node deleted by someone else and made by another session is no longer
    -- owned, and giving the partition up never deletes the other's node.
    it("never claims or deletes another session's owner node at its path", function()
        local c, other = clients[1], clients[2]
        local p = assert(c:partitioner("/p", { partitions = 2, id = "a" }))
        assert.truthy(settle(clients, function() return #p:owned() == 2 end))
        assert(other:delete("/p/owners/0"))
        assert(other:create("/p/owners/0", "intruder", { ephemeral = true }))
        assert.truthy(settle(clients, function()
            return table.concat(p:owned(), ",") == "1"
        end), "still claims partition 0")
        -- it waits on the other's node and takes the partition once it goes
        assert(other:delete("/p/owners/0"))
        assert.truthy(settle(clients, function() return #p:owned() == 2 end))
        assert.equal(c:session_id(), (other:exists("/p/owners/0")).ephemeral_owner)
        -- the other's node again; giving 0 up (closing) must leave it alone
        assert(other:delete("/p/owners/0"))
        assert(other:create("/p/owners/0", "intruder", { ephemeral = true }))
        settle(clients, function() return table.concat(p:owned(), ",") == "1" end)
        p:close()
        local st = other:exists("/p/owners/0")
        assert.truthy(st, "the other session's node was deleted")
        assert.equal(other:session_id(), st.ephemeral_owner)
    end)

    -- A chaos run: after a reconnect, a member never took its share; the
    -- partition had no owner node and the watch the member waited on never
    -- fired. A reconnect now looks at every partition it waits for again.
    -- The lost watch is played by removing it.
    it("after a reconnect, takes a partition it waited for even if the watch never fires", function()
        local other = clients[2]
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)"))))
        local pc = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 6 }
        local all = { pc, other }
        assert(other:create("/w/owners/0", "intruder", { ephemeral = true, parents = true }))
        local p = assert(pc:partitioner("/w", { partitions = 2, id = "a" }))
        assert.truthy(settle(all, function() return table.concat(p:owned(), ",") == "1" end))
        -- the member waits on the other's node: that watch is lost
        assert.truthy(pc:remove_watches("/w/owners/0") >= 1, "no watch on the other's node")
        assert(other:delete("/w/owners/0"))
        assert.falsy(settle(all, function() return #p:owned() == 2 end, 1), "the watch still fired")
        -- a cut and a reconnect in the same session
        local conn = contract.connection(pc)
        assert(proxy:cut())
        assert.truthy(settle(all, function()
            return contract.connection(pc) > conn and pc:state() == "connected"
        end), "no reconnect")
        assert.truthy(settle(all, function() return #p:owned() == 2 end), "partition 0 never taken")
        assert.equal(pc:session_id(), (other:exists("/w/owners/0")).ephemeral_owner)
        p:close()
        pc:close()
        proxy:stop()
    end)

    -- Issue 28: a membership change while a member is cut off (same
    -- session). Once healed, its view is rebuilt from a fresh listing and
    -- the shares match within a round trip; no partition has two owners
    -- in the members' views at any moment, and the owner nodes agree.
    it("a member cut off while membership changes converges after the heal", function()
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)"))))
        local pa = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 6 }
        local all = { pa, clients[2], clients[3] }
        local views, overlaps = {}, {}
        local function record(id)
            return function(owned)
                local set = {}
                for _, q in ipairs(owned) do set[q] = true end
                views[id] = set
                for q in pairs(set) do
                    for other_id, other in pairs(views) do
                        if other_id ~= id and other[q] then
                            overlaps[#overlaps + 1] = ("%d: %s and %s"):format(q, id, other_id)
                        end
                    end
                end
            end
        end
        local a = assert(pa:partitioner("/p", { partitions = 4, id = "a" }))
        local b = assert(clients[2]:partitioner("/p", { partitions = 4, id = "b" }))
        a:on_change(record("a"))
        b:on_change(record("b"))
        local function shares(ps, want)
            for i, p in ipairs(ps) do
                if table.concat(p:owned(), ",") ~= want[i] then return false end
            end
            return true
        end
        assert.truthy(settle(all, function() return shares({ a, b }, { "0,2", "1,3" }) end))
        local sid = pa:session_id()
        assert(proxy:blackhole())
        local c = assert(clients[3]:partitioner("/p", { partitions = 4, id = "c" }))
        c:on_change(record("c"))
        -- b gives 3 up at once; c waits for 2, which the cut-off a holds
        assert.truthy(settle({ clients[2], clients[3] }, function()
            return shares({ b, c }, { "1", "" })
        end))
        assert(proxy:pass())
        local healed = proc.now()
        assert.truthy(settle(all, function() return shares({ a, b, c }, { "0,3", "1", "2" }) end),
                      "not converged after the heal")
        local took = proc.now() - healed
        assert.equal(sid, pa:session_id())
        for q, id in pairs { [0] = "a", [1] = "b", [2] = "c", [3] = "a" } do
            assert.equal(id, (clients[2]:get("/p/owners/" .. q)))
        end
        assert.same({}, overlaps)
        -- the reconnect and a round trip or two (measured 0.07-0.19 s, load 3-5)
        assert.is_true(took < zk.SESSION_TIMEOUT, ("took %.3f s"):format(took))
        a:close()
        pa:close()
        proxy:stop()
    end)

    -- Issue 28's two owners: a member's delete of its owner node executed
    -- but its reply was lost to a cut; another member took the partition
    -- meanwhile. Sending the delete again deleted the other member's node
    -- (which still reported owning it). The delete goes through a proxy
    -- that holds each chunk for a second: the cut falls after the server
    -- deleted the node (seen from another client) and before the reply.
    it("a release whose reply was lost never deletes the next owner's node", function()
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)"))))
        local pa = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 6 }
        local all = { pa, clients[2] }
        local a = assert(pa:partitioner("/p", { partitions = 2, id = "a" }))
        assert.truthy(settle(all, function() return #a:owned() == 2 end))
        local b
        local cut = false
        pa.delete = function(cl, path, ...)
            local delete = getmetatable(cl).__index.delete
            if cut or path ~= "/p/owners/1" then
                return delete(cl, path, ...)
            end
            cut = true
            local f = cl:send("delete", path, ...)
            assert.truthy(zk.wait_until(function()
                return clients[3]:exists("/p/owners/1") == false
            end, 5))
            assert(proxy:cut())            -- the reply is still held in the proxy
            assert(proxy:pass())
            assert.truthy(settle({ clients[2] }, function()
                return table.concat(b:owned(), ",") == "1"
            end), "b did not take partition 1")
            return f:wait()
        end
        assert(proxy:delay(1))
        b = assert(clients[2]:partitioner("/p", { partitions = 2, id = "b" }))
        assert.truthy(settle(all, function()
            return cut and pa:state() == "connected" and table.concat(a:owned(), ",") == "0"
        end, 15))
        pa.delete = nil
        -- whatever a sends again once connected has been answered
        assert(pa:sync("/p/owners"))
        pa:dispatch(0.1)
        assert.equal("1", table.concat(b:owned(), ","))
        local st = clients[3]:exists("/p/owners/1")
        assert.truthy(st, "b's owner node was deleted while b reports owning it")
        assert.equal(clients[2]:session_id(), st.ephemeral_owner)
        a:close()
        b:close()
        pa:close()
        proxy:stop()
    end)

    -- kazoo's test (issue 33): "0" and "1" share 3 partitions, 1's session
    -- is expired and "2" joins at once. Every round must end with one
    -- partition each (kazoo's run saw member 0 keep partition 2 for good,
    -- {{0,2},{1},{}}, in 2-4 rounds of 6). On one server this did not fail
    -- on the code before issue 28 either: it pins the shape, it does not
    -- show that bug.
    it("expiry then an immediate join: every round ends with one partition each", function()
        for round = 1, 6 do
            local base = "/k" .. round
            local c3 = zk.client { chroot = root, session_timeout = 2 }
            local p0 = assert(clients[1]:partitioner(base, { partitions = 3, id = "0" }))
            local p1 = assert(clients[2]:partitioner(base, { partitions = 3, id = "1" }))
            local all = { clients[1], clients[2], c3 }
            assert.truthy(settle(all, function()
                return #p0:owned() == 2 and #p1:owned() == 1
            end), "round " .. round .. ": not shared by two")
            assert.truthy(zk.expire_session(clients[2]))
            local p2 = assert(c3:partitioner(base, { partitions = 3, id = "2" }))
            local ps = { p0, p1, p2 }
            local function shape()
                local out = {}
                for i, p in ipairs(ps) do out[i] = p:owned() end
                return out
            end
            settle(all, function()
                local s = shape()
                return #s[1] == 1 and #s[2] == 1 and #s[3] == 1
            end, 15)
            assert.same({ { 0 }, { 1 }, { 2 } }, shape(), "round " .. round)
            for _, p in ipairs(ps) do p:close() end
            c3:close()
        end
    end)

    -- After a pause past the session timeout the loss and the new session
    -- reach the process together (chaos seed 8302). The "lost" listener
    -- told what owned() answered, and owned() (held() takes what reached
    -- the process first) ran the "connected" listener, which took the same
    -- partitions in the new session: it answered what on_change had last
    -- told, and on_change ran neither with {} nor with the new session's
    -- nodes. A listener of ours before the partitioner's holds the "lost"
    -- callbacks until the new session is connected (state() takes records,
    -- runs no callback), as the pause did; one after it sees what the
    -- partitioner told at the loss.
    it("tells {} at once when its session ends, then its share in the new one", function()
        local c = clients[1]
        c:on_state(function(state)
            if state == "lost" then
                zk.wait_until(function() return c:state() == "connected" end, 10)
            end
        end)
        local p = assert(c:partitioner("/lost", { partitions = 2, id = "a" }))
        local views, at_loss = {}, nil
        p:on_change(function(owned) views[#views + 1] = table.concat(owned, ",") end)
        c:on_state(function(state)
            if state == "lost" then at_loss = views[#views] end
        end)
        assert.truthy(settle({ c }, function() return views[#views] == "0,1" end))
        local sid = c:session_id()
        assert.truthy(zk.expire_session(c))
        assert.truthy(settle({ c }, function()
            return c:session_id() ~= sid and at_loss ~= nil and views[#views] == "0,1"
        end))
        assert.equal("", at_loss)
        assert.same({ 0, 1 }, p:owned())
        p:close()
    end)

    it("raises on bad arguments", function()
        local c = clients[1]
        assert.has_error(function() c:partitioner("/p") end)
        assert.has_error(function() c:partitioner("/p", { partitions = 0 }) end)
        assert.has_error(function() c:partitioner("/p", { partitions = 1.5 }) end)
        assert.has_error(function() c:partitioner("/p", { partitions = 2, bogus = 1 }) end)
        assert.has_error(function() c:partitioner("rel", { partitions = 2 }) end)
    end)
end)
