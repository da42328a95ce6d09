-- Barrier and double barrier against a real server: a barrier wait is
-- released by remove() from another process; 3 separate luajit processes
-- enter a double barrier together (none before all arrived) and leave
-- together (none before all started leaving).
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local event_log = require "helpers.events"
local tcpproxy = require "helpers.tcpproxy"

-- A double-barrier participant. args: path, name, arrive delay, work time.
local PARTICIPANT = [[
local zkcoord = require "zkcoord"
local core = require "zkcoord.core"
local path, name, delay, work = ...
io.stdout:setvbuf("line")
local function log(what, extra)
    io.stdout:write(what, " ", string.format("%.6f", core.now()), " ", tostring(extra or ""), "\n")
end
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 4 })
local db = c:double_barrier(path, 3, { id = name })
c:waiter():sleep(tonumber(delay))
log("arrive")
local ok, err = db:enter(15)
if not ok then log("error", err) os.exit(1) end
log("entered")
c:waiter():sleep(tonumber(work))
log("leaving")
ok, err = db:leave(15)
if not ok then log("error", err) os.exit(1) end
log("left")
c:close()
]]


describe("barrier #zk", function()
    local root, c, other
    local pids = {}

    before_each(function()
        root = zk.new_root("barrier")
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

    it("wait passes at once when no barrier is set", function()
        local b = c:barrier("/b")
        assert.is_false(b:is_set())
        assert.is_true(b:wait(1))
        assert.is_true(b:wait(0))
        assert.equal(0, c:stats().watches)
    end)

    it("wait on a set barrier times out and leaves no watch", function()
        local b = c:barrier("/b/deep")
        assert.is_true(b:create())
        assert.is_true(b:create())       -- setting it twice is fine
        assert.is_true(b:is_set())
        assert.same({ nil, "timeout" }, { b:wait(0) })
        local t0 = proc.now()
        assert.same({ nil, "timeout" }, { b:wait(0.3) })
        assert.is_true(proc.now() - t0 >= 0.29)
        assert.equal(0, c:stats().watches)
        assert.is_true(b:remove())
        assert.is_false(b:remove())      -- not set any more
        assert.is_true(b:wait(0))
    end)

    it("wait is released when another process removes the barrier", function()
        local b = c:barrier("/gate")
        assert.is_true(b:create())
        local log = zk.tmpdir() .. "/barrier-remove.log"
        local pid = assert(zk.spawn_lua([[
            local zkcoord = require "zkcoord"
            local path = ...
            local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS") })
            c:waiter():sleep(0.5)
            io.stdout:write("removing\n")
            assert(c:barrier(path):remove())
            c:close()
        ]], { root .. "/gate" }, log))
        pids[#pids + 1] = pid
        local t0 = proc.now()
        assert.same({ true }, { b:wait(10) })
        local took = proc.now() - t0
        -- measured at load 2: 0.30-0.72 s
        assert.is_true(took >= 0.3 and took < 5, "took " .. took)
        assert.truthy(proc.wait_exit(pid, 10))
        assert.matches("removing", proc.read_file(log))
        assert.equal(0, c:stats().watches)
    end)

    it("a wait survives a session expiry", function()
        local b = c:barrier("/exp")
        assert.is_true(b:create())
        -- expire the session from inside the wait, then lift the barrier
        local done = false
        c:waiter():defer(function()
            assert(zk.expire_session(c))
            other:delete("/exp")
            done = true
        end)
        assert.same({ true }, { b:wait(15) })
        assert.is_true(done)
    end)

    -- A client through a proxy (stopped when the test ends) that drops
    -- every reply, its requests reaching the server.
    local function replies_dropped(opts)
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)$"))))
        finally(function() proxy:stop() end)
        local o = { servers = proxy.hosts, chroot = root, session_timeout = 2 }
        for k, v in pairs(opts) do o[k] = v end
        local a = zk.client(o)
        assert(proxy:drop_replies())
        return a, proxy
    end

    it("a create or remove whose reply was lost answers unknown, never timeout", function()
        -- (before: "timeout", which says nothing was changed)
        local a = replies_dropped { request_timeout = 0.3, session_timeout = 6 }
        assert.same({ nil, "unknown" }, { a:barrier("/set"):create() })
        assert.truthy(zk.wait_until(function() return c:exists("/set") end, 5, c),
                      "the create did not reach the server")
        assert.same({ nil, "unknown" }, { a:barrier("/set"):remove() })
        assert.truthy(zk.wait_until(function() return c:exists("/set") == false end, 5, c),
                      "the remove did not reach the server")
    end)

    it("a create or remove whose reply was lost is decided once connected again", function()
        -- The connection drops with the write's reply missing (no reply for
        -- 2/3 of the session timeout); the fault ends then, and the same
        -- session's second try finds the barrier as wanted (before: the
        -- error of the first try, "connectionloss").
        local a, proxy = replies_dropped { request_timeout = 4 }
        a:on_state(function(new)
            if new == "suspended" then assert(proxy:pass()) end
        end)
        assert.same({ true }, { a:barrier("/set"):create() })
        assert.truthy(c:exists("/set"))
        assert(proxy:drop_replies())
        assert.same({ true }, { a:barrier("/set"):remove() })
        assert.is_false(c:exists("/set"))
        assert.same({ false }, { a:barrier("/set"):remove() })
    end)

    it("raises on bad arguments", function()
        assert.has_error(function() c:barrier("b") end)
        assert.has_error(function() c:barrier("/") end)
        assert.has_error(function() c:barrier("/b"):wait(-1) end)
        assert.has_error(function() c:double_barrier("/d", 0) end)
        assert.has_error(function() c:double_barrier("/d", 2, { bogus = 1 }) end)
        assert.has_error(function() c:double_barrier("/d", 2):enter("x") end)
    end)
