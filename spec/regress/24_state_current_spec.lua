-- Issue 24.3: held() and is_leader() were stale until the library got
-- control back: take a lock, delete its node from another session, be busy
-- elsewhere (os.execute("sleep 1")), and held() still said true although
-- the watch event was already in the C queue. A state answer now takes
-- what already reached the process first.
local zk = require "helpers.zk"
local tcpproxy = require "helpers.tcpproxy"

-- Deletes `node` from another session and waits (busy elsewhere, never
-- calling the library) long enough for the watch event to reach the queue.
local function delete_behind_its_back(node)
    assert.is_true(zk.admin():delete(node))
    os.execute("sleep 1")
end


describe("state answers take what already reached the process #zk", function()
    local root, c

    before_each(function()
        root = zk.new_root("current")
        c = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("lock:held() is false after its node was deleted, on_lost first", function()
        local l = c:lock("/l")
        local told = {}
        l:on_lost(function(reason) told[#told + 1] = reason end)
        assert.is_true(l:acquire(5))
        delete_behind_its_back(root .. l:node())
        assert.same({}, told)          -- nothing ran while we were busy
        assert.is_false(l:held())
        assert.same({ "deleted" }, told)
        assert.same({ nil, "lost" }, { l:release() })
    end)

    it("election:is_leader() is false after its node was deleted", function()
        local e = c:election("/e", { id = "me", rejoin = false })  -- the loss itself
        local told = {}
        e:on_lost(function(reason) told[#told + 1] = reason end)
        assert.is_true(e:campaign(5))
        local entries = assert(c:children("/e"))
        delete_behind_its_back(root .. "/e/" .. entries[1])
        assert.is_false(e:is_leader())
        assert.same({ "deleted" }, told)
        assert.same({ nil, "lost" }, { e:resign() })
    end)

    it("lease:held() is false after its node was deleted", function()
        local s = c:semaphore("/s", 2)
        local lease = assert(s:acquire(5))
        local told = {}
        lease:on_lost(function(reason) told[#told + 1] = reason end)
        delete_behind_its_back(root .. lease:node())
        assert.is_false(lease:held())
        assert.same({ "deleted" }, told)
        assert.same({ nil, "lost" }, { lease:release() })
    end)

    it("client:state() is lost once the server was not heard from for the timeout", function()
        -- The server cut off (black hole): no news can reach the process,
        -- libzookeeper only notices silence. Only a clock knows.
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)$"))))
        local pc = zk.client { servers = proxy.hosts, session_timeout = 2 }
        assert.equal("connected", pc:state())
        assert(proxy:blackhole())
        os.execute("sleep 2.5")       -- busy elsewhere, past the session timeout
        local st = pc:state()
        proxy:stop()
        assert.equal("lost", st)
    end)
end)
