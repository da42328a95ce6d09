-- Lock revocation (Curator's protocol) against a real server, and both
-- ways with real Curator: its Revoker asks our holder, we ask its holder.
-- Not under the sanitizer run (#nosan): the JVM must not inherit ASan.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local curator = require "helpers.curator"
local lockmod = require "zkcoord.lock"

describe("lock revocation #zk #nosan", function()
    local root, c, other
    local pids = {}

    setup(function()
        curator.compile("CuratorRevoke")
    end)

    before_each(function()
        root = zk.new_root("revoke")
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

    local function log_of(name)
        local f = ("%s/%s-%d.log"):format(zk.tmpdir(), name, proc.getpid())
        os.remove(f)
        return f
    end

    it("a holder that listens is asked, and gives the lock up", function()
        local l = c:lock("/r", { owner = "holder" })
        local asked
        l:on_revoke(function(owner, node)
            asked = { owner, node }
            l:release()
        end)
        assert.is_true(l:acquire(5))
        local node = l:node()
        assert.is_true(lockmod.revoke(other, node))
        assert.truthy(zk.wait_until(function() return asked ~= nil end, 5, c))
        assert.same({ "holder", node }, asked)
        assert.is_false(l:held())
        assert.is_true(other:lock("/r"):acquire(5))
    end)

    it("on_revoke registered after acquire still hears it; a gone node says nonode", function()
        local l = c:lock("/r2", { owner = "x" })
        assert.is_true(l:acquire(5))
        local asked = 0
        l:on_revoke(function() asked = asked + 1 end)
        c:sync("/r2")
        assert.is_true(lockmod.revoke(other, l:node()))
        assert.truthy(zk.wait_until(function() return asked == 1 end, 5, c))
        assert.is_true(l:held())            -- releasing is the holder's decision
        local node = l:node()
        l:release()
        c:sync("/r2")
        assert.same({ nil, "nonode" }, { lockmod.revoke(other, node) })
        assert.has_error(function() lockmod.revoke({}, node) end)
        assert.has_error(function() lockmod.revoke(other, "rel") end)
        assert.has_error(function() l:on_revoke(5) end)
    end)

    it("works on the write lock of an rwlock", function()
        local w = c:rwlock("/rw", { owner = "w" }):write_lock()
        local asked
        w:on_revoke(function() asked = true w:release() end)
        assert.is_true(w:acquire(5))
        assert.is_true(lockmod.revoke(other, w:node()))
        assert.truthy(zk.wait_until(function() return asked end, 5, c))
        assert.is_true(other:rwlock("/rw"):read_lock():acquire(5))
    end)

    it("we revoke Curator's holder: it releases and we get the lock", function()
        local log = log_of("curator-hold")
        pids[#pids + 1] = curator.spawn("CuratorRevoke", { "hold", zk.hosts(), root .. "/j", 15000 },
                                        log)
        assert.truthy(zk.wait_until(function()
            return (proc.read_file(log) or ""):find("acquired") ~= nil
        end, 20), proc.read_file(log))
        local names = assert(c:children("/j"))
        assert.equal(1, #names)
        assert.is_true(lockmod.revoke(c, "/j/" .. names[1]))
        local l = c:lock("/j")
        assert.is_true(l:acquire(10))
        assert.truthy(zk.wait_until(function()
            return (proc.read_file(log) or ""):find("revoked\nreleased", 1, true) ~= nil
        end, 5), proc.read_file(log))
        l:release()
    end)

    it("Curator's Revoker asks our holder: we release and Curator gets the lock", function()
        local l = c:lock("/k", { owner = "ours" })
        l:on_revoke(function() l:release() end)
        assert.is_true(l:acquire(5))
        local rlog, alog = log_of("curator-revoke"), log_of("curator-acquire")
        local acq = curator.spawn("CuratorRevoke", { "acquire", zk.hosts(), root .. "/k", 15000 },
                                  alog)
        pids[#pids + 1] = acq
        pids[#pids + 1] = curator.spawn("CuratorRevoke", { "revoke", zk.hosts(), root .. "/k" },
                                        rlog)
        assert.truthy(zk.wait_until(function()
            return (proc.read_file(alog) or ""):find("acquired") ~= nil
        end, 25, c), "revoke: " .. tostring(proc.read_file(rlog)) .. " acquire: "
                     .. tostring(proc.read_file(alog)))
        assert.matches("revoked /", proc.read_file(rlog), 1, true)
        assert.is_false(l:held())
    end)
end)