end)


describe("double barrier #zk", function()
    local root, c
    local pids = {}

    before_each(function()
        root = zk.new_root("dbarrier")
        c = zk.client { chroot = root }
    end)

    after_each(function()
        for _, pid in ipairs(pids) do
            if proc.alive(pid) then proc.kill(pid, "KILL") end
        end
        pids = {}
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("a round of one enters and leaves at once and cleans up", function()
        local db = c:double_barrier("/one", 1, { id = "solo" })
        assert.is_true(db:enter(5))
        assert.same({ "solo" }, db:participants())
        assert.is_true(db:leave(5))
        assert.same({}, db:participants())
        c:dispatch(0.1)
        local left = c:children("/one")
        assert.same({}, left)
    end)

    it("enter times out when too few arrive, and leaves no node", function()
        local db = c:double_barrier("/few", 2)
        local t0 = proc.now()
        assert.same({ nil, "timeout" }, { db:enter(0.4) })
        assert.is_true(proc.now() - t0 >= 0.39)
        assert.truthy(zk.wait_until(function()
            return #(c:children("/few") or { 1 }) == 0
        end, 5, c))
        assert.equal(0, c:stats().watches)
    end)

    it("an enter whose create's reply was lost gives up and leaves no node", function()
        -- The look at "ready" is answered, the create of our node reaches
        -- the server, its reply does not come within the request timeout:
        -- enter() gives up, and the node it may have made must go (before:
        -- it stayed, counted by the others, until our session ended).
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)$"))))
        finally(function() proxy:stop() end)
        local a = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 10,
                              request_timeout = 0.5 }
        assert(c:create("/lost"))
        local sid = a:session_id()
        local db = a:double_barrier("/lost", 2)
        assert(a:exists("/"))            -- a is not idle: no ping reply comes first
        assert(proxy:drop_replies(1))    -- the exists() reply passes
        assert.same({ nil, "timeout" }, { db:enter(5) })
        assert(proxy:pass())
        assert.truthy(zk.wait_until(function() return #assert(c:children("/lost")) == 0 end,
                                    10, a), "the node of the enter given up stayed")
        -- one child made (the create reached the server) and deleted, in a's session
        assert.equal(2, assert(c:exists("/lost")).cversion)
        assert.equal(sid, a:session_id())
    end)

    it("an enter whose opening reply was lost answers unknown, keeps its node, decides again", function()
        -- Enough participants (one), the create of "ready" reaches the
        -- server, its replies do not come by enter's deadline: the others
        -- may have entered, so not "timeout" with our node gone (before) but
        -- "unknown" with it kept; enter() again decides.
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)$"))))
        finally(function() proxy:stop() end)
        local a = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 10,
                              request_timeout = 0.5 }
        assert(c:create("/open"))
        local db = a:double_barrier("/open", 1, { id = "solo" })
        assert(a:exists("/"))            -- a is not idle: no ping reply comes first
        assert(proxy:drop_replies(3))    -- exists(ready), our node's create, the listing
        assert.same({ nil, "unknown" }, { db:enter(1.5) })
        assert.truthy(zk.wait_until(function() return c:exists("/open/ready") end, 5, c),
                      "the opening did not reach the server")
        assert.same({ "solo" }, c:double_barrier("/open", 1):participants())
        assert(proxy:pass())
        assert.is_true(db:enter(5))
        assert.is_true(db:leave(5))
    end)

    it("3 processes enter together and leave together", function()
        local path = root .. "/round"
        local logs = {}
        local delays = { 0.0, 0.5, 1.0 }     -- staggered arrivals
        local work = { 0.8, 0.1, 0.4 }       -- and staggered departures
        for i = 1, 3 do
            logs[i] = ("%s/dbarrier-%d-%d.log"):format(zk.tmpdir(), proc.getpid(), i)
            os.remove(logs[i])
            pids[i] = assert(zk.spawn_lua(PARTICIPANT, { path, "p" .. i, delays[i], work[i] },
                                          logs[i]))
        end
        for i = 1, 3 do
            assert.truthy(proc.wait_exit(pids[i], 25), "participant " .. i .. " did not finish")
        end
        local ev = {}
        for i = 1, 3 do
            ev[i] = event_log.last_by_what(event_log.read(logs[i]))
            assert.is_nil(ev[i].error, proc.read_file(logs[i]))
            for _, what in ipairs({ "arrive", "entered", "leaving", "left" }) do
                assert.truthy(ev[i][what], "p" .. i .. " did not log " .. what .. ": "
                                           .. proc.read_file(logs[i]))
            end
        end
        local last_arrive, first_enter = -math.huge, math.huge
        local last_leaving, first_left = -math.huge, math.huge
        for i = 1, 3 do
            last_arrive = math.max(last_arrive, ev[i].arrive.t)
            first_enter = math.min(first_enter, ev[i].entered.t)
            last_leaving = math.max(last_leaving, ev[i].leaving.t)
            first_left = math.min(first_left, ev[i].left.t)
        end
        assert.is_true(first_enter >= last_arrive,
            ("entered at %.4f before the last arrived at %.4f"):format(first_enter, last_arrive))
        assert.is_true(first_left >= last_leaving,
            ("left at %.4f before the last started leaving at %.4f"):format(first_left, last_leaving))
        -- the early arrivals really waited for the last one
        assert.is_true(ev[1].entered.t - ev[1].arrive.t >= 0.8)
        -- nothing left behind but the (container) parent
        assert.same({}, (zk.admin():children(path)))
    end)
end)
