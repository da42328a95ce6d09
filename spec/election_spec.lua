-- Leader election against a real server: in-process basics (try once,
-- leader id, resign, revocation on session expiry) and separate luajit
-- contender processes (leaders never overlap; a SIGKILLed leader's
-- successor is elected within about a session timeout).
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local tcpproxy = require "helpers.tcpproxy"
local event_log = require "helpers.events"
local util = require "zkcoord.util"
local errors = require "zkcoord.errors"

-- A contender process. args: path, name, mode ("rounds" | "hold"), rounds.
-- Writes "<event> <monotonic time>" lines to stdout (its own log file).
local CONTENDER = [[
local zkcoord = require "zkcoord"
local core = require "zkcoord.core"
local path, name, mode, rounds = ...
rounds = tonumber(rounds) or 5
io.stdout:setvbuf("line")
local function log(what, extra)
    io.stdout:write(what, " ", string.format("%.6f", core.now()), " ", extra or "", "\n")
end
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 2 })
local e = c:election(path, { id = name })
log("ready")
local stop = core.now() + 25          -- never outlive the spec
if mode == "rounds" then
    for _ = 1, rounds do
        local ok, err = e:campaign(15)
        if not ok then log("error", err) break end
        log("elected")
        if not e:is_leader() then log("error", "not-leader") end
        local id = e:leader()
        if id ~= name then log("error", "leader-is-" .. tostring(id)) end
        c:waiter():sleep(0.1)
        log("resigned")
        e:resign()
        c:waiter():sleep(0.02 + math.random() * 0.05)
    end
else
    local ok, err = e:campaign(20)
    if ok then log("elected") else log("error", err) end
    while core.now() < stop do c:dispatch(0.1) end
end
log("done")
c:close()
]]


