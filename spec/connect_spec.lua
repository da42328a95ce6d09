-- connect names the mistake (issues 21.5, 24.6 and 28): a host that does
-- not resolve, servers that all refuse (tried until the connect timeout: one
-- may come up meanwhile), a server that answers but is not ZooKeeper, a
-- missing chroot, each with a detail that names it; and a server that
-- accepts but never answers still waits the connect timeout. Real servers
-- and real sockets on loopback only.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local tcpproxy = require "helpers.tcpproxy"
local zkcoord = require "zkcoord"

describe("connect names the mistake #zk", function()
    local root

    before_each(function()
        root = zk.new_root("connect")
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("a host that does not resolve is named (was 'No such file or directory')", function()
        -- "no..such": an empty label fails in the resolver itself, so the
        -- test sends no DNS query off this machine
        local c, err, detail = zkcoord.connect { servers = "no..such:2181", connect_timeout = 2 }
        assert.is_nil(c)
        assert.equal("systemerror", err)
        assert.matches("^cannot resolve host 'no..such' %(.+%)$", detail)
        -- in a list with one that resolves, libzookeeper uses that one
        c = assert(zkcoord.connect { servers = { zk.hosts(), "no..such:2181" },
                                     connect_timeout = 2 })
        c:close()
    end)

    it("servers that all refuse are tried until the connect timeout, then named", function()
        -- was: failed after 0.5 s whatever the connect timeout (issue 28)
        local p1, p2 = assert(proc.free_port()), assert(proc.free_port())
        local t0 = proc.now()
        local c, err, detail = zkcoord.connect { servers = { "127.0.0.1:" .. p1, "localhost:" .. p2 },
                                                 connect_timeout = 1 }
        local took = proc.now() - t0
        assert.is_nil(c)
        assert.equal("connectionloss", err)
        assert.equal(("connection refused by 127.0.0.1:%d, localhost:%d"):format(p1, p2), detail)
        assert.is_true(took >= 1 and took < 2, ("took %.2f s"):format(took))
        -- one server that answers among refusing ones: connected
        local ok = assert(zkcoord.connect { servers = { "127.0.0.1:" .. p1, zk.hosts() },
                                            connect_timeout = 5 })
        assert.equal("connected", ok:state())
        ok:close()
    end)

    it("a server that comes up while connect waits is reached (was connectionloss at 0.5 s)",
       function()
        -- a ZooKeeper restart: refused for 2 s, then a server (a proxy to ours)
        local port = assert(proc.free_port())
        local late = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)")),
                                           { port = port, after = 2 }))
        finally(function() late:stop() end)
        local t0 = proc.now()
        local c, err, detail = zkcoord.connect { servers = late.hosts, connect_timeout = 20 }
        local took = proc.now() - t0
        assert(c, tostring(err) .. " " .. tostring(detail))
        finally(function() c:close() end)
        assert.equal("connected", c:state())
        -- it waited for the server (up 2 s after the proxy was spawned, just before t0)
        assert.is_true(took >= 1.5 and took < 20, ("took %.2f s"):format(took))
        assert.is_table((c:exists("/")))
    end)

    it("a server that is not ZooKeeper (HTTP 400) fails at once, naming it (was 'connected')",
       function()
        -- was: a client "connected" in a session " Bad Req" (issue 28)
        local http = assert(tcpproxy.start("127.0.0.1", 1))
        finally(function() http:stop() end)
        assert(http:reply("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
                          .. "Content-Length: 11\r\nConnection: close\r\n\r\nBad Request"))
        local t0 = proc.now()
        local c, err, detail = zkcoord.connect { servers = http.hosts, connect_timeout = 5 }
        local took = proc.now() - t0
        assert.is_nil(c)
        assert.equal("connectionloss", err)
        assert.equal(http.hosts .. " did not answer as a ZooKeeper server", detail)
        assert.is_true(took < 2, ("took %.2f s"):format(took))
        -- with a refusing server in the list: never that one named (the HTTP
        -- server closes, and libzookeeper may have moved on to it already)
        local dead = "127.0.0.1:" .. assert(proc.free_port())
        for _ = 1, 20 do
            c, err, detail = zkcoord.connect { servers = { http.hosts, dead }, connect_timeout = 5 }
            assert.is_nil(c)
            assert.equal("connectionloss", err)
            if detail ~= http.hosts .. " did not answer as a ZooKeeper server" then
                assert.equal("one of " .. http.hosts .. "," .. dead
                             .. " did not answer as a ZooKeeper server", detail)
            end
        end
    end)

    it("a server that accepts but never answers still waits the connect timeout", function()
        local port = tonumber(zk.hosts():match(":(%d+)"))
        local proxy = assert(tcpproxy.start("127.0.0.1", port))
        proxy:blackhole()
        local t0 = proc.now()
        local c, err, detail = zkcoord.connect { servers = proxy.hosts, connect_timeout = 1.5 }
        local took = proc.now() - t0
        assert.is_nil(c)
        assert.equal("timeout", err)
        assert.matches("no ZooKeeper server answered within 1.5s", detail, 1, true)
        assert.is_true(took >= 1.4 and took < 3, ("took %.2f s"):format(took))
        proxy:stop()
    end)

    it("a server without a port is taken at 2181, and a refusal there says so", function()
        local core = require "zkcoord.core"
        local ok, why = core.probe("127.0.0.1", "2181", 0.25)
        if not ok and why == "refused" then        -- nobody listens on 2181 here
            local c, err, detail = zkcoord.connect { servers = "127.0.0.1", connect_timeout = 5 }
            assert.is_nil(c)
            assert.equal("connectionloss", err)          -- was: "invalid", "Invalid argument"
            assert.equal("connection refused by 127.0.0.1:2181", detail)
        end
        -- and the hosts string libzookeeper gets has it
        local options = require "zkcoord.client.options"
        assert.equal("127.0.0.1:2181", options.check("127.0.0.1").hosts)
    end)

    it("a chroot that does not exist fails with nonode, naming it (calls failed later)",
       function()
        local missing = root .. "/missing"
        local c, err, detail = zkcoord.connect { servers = zk.hosts(), chroot = missing }
        assert.is_nil(c)
        assert.equal("nonode", err)
        assert.matches("chroot " .. missing:gsub("%-", "%%-") .. " does not exist", detail)
        -- the same chroot in the servers string
        c, err = zkcoord.connect(zk.hosts() .. missing)
        assert.is_nil(c)
        assert.equal("nonode", err)
        -- nothing was made, and no session is left open
        assert.is_false(zk.admin():exists(missing))
        -- once made, it connects
        assert(zk.admin():create(missing))
        c = assert(zkcoord.connect { servers = zk.hosts(), chroot = missing })
        assert.same({}, (c:children("/")))
        c:close()
    end)
