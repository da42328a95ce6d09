-- After an outage longer than the session timeout the client opens a new
-- session; the nodes its recipes made in the lost session are deleted as
-- soon as the new one connects. Otherwise they stay until the restarted
-- server expires the old session: a whole session timeout more, during
-- which every other contender waits.
local zk = require "helpers.zk"
local proc = require "helpers.proc"

describe("recovery after a lost session #zk", function()
    it("deletes the lost session's lock and semaphore nodes once a new session connects", function()
        local srv = assert(zk.zkserver.start({ tick_time = 500 }))
        local T = 4
        local a = zk.client { servers = srv.hosts, session_timeout = T }
        local lock = a:lock("/rec/lock")
        assert(lock:acquire(5))
        local lease = assert(a:semaphore("/rec/sem", 1):acquire(5))
        local nodes = { lock:node(), lease:node() }
        local old_sid = a:session_id()

        srv:stop()
        assert.truthy(zk.wait_until(function() return a:state() == "lost" end, T + 5, a),
                      "the session was not counted lost")
        assert.truthy(srv:start())
        assert.truthy(zk.wait_until(function() return a:state() == "connected" end, 30, a),
                      "no new session")
        local t_conn = proc.now()
        assert.are_not.equal(old_sid, a:session_id())
        assert.is_false(lock:held())

        local b = zk.client { servers = srv.hosts, session_timeout = 10 }
        local gone = zk.wait_until(function()
            return b:exists(nodes[1]) == false and b:exists(nodes[2]) == false
        end, 3 * T, b)
        local took = proc.now() - t_conn
        local t1 = proc.now()
        local other = b:lock("/rec/lock")
        local ok, err = other:acquire(3 * T)
        local waited = proc.now() - t1
        print(("\n[recovery] session timeout %d s: the lost session's nodes gone %.0f ms after the"
               .. " new session connected; another client's acquire took %.0f ms")
              :format(T, took * 1000, waited * 1000))
        assert.truthy(gone, "the lost session's nodes are still there")
        assert.truthy(took < 1, ("nodes gone only after %.2f s"):format(took))
        assert.truthy(ok, tostring(err))
        assert.truthy(waited < 1, ("acquire waited %.2f s"):format(waited))
        other:release()
        b:close()
        a:close()
        srv:destroy()
    end)
end)


describe("close #zk", function()
    it("ends the session even with replies in flight: its ephemeral nodes go at once", function()
        local admin = zk.admin()
        local root = zk.new_root("close")
        local left = {}
        for i = 1, 10 do
            local c = zk.client { session_timeout = 10 }
            local p = assert(c:create(root .. "/e" .. i, "x", { ephemeral = true }))
            for _ = 1, 300 do c:send("get", root) end
            c:close()
            left[#left + 1] = p
        end
        proc.sleep(0.5)
        local still = {}
        for _, p in ipairs(left) do
            if admin:exists(p) then still[#still + 1] = p end
        end
        assert.are.same({}, still, "nodes of closed sessions still there")
        zk.delete_tree(admin, root)
    end)
end)