describe("election #zk", function()
    local root, c, other
    local pids = {}

    before_each(function()
        root = zk.new_root("election")
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

    it("elects the first candidate; try-once fails for the second and leaves nothing", function()
        local a = c:election("/e", { id = "a" })
        local b = other:election("/e", { id = "b" })
        local elected = 0
        a:on_elected(function() elected = elected + 1 end)
        assert.same({ true }, { a:campaign(5) })
        assert.equal(1, elected)
        assert.is_true(a:is_leader())
        assert.same({ nil, "timeout" }, { b:campaign(0) })
        assert.same({ nil, "timeout" }, { b:campaign(0.3) })
        assert.is_false(b:is_leader())
        assert.equal("a", a:leader())
        assert.equal("a", b:leader())
        assert.same({ "a" }, b:participants())
        -- Curator LeaderLatch's node names
        local names = c:children("/e")
        assert.equal(1, #names)
        assert.matches("^_c_%x+%-%x+%-%x+%-%x+%-%x+%-latch%-%d+$", names[1])
        -- campaign when already leader is a no-op
        assert.is_true(a:campaign(0))
        assert.equal(1, elected)
    end)

    it("is_leader() stays false until campaign() has checked the node is ours", function()
        -- CI once saw is_leader() true in nginx before on_elected had run:
        -- another coroutine asked while campaign() waited for the owner check.
        local e = c:election("/e", { id = "a" })
        local elected, seen = false, {}
        e:on_elected(function() elected = true end)
        local exists = c.exists
        c.exists = function(client, ...)      -- the owner check's request
            seen[#seen + 1] = { e:is_leader(), e:node() or false, (e:token()) or false }
            return exists(client, ...)
        end
        local ok, err = e:campaign(5)
        c.exists = nil
        assert.is_true(ok, err)
        assert.is_true(elected)
        assert.is_true(#seen >= 1)
        for _, s in ipairs(seen) do
            assert.same({ false, false, false }, s)
        end
        assert.is_true(e:is_leader())
    end)

    it("hands over on resign, and resign fires on_lost", function()
        local a = c:election("/e", { id = "a" })
        local b = other:election("/e", { id = "b" })
        local revoked
        a:on_lost(function(reason) revoked = reason end)
        assert.is_true(a:campaign(5))
        a:resign()
        assert.equal("resigned", revoked)
        assert.is_false(a:is_leader())
        assert.is_true(b:campaign(5))
        assert.equal("b", a:leader())
        b:resign()
        -- resign deletes without waiting; other's next request is ordered
        -- after the delete (without it: 1 run in 5 at load 2 saw "b")
        assert(other:exists("/"))
        assert.is_nil(a:leader())
        assert.same({}, (c:children("/e")))
        assert.is_true(a:resign())      -- resign when not leading is fine
    end)

    it("rejoin = false: session expiry revokes leadership; campaign again rejoins", function()
        local a = c:election("/e", { id = "a", rejoin = false })
        local reasons = {}
        a:on_lost(function(reason) reasons[#reasons + 1] = reason end)
        assert.is_true(a:campaign(5))
        assert.truthy(zk.expire_session(c))
        assert.truthy(zk.wait_until(function() return #reasons > 0 end, 10, c))
        -- "deleted" if the server removed the node while our connection was up
        assert.equal(1, #reasons)
        assert.truthy(reasons[1] == "sessionexpired" or reasons[1] == "deleted", reasons[1])
        assert.is_false(a:is_leader())
        assert.truthy(zk.wait_until(function() return c:state() == "connected" end, 10, c))
        assert.is_true(a:campaign(5))
        assert.is_true(a:is_leader())
        local st = c:exists(c:children("/e")[1] and "/e/" .. c:children("/e")[1])
        assert.equal(c:session_id(), st.ephemeral_owner)
    end)

    it("a deleted leader node revokes leadership with 'deleted'", function()
        local a = c:election("/e", { id = "a", rejoin = false })
        local revoked
        a:on_lost(function(reason) revoked = reason end)
        assert.is_true(a:campaign(5))
        local names = other:children("/e")
        other:delete("/e/" .. names[1])
        assert.truthy(zk.wait_until(function() return revoked ~= nil end, 5, c))
        assert.equal("deleted", revoked)
        assert.is_false(a:is_leader())
    end)

    it("a leader from campaign() whose session expires leads again by itself", function()
        local a = c:election("/e", { id = "a" })
        local events = {}
        a:on_elected(function() events[#events + 1] = "elected" end)
        a:on_lost(function(reason) events[#events + 1] = reason end)
        assert.is_true(a:campaign(5))
        local sid, node = c:session_id(), a:node()
        assert.truthy(zk.expire_session(c))
        -- no call of ours: the client's callbacks (here dispatch()) rejoin
        assert.truthy(zk.wait_until(function() return a:is_leader() end, 10, c))
        -- "deleted" if the server removed the node while our connection was up
        assert.equal(3, #events)
        assert.equal("elected", events[1])
        assert.truthy(events[2] == "sessionexpired" or events[2] == "deleted", events[2])
        assert.equal("elected", events[3])
        assert.is_false(a:is_rejoining())
        assert.are_not.equal(sid, c:session_id())
        assert.are_not.equal(node, a:node())
        -- the new node is the new session's, and the old session left none
        assert.equal(c:session_id(), assert(other:exists(a:node())).ephemeral_owner)
        assert.same({ (a:node():match("[^/]+$")) }, (other:children("/e")))
        assert.truthy(a:token())
        -- and again: the rejoined leadership is watched as the first was
        local sid2 = c:session_id()
        assert.truthy(zk.expire_session(c))
        assert.truthy(zk.wait_until(function() return #events == 5 and a:is_leader() end, 10, c))
        assert.equal("elected", events[5])
        assert.are_not.equal(sid2, c:session_id())
        assert.equal(c:session_id(), assert(other:exists(a:node())).ephemeral_owner)
        assert.is_true(a:resign())          -- the loss was answered by leading again
        assert.same({}, (c:children("/e")))  -- c: ordered after resign's delete
    end)

    it("is_leader() holds while suspended, is false once the link was silent a session timeout, "
       .. "and the rejoin leads again", function()
        local ST = 4
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)"))))
        local lc = zk.client { servers = proxy.hosts, chroot = root, session_timeout = ST }
        local a = lc:election("/e", { id = "a" })
        local lost = {}
        a:on_lost(function(reason) lost[#lost + 1] = reason end)
        assert.is_true(a:campaign(5))
        local t0 = proc.now()
        proxy:blackhole()
        assert.truthy(zk.wait_until(function() return lc:state() ~= "connected" end, 2 * ST, lc))
        -- no event can come now: the clock rule alone ends the leadership
        assert.truthy(zk.wait_until(function() return not a:is_leader() end, 2 * ST, lc))
        local took = proc.now() - t0
        assert.is_true(took <= ST + 2, "leader for " .. took .. " s of silence")
        assert.same({ "sessionexpired" }, lost)
        assert.is_true(a:is_rejoining())
        assert.is_nil(a:token())
        proxy:pass()
        assert.truthy(zk.wait_until(function() return a:is_leader() end, 3 * ST, lc))
        assert.equal(lc:session_id(), assert(other:exists(a:node())).ephemeral_owner)
        assert.same({ (a:node():match("[^/]+$")) }, (other:children("/e")))
        assert.is_true(a:resign())
        proxy:stop()
    end)

    it("a leader whose node someone deleted rejoins (Curator's LeaderLatch resets)", function()
        local a = c:election("/e", { id = "a" })
        local revoked
        a:on_lost(function(reason) revoked = reason end)
        assert.is_true(a:campaign(5))
        local node = a:node()
        assert.truthy(other:delete(node))
        assert.truthy(zk.wait_until(function() return revoked and a:is_leader() end, 5, c))
        assert.equal("deleted", revoked)
        assert.are_not.equal(node, a:node())
        assert.same({ (a:node():match("[^/]+$")) }, (other:children("/e")))
    end)

    -- a leads, b waits in line (a coroutine of `other`), a's session
    -- expires: a rejoins behind b. Returns a, b.
    local function rejoined_behind(opts)
        local a = c:election("/e", opts or { id = "a" })
        local b = other:election("/e", { id = "b" })
        assert.is_true(a:campaign(5))
        local b_ok
        other:spawn(function() b_ok = b:campaign(10) end)
        -- b waits behind a: its node is in the line (other:run drives it)
        local deadline = proc.now() + 10
        while #assert(c:children("/e")) < 2 and proc.now() < deadline do
            assert.is_false(other:run(0.02))
        end
        assert.same({ "a", "b" }, a:participants())
        assert.truthy(zk.expire_session(c))
        assert.truthy(other:run(5))         -- b's watch fires: b leads
        assert.is_true(b_ok)
        return a, b
    end

    it("a rejoin waits in line behind the new leader, then leads by itself", function()
        local a, b = rejoined_behind()
        assert.truthy(zk.wait_until(function()
            return #assert(other:children("/e")) == 2
        end, 10, c))
        assert.is_true(a:is_rejoining())
        assert.is_false(a:is_leader())
        assert.same({ "b", "a" }, b:participants())
        local elected = false
        a:on_elected(function() elected = true end)
        b:resign()
        assert.truthy(zk.wait_until(function() return a:is_leader() end, 5, c))
        assert.is_true(elected)
        assert.is_false(a:is_rejoining())
        assert.equal("a", b:leader())
    end)

    it("rejoin = false: a leader whose session expired stays out", function()
        local a = c:election("/e", { id = "a", rejoin = false })
        local elected = 0
        a:on_elected(function() elected = elected + 1 end)
        assert.is_true(a:campaign(5))
        assert.truthy(zk.expire_session(c))
        assert.truthy(zk.wait_until(function() return c:state() == "connected" end, 10, c))
        c:dispatch(0.5)
        assert.is_false(a:is_leader())
        assert.is_false(a:is_rejoining())
        assert.equal(1, elected)
        assert.same({}, (other:children("/e")))
        assert.same({ nil, "lost" }, { a:resign() })
        -- run() follows the election's rejoin by default
        local n = 0
        assert.same({ nil, "lost" }, { a:run(function()
            n = n + 1
            assert.truthy(zk.expire_session(c))
        end, 10) })
        assert.equal(1, n)
        assert.is_false(a:is_rejoining())
        assert.has_error(function() c:election("/e", { rejoin = "no" }) end,
                         "bad argument #2 to 'election' (rejoin must be a boolean)")
    end)

    it("resign() during a rejoin ends it and leaves no node", function()
        local a, b = rejoined_behind()
        assert.truthy(zk.wait_until(function() return a:is_rejoining()
            and #assert(other:children("/e")) == 2 end, 10, c))
        assert.same({ nil, "lost" }, { a:resign() })
        assert.is_false(a:is_rejoining())
        -- c: ordered after resign's delete
        assert.same({ (b:node():match("[^/]+$")) }, (c:children("/e")))
        b:resign()
        c:dispatch(0.3)
        assert.is_false(a:is_leader())
        assert.same({}, (other:children("/e")))
    end)

    it("campaign() during a rejoin ends it and joins afresh", function()
        local a, b = rejoined_behind()
        assert.truthy(zk.wait_until(function() return a:is_rejoining()
            and #assert(other:children("/e")) == 2 end, 10, c))
        local before = assert(c:children("/e"))
        assert.same({ nil, "timeout" }, { a:campaign(0) })   -- try once: b leads
        assert.is_false(a:is_rejoining())
        -- the rejoin's node and the try's are gone (c: ordered after the deletes)
        assert.same({ (b:node():match("[^/]+$")) }, (c:children("/e")))
        assert.equal(2, #before)
        b:resign()
        c:dispatch(0.3)
        assert.is_false(a:is_leader())
    end)

    it("closing the client during a rejoin ends it and leaves no node", function()
        local a, b = rejoined_behind()
        assert.truthy(zk.wait_until(function() return a:is_rejoining()
            and #assert(other:children("/e")) == 2 end, 10, c))
        c:close()
        assert.is_false(a:is_rejoining())
        assert.is_false(a:is_leader())
        assert.same({ (b:node():match("[^/]+$")) }, (other:children("/e")))
    end)

    it("token() and node() name our leadership; tokens grow with each leader", function()
        local a = c:election("/e", { id = "a" })
        local b = other:election("/e", { id = "b", rejoin = false })
        assert.same({ nil, "notleader" }, { a:token() })
        -- a stable code of errors.lua (it was not one: the fuzzer's bad_code)
        assert.is_string(errors.own.notleader)
        assert.is_nil(a:node())
        assert.is_true(a:campaign(5))
        local node = a:node()
        assert.equal("/e/" .. assert(other:children("/e"))[1], node)
        -- the leader node's czxid, as the lock's token (seen from another session)
        local t1 = assert(a:token())
        assert.equal(assert(other:exists(node)).czxid, t1)
        assert.same({ nil, "notleader" }, { b:token() })
        a:resign()
        assert.same({ nil, "notleader" }, { a:token() })
        assert.is_true(b:campaign(5))
        assert.is_true(assert(b:token()) > t1)
        -- lost with the session: no token
        assert.truthy(zk.expire_session(other))
        assert.is_false(b:is_leader())
        assert.same({ nil, "notleader" }, { b:token() })
        assert.is_nil(b:node())
    end)

    it("run(fn) leads while fn runs, resigns when it returns", function()
        local a = c:election("/e", { id = "a" })
        local b = other:election("/e", { id = "b" })
        local x, y = a:run(function(e)
            assert.equal(a, e)
            assert.is_true(a:is_leader())
            assert.same({ nil, "timeout" }, { b:campaign(0) })
            return "done", 2
        end)
        assert.equal("done", x)
        assert.equal(2, y)
        assert.is_false(a:is_leader())
        assert.is_true(b:campaign(5))
        b:resign()
        -- an error in fn: resigned, then raised with its traceback
        local ok, err = pcall(a.run, a, function() error("leader failed") end, 5)
        assert.is_false(ok)
        assert.truthy(tostring(err):find("leader failed", 1, true))
        assert.truthy(tostring(err):find("stack traceback", 1, true))
        assert.is_false(a:is_leader())
        assert.is_true(b:campaign(5))
        -- a campaign that fails ends run: fn never runs
        local called = false
        assert.same({ nil, "timeout" }, { a:run(function() called = true end, 0.2) })
        assert.is_false(called)
    end)

    it("run with requeue campaigns again after each round, with a new node", function()
        local a = c:election("/e", { id = "a", requeue = 2 })
        local nodes, tokens = {}, {}
        local last = a:run(function()
            assert.is_true(a:is_leader())
            nodes[#nodes + 1] = a:node()
            tokens[#tokens + 1] = assert(a:token())
            -- the previous round's node is gone: only ours is in the line
            assert.same({ (a:node():match("[^/]+$")) }, (other:children("/e")))
            return #nodes
        end, 10)
        assert.equal(3, last)
        assert.equal(3, #nodes)
        assert.is_true(nodes[1] ~= nodes[2] and nodes[2] ~= nodes[3])
        assert.is_true(tokens[1] < tokens[2] and tokens[2] < tokens[3])
        assert.is_false(a:is_leader())
        assert.same({}, (c:children("/e")))
    end)

    it("run rejoins by itself after the session was lost, unless rejoin = false", function()
        local a = c:election("/e", { id = "a" })
        local sessions = {}
        local res = { a:run(function()
            sessions[#sessions + 1] = c:session_id()
            if #sessions == 1 then
                assert.truthy(zk.expire_session(c))
                assert.is_false(a:is_leader())
                return "first"
            end
            assert.is_true(a:is_leader())
            return "second"
        end, 10) }
        assert.same({ "second" }, res)
        assert.equal(2, #sessions)
        assert.are_not.equal(sessions[1], sessions[2])
        -- rejoin = false: run answers the loss
        local a1 = c:election("/e", { id = "a", rejoin = false })
        local n = 0
        assert.same({ nil, "lost" }, { a1:run(function()
            n = n + 1
            assert.truthy(zk.expire_session(c))
            return "first"
        end, 10) })
        assert.equal(1, n)
        assert.is_false(a1:is_leader())
    end)

    it("run(fn) with fn resigning ends the round: no campaign again", function()
        local e = c:election("/e")
        local calls = 0
        local ok, res = pcall(e.run, e, function()
            calls = calls + 1
            -- the old code campaigned again for ever: stop it here
            if calls > 3 then error("looped: fn ran " .. calls .. " times") end
            assert.is_true(e:resign())
            return "done"
        end)
        assert.is_true(ok, tostring(res))
        assert.equal("done", res)
        assert.equal(1, calls)
        assert.is_false(e:is_leader())
        assert.same({}, (c:children("/e")))
    end)

    it("resign() ends a campaign() waiting in another coroutine", function()
        local eo = other:election("/e", { id = "other" })
        assert.is_true(eo:campaign(5))
        local e = c:election("/e", { id = "me" })
        local cok, cerr
        c:spawn(function() cok, cerr = e:campaign(10) end)
        -- our node is in the line behind eo's
        assert.truthy(zk.wait_until(function()
            c:run(0.02)
            return #other:children("/e") == 2
        end, 10))
        assert.is_true(e:resign())
        c:run(5)       -- returns once the campaign's coroutine is done
        assert.is_nil(cok)
        assert.equal("interrupted", cerr)
        assert.is_true(eo:resign())
        c:run(0.2)
        assert.is_false(e:is_leader())
        -- eo's resign does not wait for its delete (another session): wait
        -- for it; our campaign left nothing (seen 6 in 10 runs at load 2)
        assert.truthy(zk.wait_until(function()
            return #assert(c:children("/e")) == 0
        end, 5, c), "a node is left")
        assert.is_false(e:is_leader())
    end)

    it("resign() ends a waiting campaign() whatever round trip it is in", function()
        local eo = other:election("/e", { id = "other" })
        assert.is_true(eo:campaign(5))
        -- resign at 0, 0.5, 1 ... 10 ms into the campaign: during its create,
        -- its listing, the watch's request (a leave then was not seen by the
        -- wait that followed: it waited for eo), or the wait itself
        for i = 0, 20 do
            local e = c:election("/e", { id = "me" .. i })
            local res
            c:spawn(function() res = { e:campaign(10) } end)
            c:spawn(function()
                c:waiter():sleep(i * 0.0005)
                assert(e:resign())
            end)
            assert.is_true(c:run(2), "campaign still waiting, resign after " .. i * 0.5 .. " ms")
            assert.same({ nil, "interrupted" }, res)
        end
        -- our deletes are not waited for, and eo reads on another session
        assert.truthy(zk.wait_until(function()
            local p = eo:participants()
            return #p == 1 and p[1] == "other"
        end, 5, c), "a campaign's node is left")
        assert.is_true(eo:resign())
    end)

    it("a loss while on_elected runs is told after it returns, not inside it", function()
        local e = c:election("/e")
        local trace, inside = {}, false
        e:on_elected(function()
            trace[#trace + 1] = inside and "elected inside on_elected" or "elected"
            if #trace > 1 then return end
            inside = true
            -- our node deleted while the callback's own calls wait: the
            -- "deleted" report and the rejoin's queued steps run in them
            assert(other:delete("/e/" .. c:children("/e")[1]))
            c:sync("/")
            c:get("/e")
            inside = false
        end)
        e:on_lost(function(reason)
            trace[#trace + 1] = (inside and "revoked inside on_elected: " or "revoked: ") .. reason
        end)
        assert.is_true(e:campaign(5))
        assert.truthy(zk.wait_until(function() return #trace >= 3 end, 10, c))
        assert.same({ "elected", "revoked: deleted", "elected" }, trace)
        assert.is_true(e:is_leader())   -- the rejoin leads
        assert.is_true(e:resign())
    end)

    it("raises on bad arguments", function()
        local e0 = c:election("/e")
        assert.has_error(function() e0:run("x") end,
                         "bad argument #1 to 'run' (function expected, got string)")
        assert.has_error(function() e0:run(function() end, "5") end)
        assert.has_error(function() c:election("/e", { requeue = -1 }) end,
                         "bad argument #2 to 'election' (requeue must be a boolean or an integer >= 0)")
        assert.has_error(function() c:election("/e", { requeue = 1.5 }) end)
        -- the deprecated table form checks its options as before
        assert.has_error(function() e0:run(function() end, { requeue = -1 }) end,
                         "bad argument #2 to 'run' (requeue must be a boolean or an integer >= 0)")
        assert.has_error(function() e0:run(function() end, { bogus = 1 }) end)
        assert.has_error(function() e0.token({}) end)
        assert.has_error(function() c:election("e") end)
        assert.has_error(function() c:election("/e", { bogus = true }) end)
        assert.has_error(function() c:election("/e", { id = 5 }) end)
        local e = c:election("/e")
        assert.has_error(function() e:campaign(-1) end)
        assert.has_error(function() e:on_elected("x") end)
        assert.matches(":%d+$", e.id)      -- hostname:pid by default
    end)

    it("run(fn, timeout, ...) passes its arguments after the election", function()
        local a = c:election("/e", { id = "a" })
        assert.same({ "x", 2, "y" }, { a:run(function(e, x, n, y)
            assert.equal(a, e)
            assert.is_true(a:is_leader())
            return x, n, y
        end, 5, "x", 2, "y") })
        -- nil timeout: as long as it takes; arguments still reach fn
        assert.equal("z", a:run(function(_, z) return z end, nil, "z"))
        assert.is_false(a:is_leader())
    end)

    it("on_revoked and run's table form still work and warn once per process", function()
        util.deprecated_reset()
        local warned = {}
        local lc = zk.client { chroot = root, logger = function(_, msg)
            if msg:find("deprecated", 1, true) then warned[#warned + 1] = msg end
        end }
        local e = lc:election("/e", { id = "a" })
        local reasons = {}
        e:on_revoked(function(reason) reasons[#reasons + 1] = reason end)
        e:on_revoked(function(reason) reasons[#reasons + 1] = "2:" .. reason end)
        assert.equal("led", e:run(function(el)
            assert.is_true(el:is_leader())
            return "led"
        end, { timeout = 5 }))
        assert.same({ "resigned", "2:resigned" }, reasons)
        -- the table's requeue and rejoin still count
        local rounds = 0
        e:run(function() rounds = rounds + 1 end, { timeout = 5, requeue = 1 })
        assert.equal(2, rounds)
        assert.same({ nil, "lost" }, { e:run(function()
            assert.truthy(zk.expire_session(lc))
        end, { timeout = 5, rejoin = false }) })
        -- the loss: whichever of the expiry and our node's delete is told first
        local lost = reasons[7]
        assert.truthy(lost == "sessionexpired" or lost == "deleted", lost)
        assert.same({ "resigned", "2:resigned", "resigned", "2:resigned", "resigned",
                      "2:resigned", lost, "2:" .. lost }, reasons)
        -- each old form told once, naming the new one
        assert.equal(2, #warned)
        assert.truthy(warned[1]:find("election:on_revoked is deprecated", 1, true))
        assert.truthy(warned[1]:find("use election:on_lost", 1, true))
        assert.truthy(warned[2]:find("election:run(fn, { timeout = }) is deprecated", 1, true))
        assert.truthy(warned[2]:find("election:run(fn, timeout?, ...)", 1, true))
    end)

    it("3 contender processes never lead at the same time", function()
        local path = root .. "/overlap"
        local logs = {}
        for i = 1, 3 do
            logs[i] = ("%s/election-%d-%d.log"):format(zk.tmpdir(), proc.getpid(), i)
            os.remove(logs[i])
            pids[i] = assert(zk.spawn_lua(CONTENDER, { path, "p" .. i, "rounds", 6 }, logs[i]))
        end
        for i = 1, 3 do
            assert.truthy(proc.wait_exit(pids[i], 25), "contender " .. i .. " did not finish")
        end
        local intervals = {}
        for i = 1, 3 do
            local ev = event_log.read(logs[i])
            assert.equal(0, event_log.count(ev, "error"), proc.read_file(logs[i]))
            assert.equal(6, event_log.count(ev, "elected"), proc.read_file(logs[i]))
            assert.equal(1, event_log.count(ev, "done"))
            local start
            for _, e in ipairs(ev) do
                if e.what == "elected" then
                    start = e.t
                elseif e.what == "resigned" then
                    intervals[#intervals + 1] = { s = start, e = e.t, who = i }
                end
            end
        end
        assert.equal(18, #intervals)
        table.sort(intervals, function(x, y) return x.s < y.s end)
        for k = 2, #intervals do
            local prev, cur = intervals[k - 1], intervals[k]
            assert.is_true(cur.s >= prev.e, ("p%d led from %.4f while p%d led until %.4f")
                :format(cur.who, cur.s, prev.who, prev.e))
        end
        -- everyone resigned: no node left
        assert.same({}, (zk.admin():children(path)))
    end)

    it("elects a successor within the session timeout when the leader is SIGKILLed", function()
        local path = root .. "/kill"
        local logs = {}
        for i = 1, 3 do
            logs[i] = ("%s/election-kill-%d-%d.log"):format(zk.tmpdir(), proc.getpid(), i)
            os.remove(logs[i])
            pids[i] = assert(zk.spawn_lua(CONTENDER, { path, "k" .. i, "hold" }, logs[i]))
        end
        local function elected()
            local out = {}
            for i = 1, 3 do
                local ev = event_log.read(logs[i])
                for _, e in ipairs(ev) do
                    if e.what == "elected" then out[#out + 1] = { who = i, t = e.t } end
                end
            end
            return out
        end
        -- wait until all three are in the line and one leads
        local ids = zk.wait_until(function()
            local n = zk.admin():children(path)
            return n and #n == 3 and #elected() == 1 and n
        end, 15)
        assert.truthy(ids, "contenders did not line up")
        local first = elected()[1]
        assert.equal("k" .. first.who, (zk.admin():election(path):leader()))
        proc.kill(pids[first.who], "KILL")
        local killed_at = proc.now()
        local second = zk.wait_until(function()
            local e = elected()
            return #e >= 2 and e
        end, 10)
        assert.truthy(second, "no successor was elected")
        local took = proc.now() - killed_at
        local succ
        for _, e in ipairs(second) do
            if e.who ~= first.who then succ = e end
        end
        assert.truthy(succ)
        assert.equal(2, #second)
        -- the session of the killed leader must expire first (2 s, tick 0.5 s)
        -- measured at load 2: 2.25-2.42 s (0.42 s past the timeout; 1.5 allowed)
        assert.is_true(took < zk.SESSION_TIMEOUT + 1.5, ("successor after %.2f s"):format(took))
        assert.equal("k" .. succ.who, (zk.admin():election(path):leader()))
    end)
end)


-- The rejoin in nginx: a leader made in a timer (zkcoord.ngx's client)
-- whose session expires leads again by itself, stepped by the client's
-- callback timer while no request runs.
local NGX_APP = [==[
local zn = require "zkcoord.ngx"
local _M = {}
local e, events, err = nil, {}, nil

function _M.init_worker()
    zn.init_worker { servers = os.getenv("ZK_HOSTS"), session_timeout = 4 }
    ngx.timer.at(0, function(premature)
        if premature then return end
        local c, cerr = zn.client()
        if not c then err = cerr return end
        e = c:election("@ROOT@/e", { id = "w" })
        e:on_elected(function() events[#events + 1] = "elected" end)
        e:on_lost(function(reason) events[#events + 1] = reason end)
        local ok, perr = e:campaign(10)
        if not ok then err = perr end
    end)
end

function _M.state()
    local c = zn.client()
    if not e or not c then
        return ngx.say("none ", tostring(err))
    end
    local pw = (c:session_password() or ""):gsub(".", function(ch)
        return ("%02x"):format(ch:byte())
    end)
    ngx.say(tostring(e:is_leader()), " ", tostring(e.is_rejoining and e:is_rejoining()), " ",
            tostring(c:session_id()), " ", pw, " ", tostring(e:node()), " ",
            table.concat(events, ","))
end

return _M
]==]

describe("election in nginx #zk #ngx", function()
    local nginx = require "helpers.nginx"
    local zkcoord = require "zkcoord"
    local root, n

    after_each(function()
        if n then n:destroy() end
        zk.close_clients()
        if root then zk.delete_tree(zk.admin(), root) end
    end)

    local function state()
        local status, body = n:get("/state", 5)
        assert.equal(200, status, tostring(body))
        local leader, rejoining, sid, pw, node, events =
            body:match("^(%S+) (%S+) (%S+) (%S*) (%S+) (%S*)\n$")
        return { leader = leader == "true", rejoining = rejoining == "true", sid = sid,
                 pw = pw, node = node, events = events, body = body }
    end

    local function poll(fn, timeout)
        local deadline = proc.now() + timeout
        repeat
            local s = state()
            if fn(s) then return s end
            proc.sleep(0.05)
        until proc.now() >= deadline
        return nil
    end

    it("a leader from campaign() in a timer leads again by itself after its session expired",
       function()
        root = zk.new_root("election-ngx")
        n = assert(nginx.start {
            workers = 1,
            env = { ZK_HOSTS = zk.hosts() },
            vars = { ROOT = root },
            lua_modules = { app = NGX_APP },
            http = [[
                init_worker_by_lua_block { require("app").init_worker() }
                server {
                    listen 127.0.0.1:@PORT@;
                    location = /state { content_by_lua_block { require("app").state() } }
                }
            ]],
        })
        local s = poll(function(x) return x.leader end, 15)
        assert.truthy(s, "not elected:\n" .. n:log_tail())
        assert.equal("elected", s.events)
        local sid, node = s.sid, s.node
        local pw = s.pw:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
        -- expire it: join its session from here and close it (zk.expire_session's way)
        local admin = zk.admin()
        local gone = poll(function(x)
            if x.sid ~= sid then return true end
            local other = zkcoord.connect { servers = zk.hosts(), session_id = sid,
                                            session_password = pw, connect_timeout = 2,
                                            session_timeout = 4, reconnect = false }
            if other then other:close() end
            return false
        end, 20)
        assert.truthy(gone, "the session did not expire:\n" .. n:log_tail())
        -- no request asks it to: the callback timer rejoins
        s = poll(function(x) return x.leader end, 15)
        assert.truthy(s, "did not lead again:\n" .. n:log_tail())
        assert.is_false(s.rejoining)
        assert.truthy(s.events == "elected,sessionexpired,elected"
                      or s.events == "elected,deleted,elected", s.events)
        assert.are_not.equal(node, s.node)
        assert.equal(s.sid, assert(admin:exists(s.node)).ephemeral_owner)
        assert.same({ (s.node:match("[^/]+$")) }, (admin:children(root .. "/e")))
    end)
end)
