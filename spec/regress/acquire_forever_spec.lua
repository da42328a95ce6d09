-- Regression: acquire() with no timeout spun forever once it had to wait:
-- wait(math.huge) reached pthread_cond_timedwait as an invalid timespec,
-- which failed at once, in a loop holding the queue mutex, so the watch
-- event that would end the wait could never be queued.
local zk = require "helpers.zk"
local proc = require "helpers.proc"

describe("acquire without a timeout #zk", function()
    it("waits for the holder and is granted", function()
        local root = zk.new_root("forever")
        local log = zk.tmpdir() .. "/forever.log"
        local pid = assert(zk.spawn_lua([[
            local zkcoord = require "zkcoord"
            local path, log = ...
            local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS") })
            local l = c:lock(path)
            assert(l:acquire(10))
            local f = io.open(log, "a") f:write("held\n") f:close()
            c:waiter():sleep(0.5)
            l:release()
            c:close()
        ]], { root .. "/l", log }))
        assert.truthy(zk.wait_until(function() return (proc.read_file(log) or ""):find("held") end, 15))
        local c = zk.client { chroot = root }
        local lock = c:lock("/l")
        local t0 = proc.now()
        assert.is_true(lock:acquire())
        assert.is_true(proc.now() - t0 < 10)
        lock:release()
        -- and a plain wait with no deadline returns when an event comes
        local ev = c:waiter():event()
        c:exists("/w", function() ev:set() end)
        zk.admin():create(root .. "/w")
        assert.is_true(ev:wait())
        proc.wait_exit(pid, 10)
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)
end)