end)

describe("a missing or mismatched core says which file, for which Lua, how to build", function()
    -- Runs `lua` requiring zkcoord with package.cpath = cpath; its output.
    local function require_with(lua, cpath)
        local code = ("package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path; "
                      .. "package.cpath = %q; local ok, err = pcall(require, 'zkcoord'); "
                      .. "io.write(tostring(ok), ' ', tostring(err))"):format(cpath)
        local f = assert(io.popen(("%s -e %q 2>&1"):format(lua, code)))
        local out = f:read("*a")
        f:close()
        return out
    end

    it("no core.so on package.cpath: the paths looked at and the build command", function()
        local dir = proc.mktemp_dir("zkcoord-nocore")
        local out = require_with("luajit", dir .. "/?.so")
        proc.rm_rf(dir)
        assert.matches("^false zkcoord: the C core %(zkcoord/core.so%) is not built for LuaJIT", out)
        assert.truthy(out:find("looked for " .. dir .. "/zkcoord/core.so", 1, true), out)
        assert.truthy(out:find("`bash scripts/build.sh`", 1, true), out)
        assert.truthy(out:find("luarocks make rockspec/zkcoord-scm-1.rockspec", 1, true), out)
    end)

    it("a core.so that does not load: that file, this Lua, the loader's reason", function()
        local dir = proc.mktemp_dir("zkcoord-badcore")
        proc.mkdir_p(dir .. "/zkcoord")
        proc.write_file(dir .. "/zkcoord/core.so", "not a shared object")
        local out = require_with("luajit", dir .. "/?.so")
        proc.rm_rf(dir)
        assert.truthy(out:find("zkcoord: the C core " .. dir .. "/zkcoord/core.so was found but "
                               .. "does not load in LuaJIT", 1, true), out)
        assert.truthy(out:find("`bash scripts/build.sh`", 1, true), out)
    end)

    it("LuaJIT's core in Lua 5.4 (the undefined symbol case): names both", function()
        local rc = os.execute("command -v lua5.4 >/dev/null 2>&1")
        if rc ~= 0 and rc ~= true then
            return     -- no Lua 5.4 here
        end
        local out = require_with("lua5.4", "lua/?.so")
        assert.truthy(out:find("the C core lua/zkcoord/core.so was found but does not load in "
                               .. "Lua 5.4", 1, true), out)
        assert.truthy(out:find("undefined symbol", 1, true), out)
        assert.truthy(out:find("`bash scripts/build.sh --lua 5.4`", 1, true), out)
    end)
end)
