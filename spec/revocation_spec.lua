-- zkcoord.revocation against a real server: a request heard once, nothing
-- left after stop() or the node's delete, the watch set again after a
-- connection loss in the same session; and the lock's on_revoke, which
-- uses it, across a connection loss (with and without the cohort).
local zk = require "helpers.zk"
local tcpproxy = require "helpers.tcpproxy"
local revocation = require "zkcoord.revocation"
local lockmod = require "zkcoord.lock"

local REVOKE = revocation.REVOKE

describe("revocation #zk", function()
    local root, c, other, proxy

    before_each(function()
        root = zk.new_root("revocation")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        if proxy then
            proxy:stop()
            proxy = nil
        end
        zk.delete_tree(zk.admin(), root)
    end)

    -- What has reached `client` by now is handled: the server answers a
    -- sync after every event it sent before, and process() runs the
    -- callbacks that queued.
    local function settle(client, path)
        assert(client:sync(path))
        client:process()
    end

    -- A client through a proxy we can cut, its session outliving a cut.
    local function proxied()
        proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)"))))
        return zk.client { servers = proxy.hosts, chroot = root, session_timeout = 10 }
    end

    -- Cuts the client's connection and refuses new ones: suspended.
    local function suspend(pc)
        assert(proxy:refuse())
        assert(proxy:cut())
        assert.truthy(zk.wait_until(function() return pc:state() == "suspended" end, 10, pc),
                      "not suspended")
    end

    local function resume(pc, sid)
        assert(proxy:pass())
        -- the session's timeout bounds the reconnection
        assert.truthy(zk.wait_until(function() return pc:state() == "connected" end, 10, pc),
                      "no reconnection")
        assert.equal(sid, pc:session_id())
    end

    it("tells one request once, with its argument and the node", function()
        assert(c:create("/n", "", { ephemeral = true }))
        local calls = {}
        local w = revocation.watch(c, "/n", function(arg, node)
            calls[#calls + 1] = { arg, node }
        end, "hold-1")
        settle(c, "/n")
        local gets = c:stats().requests.get
        assert(other:set("/n", "other data"))     -- a change: read again, nothing to tell
        settle(c, "/n")
        assert.equal(gets + 1, c:stats().requests.get)    -- one read per change
        assert.same({}, calls)
        assert.is_false(w:requested())
        assert(revocation.request(other, "/n"))
        assert.truthy(zk.wait_until(function() return #calls == 1 end, 5, c))
        assert.same({ { "hold-1", "/n" } }, calls)
        assert.is_true(w:requested())
        assert(other:set("/n", "x"))
        assert(other:set("/n", REVOKE))
        settle(c, "/n")
        assert.equal(1, #calls)                   -- asked stays asked: told once
        assert.same({ nil, "nonode" }, { revocation.request(other, "/gone") })
        assert.has_error(function() revocation.watch({}, "/n", print) end)
        assert.has_error(function() revocation.watch(c, "rel", print) end)
        assert.has_error(function() revocation.watch(c, "/n", 5) end)
        assert.has_error(function() revocation.request(c, "rel") end)
        assert.has_error(function() w.stop({}) end)
    end)

    it("leaves no watch after stop(), even with its get in flight, nor after the node goes", function()
        assert(c:create("/n", "", { ephemeral = true }))
        local base, listeners = c:stats().watches, c:stats().listeners
        local told = 0
        local function tell() told = told + 1 end
        local w = revocation.watch(c, "/n", tell)
        settle(c, "/n")
        assert.equal(base + 1, c:stats().watches)
        assert.is_true(w:stop())
        assert.is_true(w:stop())                  -- idempotent
        assert.equal(base, c:stats().watches)
        -- stopped before the get's reply: its watch goes too
        local w2 = revocation.watch(c, "/n", tell)
        w2:stop()
        assert(other:set("/n", REVOKE))
        settle(c, "/n")
        assert.equal(base, c:stats().watches)
        assert.equal(0, told)
        -- the node's delete ends a watcher nobody stopped
        assert(other:set("/n", ""))
        revocation.watch(c, "/n", tell)
        settle(c, "/n")
        assert.equal(base + 1, c:stats().watches)
        assert(c:delete("/n"))
        settle(c, "/")
        assert.equal(base, c:stats().watches)
        assert.equal(listeners, c:stats().listeners)
        assert.equal(0, told)
    end)

    it("sets its watch again once connected after a get lost with the connection", function()
        local pc = proxied()
        assert(pc:create("/n", "", { ephemeral = true }))
        local sid, listeners = pc:session_id(), pc:stats().listeners
        local told = 0
        suspend(pc)
        local w = revocation.watch(pc, "/n", function() told = told + 1 end)
        resume(pc, sid)
        settle(pc, "/n")
        assert.equal(listeners, pc:stats().listeners)    -- the wait for "connected" ended
        assert(other:set("/n", REVOKE))
        assert.truthy(zk.wait_until(function() return told == 1 end, 10, pc), "not told")
        assert.is_true(w:requested())
        -- A watch set before a cut is kept across it; a request made while
        -- the link is down is told once connected again.
        assert(other:set("/n", ""))
        told = 0
        local w2 = revocation.watch(pc, "/n", function() told = told + 1 end)
        settle(pc, "/n")
        suspend(pc)
        assert(other:set("/n", REVOKE))
        resume(pc, sid)
        assert.truthy(zk.wait_until(function() return told == 1 end, 10, pc), "not told")
        assert.is_true(w2:requested())
    end)

    -- Before zkcoord.revocation, the lock's get (and the cohort's, which
    -- watches its node itself, one watch for all its holders) failed with
    -- the connection and was never sent again: the request went unheard.
    for _, form in ipairs { { "lock", false }, { "cohort lock", true } } do
        it(form[1] .. ": on_revoke registered while suspended hears a request once connected",
           function()
            local pc = proxied()
            local l = pc:lock("/l", { owner = "holder", cohort = form[2] })
            assert.is_true(l:acquire(5))
            local node, sid = l:node(), pc:session_id()
            local asked
            suspend(pc)
            l:on_revoke(function(owner, n) asked = { owner, n } end)
            resume(pc, sid)
            assert.is_true(lockmod.revoke(other, node))
            assert.truthy(zk.wait_until(function() return asked ~= nil end, 10, pc), "not asked")
            assert.same({ "holder", node }, asked)
            assert.is_true(l:held())
            l:release()
        end)
    end
end)
