--- zkcoord.testing: throwaway ZooKeeper servers for your own specs (as
--- Curator's TestingServer and TestingCluster): a standalone server or an
--- ensemble on free 127.0.0.1 ports in a temp dir, stopped, restarted,
--- paused; a session expired; a client's connection cut through a proxy.
--- Any test framework (no busted needed), any Lua (5.1 to 5.4, LuaJIT);
--- needs java and ZooKeeper's jars (Debian's zookeeper package, or
--- ZOOKEEPER_HOME), sh and bash; the proxy runs luajit.
--
--   local testing = require "zkcoord.testing"
--   local server = assert(testing.server())        -- server.hosts: "127.0.0.1:<port>"
--   local c = assert(zkcoord.connect { servers = server.hosts })
--   server:pause(); server:resume()                -- SIGSTOP / SIGCONT
--   server:restart()                               -- same port, data, sessions
--   assert(testing.expire_session(c, server.hosts))
--   local p = assert(testing.proxy(server))        -- connect to p.hosts, then
--   p:cut(); p:blackhole(); p:pass(); p:stop()     -- cut, silence, restore
--   server:destroy()                               -- stopped, its dir removed
--
--   local e = assert(testing.ensemble { size = 3 }) -- e.hosts, e.servers[i]
--   e.servers[e:leader()]:stop()
--   e:destroy()
--
-- Every server runs under a watchdog that kills it (and removes its dir)
-- once the process that started it is gone, so a crashed test run leaves
-- nothing behind; testing.destroy_all() ends all of this process's now.
local zkcoord = require "zkcoord"
local util = require "zkcoord.util"
local server = require "zkcoord.testing.server"
local proxy = require "zkcoord.testing.proxy"
local proc = require "zkcoord.testing.proc"

local _M = { _VERSION = require("zkcoord.version") }

local argerror = util.argerror

local SERVER_KEYS = { "tick_time", "port", "extra", "jvm_flags", "java", "classpath",
                      "zookeeper_home", "log_level", "timeout", "sasl" }
local ENSEMBLE_KEYS = { "size" }
for _, k in ipairs(SERVER_KEYS) do
    if k ~= "port" then ENSEMBLE_KEYS[#ENSEMBLE_KEYS + 1] = k end
end

--- A standalone server, ready to serve, or nil, err. opts: tick_time (ms,
--- default 500: sessions of 1 to 20 s), port (default a free one), extra
--- (zoo.cfg lines), jvm_flags, java, classpath, zookeeper_home, log_level
--- (default INFO, to <dir>/server.log), timeout (to be ready, default 30 s),
--- sasl ({ users = { bob = "secret" }, required = false }: DIGEST-MD5
--- users for connect's sasl option and the sasl ACL scheme; required: a
--- session without SASL is closed).
--- The server: hosts, port, dir, pid; start(), stop(grace?), restart(),
--- kill(), pause(), resume(), running(), mode() ("standalone", ...),
--- log_tail(n), destroy(). Runtime failures return nil, err.
function _M.server(opts)
    return server.start(util.check_opts(opts, SERVER_KEYS, "server", 1))
end


--- An ensemble of opts.size servers (default 3), started in parallel,
--- ready with one leader, or nil, err (default 60 s: opts.timeout). Other
--- opts as for server(). The ensemble: hosts (all of them), servers (each
--- a server as above), leader() (the leader's index), modes(),
--- wait_ready(timeout?), destroy().
function _M.ensemble(opts)
    return server.start_ensemble(util.check_opts(opts, ENSEMBLE_KEYS, "ensemble", 1))
end


--- Expires `client`'s session on the servers `hosts` (a server's or an
--- ensemble's hosts): a second handle joins the same
--- session and closes it (kazoo's expire_session, Curator's KillSession).
--- The client may win its session back in between (it reconnects when the
--- server moves the session away), so this repeats until the session
--- changed, up to `timeout` seconds (default 15). The client's own waits
--- (dispatch) run meanwhile. true, or nil, "timeout" ("invalid" while
--- the client has no session, "closed" once closed).
function _M.expire_session(client, hosts, timeout)
    if type(hosts) ~= "string" then
        argerror(2, "expire_session", "hosts must be a string, got " .. type(hosts))
    end
    util.check_timeout(timeout, "expire_session", 3)
    local sid, pw = client:session_id(), client:session_password()
    if not (sid and pw) then      -- none to expire
        return nil, client:is_closed() and "closed" or "invalid"
    end
    local deadline = proc.now() + (timeout or 15)
    repeat
        local other = zkcoord.connect { servers = hosts, session_id = sid,
                                        session_password = pw, connect_timeout = 2,
                                        session_timeout = client:session_timeout(),
                                        reconnect = false }
        if other then
            other:close()
        end
        local until_t = math.min(deadline, proc.now() + 2)
        while client:session_id() == sid and proc.now() < until_t do
            client:dispatch(0.02)
        end
        if client:session_id() ~= sid then
            return true
        end
    until proc.now() >= deadline
    return nil, "timeout"
end


--- A TCP proxy on a free 127.0.0.1 port to `target` (a server from
--- server(), or "host:port"), or nil, err. A client connected to
--- proxy.hosts goes through it. proxy:cut() closes every connection now
--- (new ones pass), blackhole() drops every byte both ways (a network
--- partition: the client hears nothing until its session times out),
--- refuse() resets new connections, hang() leaves new ones unanswered,
--- delay(seconds) delays each chunk, pass() forwards again, stop() ends
--- it. Each returns once the proxy acknowledged (true, or nil, err). The
--- proxy is a luajit process (opts.luajit, else $LUAJIT, else "luajit")
--- that exits with the process that started it.
function _M.proxy(target, opts)
    local host, port
    if type(target) == "table" and target.port then
        host, port = "127.0.0.1", target.port
    elseif type(target) == "string" then
        host, port = target:match("^([^:,]+):(%d+)$")
        port = tonumber(port)
    end
    if not (host and port) then
        argerror(1, "proxy", "target must be a server or \"host:port\"")
    end
    return proxy.start(host, port, util.check_opts(opts, { "luajit" }, "proxy", 2))
end


--- Stops and removes every server and ensemble this process started.
function _M.destroy_all()
    server.destroy_all()
end

return _M
