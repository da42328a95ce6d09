-- Issue 21.1: a holder stopped (SIGSTOP, a long GC pause) past its session
-- timeout while another process takes the lock believed, on SIGCONT, that
-- it still held it ("held()=true release()=true"): libzookeeper's threads
-- were stopped too, so nothing in the process knew. The clock rule
-- (client/session.lua) knows. A real separate process is stopped here.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local tcpproxy = require "helpers.tcpproxy"

local TIMEOUT = 2     -- the child's session timeout, seconds

-- The child: takes the lock (or leadership), says so, then sleeps in a
-- plain loop that never calls the library until the `go` file exists, and
-- then asks its questions first of all. Each answer and each callback is a
-- line in the log, in order.
local CHILD = [[
    local zkcoord = require "zkcoord"
    local proc = require "helpers.proc"
    local kind, path, log, go, timeout, servers = ...
    local function say(s)
        local f = io.open(log, "a") f:write(s, "\n") f:close()
    end
    local c = assert(zkcoord.connect { servers = servers or os.getenv("ZK_HOSTS"),
                                       session_timeout = tonumber(timeout) })
    if kind == "lock" then
        local l = c:lock(path)
        l:on_lost(function(reason) say("on_lost " .. reason) end)
        assert(l:acquire(10))
        say("ready")
        while not proc.file_exists(go) do proc.sleep(0.01) end
        say("held " .. tostring(l:held()))
        local ok, err = l:release()
        say("release " .. tostring(ok) .. " " .. tostring(err))
    else
        local e = c:election(path, { id = "child" })
        e:on_lost(function(reason) say("on_lost " .. reason) end)
        assert(e:campaign(10))
        say("ready")
        while not proc.file_exists(go) do proc.sleep(0.01) end
        say("is_leader " .. tostring(e:is_leader()))
        local ok, err = e:resign()
        say("resign " .. tostring(ok) .. " " .. tostring(err))
    end
    c:close()
    say("done")
]]

local function lines(log)
    local out = {}
    for l in (proc.read_file(log) or ""):gmatch("[^\n]+") do
        out[#out + 1] = l
    end
    return out
end

-- Starts the child, stops it once it holds, lets `take` (in this process)
-- succeed while it is stopped, then resumes it. Returns the child's log.
local function pause_past_timeout(kind, root, take, proxy)
    local dir = zk.tmpdir()
    local log, go = dir .. "/" .. kind .. "-paused.log", dir .. "/" .. kind .. "-paused.go"
    os.remove(log)
    os.remove(go)
    local pid = assert(zk.spawn_lua(CHILD, { kind, root .. "/x", log, go, TIMEOUT,
                                             proxy and proxy.hosts }))
    assert.truthy(zk.wait_until(function()
        return (proc.read_file(log) or ""):find("ready")
    end, 20), "the child never held")
    if proxy then
        assert(proxy:blackhole())    -- no news will reach the child: only a clock knows
    end
    assert(proc.kill(pid, "STOP"))
    -- Another process takes it: possible only once the server expired the
    -- stopped child's session (one session timeout, plus the watch's news).
    local t0 = proc.now()
    local ok, err = take()
    local stopped = proc.now() - t0
    assert.is_true(ok, tostring(err))
    assert.is_true(stopped >= TIMEOUT * 0.9, "taken after " .. stopped .. "s")
    assert(proc.write_file(go, "go"))
    assert(proc.kill(pid, "CONT"))
    assert.truthy(proc.wait_exit(pid, 30), "the child did not finish")
    return lines(log)
end


describe("a holder paused past its session timeout #zk", function()
    local root

    before_each(function()
        root = zk.new_root("paused")
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("knows on its first held() that the lock is lost; on_lost ran first", function()
        local c = zk.client { chroot = root }
        local l = c:lock("/x")
        local out = pause_past_timeout("lock", root, function()
            return l:acquire(TIMEOUT * 10)
        end)
        -- The reason is the first news taken: the server's delete of the
        -- node (sent before it closed the connection) or the clock rule.
        assert.truthy(out[2] == "on_lost sessionexpired" or out[2] == "on_lost deleted",
                      tostring(out[2]))
        out[2] = "on_lost"
        assert.same({ "ready", "on_lost", "held false", "release nil lost", "done" }, out)
        assert.is_true(l:held())
        assert.is_true(l:release())
    end)

    it("knows from its clock alone when no news reaches it (its server cut off)", function()
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)$"))))
        local c = zk.client { chroot = root }
        local l = c:lock("/x")
        local ok, out = pcall(pause_past_timeout, "lock", root, function()
            return l:acquire(TIMEOUT * 10)
        end, proxy)
        proxy:stop()
        assert(ok, out)
        assert.same({ "ready", "on_lost sessionexpired", "held false", "release nil lost",
                      "done" }, out)
        assert.is_true(l:release())
    end)

    it("knows on its first is_leader() that leadership is lost; on_lost ran first", function()
        local c = zk.client { chroot = root }
        local e = c:election("/x", { id = "parent" })
        local out = pause_past_timeout("election", root, function()
            return e:campaign(TIMEOUT * 10)
        end)
        assert.truthy(out[2] == "on_lost sessionexpired" or out[2] == "on_lost deleted",
                      tostring(out[2]))
        out[2] = "on_lost"
        assert.same({ "ready", "on_lost", "is_leader false", "resign nil lost", "done" }, out)
        assert.is_true(e:is_leader())
        assert.is_true(e:resign())
    end)
end)
