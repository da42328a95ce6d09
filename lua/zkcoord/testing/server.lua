-- zkcoord.testing.server: real ZooKeeper servers for tests: a standalone
-- server or an ensemble on free 127.0.0.1 ports, each in its own
-- /tmp/zkcoord-zk-XXXXXX dir (zkcoord.testing is the documented face).
--
-- Every JVM runs under a watchdog shell (proc.spawn with an owner) that
-- SIGKILLs it and removes its temp dir once the creating process is gone,
-- so a crashed or timed-out test run leaves no servers behind. Needs java
-- and ZooKeeper's jars (Debian's zookeeper package, or ZOOKEEPER_HOME).
local proc = require "zkcoord.testing.proc"

local _M = {}

local Server = {}
Server.__index = Server

local Ensemble = {}
Ensemble.__index = Ensemble

-- Everything started by this process and not destroyed yet.
local live = {}

local DEFAULT_TICK = 500          -- min session timeout = 2 * tickTime = 1 s
local READY_TIMEOUT = 30
local ENSEMBLE_TIMEOUT = 60
local STOP_GRACE = 10
local PAUSE_TIMEOUT = 10


local file_exists = proc.file_exists


-- Debian's zookeeper.jar manifest only pulls slf4j-api, so without a
-- binding the server logs nothing (SLF4J NOP). Add Debian's log4j 1.2
-- binding. An upstream tarball (ZOOKEEPER_HOME) ships logback instead; both
-- config files are written, each backend reads its own.
local function classpath(opts, confdir)
    if opts.classpath then
        return confdir .. ":" .. opts.classpath
    end
    local home = opts.zookeeper_home or os.getenv("ZOOKEEPER_HOME")
    if home and home ~= "" then
        return table.concat({ confdir, home .. "/lib/*", home .. "/*" }, ":")
    end
    local cp = { confdir, "/usr/share/java/zookeeper.jar" }
    local jars = { "/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar" }
    if opts.tls then
        -- NettyServerCnxnFactory: the manifest names netty's handler,
        -- transport and buffer, not what they need in turn
        for _, j in ipairs({ "codec", "resolver", "transport-native-unix-common" }) do
            jars[#jars + 1] = "/usr/share/java/netty-" .. j .. ".jar"
        end
    end
    for _, jar in ipairs(jars) do
        if file_exists(jar) then
            cp[#cp + 1] = jar
        end
    end
    return table.concat(cp, ":")
end


local function log_configs(dir, level)
    local ok, err = proc.write_file(dir .. "/log4j.properties", table.concat({
        "log4j.rootLogger=" .. level .. ", CONSOLE",
        "log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender",
        "log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout",
        "log4j.appender.CONSOLE.layout.ConversionPattern="
            .. "%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n",
        "",
    }, "\n"))
    if not ok then
        return nil, err
    end
    return proc.write_file(dir .. "/logback.xml", table.concat({
        "<configuration>",
        '  <appender name="CONSOLE" class="ch.qos.logback.core.ConsoleAppender">',
        "    <encoder><pattern>%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n</pattern></encoder>",
        "  </appender>",
        '  <root level="' .. level .. '"><appender-ref ref="CONSOLE"/></root>',
        "</configuration>",
        "",
    }, "\n"))
end


local function extra_lines(extra)
    if extra == nil then
        return {}
    elseif type(extra) == "string" then
        return { extra }
    elseif type(extra) == "table" then
        return extra
    end
    error("opts.extra must be a string or a list of lines", 3)
end


local function write_config(s, opts, server_lines)
    local lines = {
        "tickTime=" .. s.tick_time,
        "initLimit=10",
        "syncLimit=5",
        "dataDir=" .. s.dir .. "/data",
        "clientPort=" .. s.port,
        "clientPortAddress=127.0.0.1",
        "admin.enableServer=false",
        "4lw.commands.whitelist=*",
        "forceSync=no",
        "maxClientCnxns=0",
        -- Txn logs are preallocated in 64 MB steps by default.
        "preAllocSize=4096",
    }
    for _, l in ipairs(server_lines or {}) do
        lines[#lines + 1] = l
    end
    if opts.tls then
        for _, l in ipairs(opts.tls:server_lines(s.tls_port)) do
            lines[#lines + 1] = l
        end
    end
    for _, l in ipairs(extra_lines(opts.extra)) do
        lines[#lines + 1] = l
    end
    lines[#lines + 1] = ""
    return proc.write_file(s.cfg, table.concat(lines, "\n"))
end


-- SASL (DIGEST-MD5): a JAAS file with the users, and the JVM flags that
-- make ZooKeeper take SASL clients (the `sasl` ACL scheme); `required`:
-- a session that does not authenticate is closed
-- (zookeeper.sessionRequireClientSASLAuth, 3.8).
local function sasl_flags(dir, sasl)
    local users = {}
    for name, password in pairs(sasl.users or {}) do
        assert(not (name .. password):find('[%s"\\;]'),
            "opts.sasl.users: no space, quote, backslash or ';' in a name or password")
        users[#users + 1] = ('    user_%s="%s"'):format(name, password)
    end
    table.sort(users)
    local jaas = dir .. "/jaas.conf"
    local ok, err = proc.write_file(jaas, table.concat({
        "Server {",
        "    org.apache.zookeeper.server.auth.DigestLoginModule required",
        table.concat(users, "\n") .. ";",
        "};",
        "",
    }, "\n"))
    if not ok then
        return nil, err
    end
    return {
        "-Djava.security.auth.login.config=" .. jaas,
        "-Dzookeeper.authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
        sasl.required and "-Dzookeeper.sessionRequireClientSASLAuth=true" or nil,
    }
end


-- Raises on a bad opts.sasl, before any temp dir is made.
local function check_sasl(sasl)
    assert(sasl == nil or (type(sasl) == "table" and type(sasl.users or {}) == "table"),
        "opts.sasl must be a table { users = { name = password }, required = bool }")
end


local function new_server(dir, port, opts, cleanup_dir)
    assert(opts.tick_time == nil or type(opts.tick_time) == "number",
        "opts.tick_time must be a number (ms)")
    local s = setmetatable({
        dir = dir,
        port = port,
        hosts = "127.0.0.1:" .. port,
        cfg = dir .. "/zoo.cfg",
        log = dir .. "/server.log",
        tick_time = opts.tick_time or DEFAULT_TICK,
        owner = proc.getpid(),
        cleanup_dir = cleanup_dir or dir,
    }, Server)
    if opts.tls then
        -- a TLS port beside the plain one (which the readiness checks use)
        local err
        s.tls_port, err = proc.free_port()
        if not s.tls_port then
            return nil, err
        end
        s.tls_hosts = "127.0.0.1:" .. s.tls_port
    end
    local ok, err = proc.mkdir_p(dir .. "/data")
    if not ok then
        return nil, err
    end
    ok, err = log_configs(dir, opts.log_level or "INFO")
    if not ok then
        return nil, err
    end
    s.argv = { opts.java or "java", "-Xmx256m",
        -- Small heaps and fast startup: these JVMs serve a handful of tests.
        "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "-Djava.net.preferIPv4Stack=true",
        "-Dzookeeper.extendedTypesEnabled=true",   -- TTL nodes
        "-Dzookeeper.log.dir=" .. dir,
        "-Dlog4j.configuration=file:" .. dir .. "/log4j.properties",
        "-Dlogback.configurationFile=" .. dir .. "/logback.xml",
    }
    if opts.sasl then
        local flags
        flags, err = sasl_flags(dir, opts.sasl)
        if not flags then
            return nil, err
        end
        for _, f in ipairs(flags) do
            s.argv[#s.argv + 1] = f
        end
    end
    for _, f in ipairs(opts.jvm_flags or {}) do
        s.argv[#s.argv + 1] = f
    end
    for _, a in ipairs({ "-cp", classpath(opts, dir),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain", s.cfg }) do
        s.argv[#s.argv + 1] = a
    end
    return s
end


-- Last lines of the server's log, for error messages.
function Server:log_tail(n)
    n = n or 20
    local text = proc.read_file(self.log) or ""
    local lines = {}
    for l in text:gmatch("[^\n]+") do
        lines[#lines + 1] = l
        if #lines > n then
            table.remove(lines, 1)
        end
    end
    return table.concat(lines, "\n")
end


function Server:running()
    return self.pid ~= nil and proc.alive(self.pid)
end


-- Mode line of `srvr`: "standalone", "leader", "follower", ... or nil, err
-- (also when the server is up but not serving, e.g. without quorum).
function Server:mode(timeout)
    local text, err = proc.tcp_probe("127.0.0.1", self.port, "srvr",
        timeout or 1)
    if not text then
        return nil, err
    end
    local mode = text:match("Mode: (%a+)")
    if not mode then
        return nil, (text:gsub("%s+$", ""))
    end
    return mode
end


-- True when the server answers `ruok` with `imok` and `srvr` has a Mode.
function Server:ready(timeout)
    local r = proc.tcp_probe("127.0.0.1", self.port, "ruok", timeout or 1)
    if r ~= "imok" then
        return false
    end
    return self:mode(timeout) ~= nil
end


function Server:spawn()
    if self:running() then
        return nil, "already running (pid " .. self.pid .. ")"
    end
    local pid, wd = proc.spawn(self.argv, {
        stdout = self.log, stderr = self.log, cwd = self.dir,
        owner = self.owner, cleanup_dir = self.cleanup_dir,
    })
    if not pid then
        return nil, wd
    end
    self.pid, self.watchdog = pid, wd
    self.started_at = proc.now()
    return pid
end


function Server:wait_ready(timeout)
    local deadline = proc.now() + (timeout or READY_TIMEOUT)
    while true do
        if not self:running() then
            return nil, "zookeeper on port " .. self.port
                .. " exited during startup; log tail:\n" .. self:log_tail()
        end
        if self:ready(0.5) then
            self.ready_time = proc.now() - (self.started_at or proc.now())
            return true
        end
        if proc.now() >= deadline then
            return nil, "zookeeper on port " .. self.port
                .. " not ready after " .. (timeout or READY_TIMEOUT)
                .. " s; log tail:\n" .. self:log_tail()
        end
        proc.sleep(0.05)
    end
end


-- (Re)starts the server with its config, dataDir and port: sessions and
-- data survive a stop/start. opts.wait = false returns once spawned (for
-- ensemble members that cannot serve before a quorum is back).
function Server:start(opts)
    opts = opts or {}
    local ok, err = self:spawn()
    if not ok then
        return nil, err
    end
    if opts.wait == false then
        return true
    end
    ok, err = self:wait_ready(opts.timeout)
    if not ok then
        self:kill()
        return nil, err
    end
    return true
end


local function reap(self)
    -- The JVM is gone; the watchdog would notice within a second and exit
    -- by itself. TERM it now so that nothing we started outlives stop().
    if self.watchdog then
        if proc.alive(self.watchdog) then
            proc.kill(self.watchdog, "TERM")
            proc.wait_exit(self.watchdog, 3)
        end
        self.watchdog = nil
    end
    self.pid = nil
end


-- SIGTERM, then SIGKILL after `grace` seconds (default 10).
function Server:stop(grace)
    if not self:running() then
        reap(self)
        return true
    end
    proc.kill(self.pid, "CONT")          -- a paused JVM cannot handle TERM
    proc.kill(self.pid, "TERM")
    if not proc.wait_exit(self.pid, grace or STOP_GRACE) then
        proc.kill(self.pid, "KILL")
        if not proc.wait_exit(self.pid, 5) then
            return nil, "zookeeper pid " .. self.pid .. " does not die"
        end
    end
    reap(self)
    return true
end


-- stop() then start(): the same port, config and data; sessions whose
-- timeout has not passed meanwhile survive.
function Server:restart(opts)
    local ok, err = self:stop()
    if not ok then
        return nil, err
    end
    return self:start(opts)
end


function Server:kill()
    if not self:running() then
        reap(self)
        return true
    end
    proc.kill(self.pid, "KILL")
    if not proc.wait_exit(self.pid, 5) then
        return nil, "zookeeper pid " .. self.pid .. " does not die"
    end
    reap(self)
    return true
end


-- SIGSTOP, and returns once every JVM thread is stopped: kill() returns
-- before that, and a busy JVM may still answer a request meanwhile.
function Server:pause(timeout)
    if not self:running() then
        return nil, "not running"
    end
    local ok, err = proc.kill(self.pid, "STOP")
    if not ok then
        return nil, err
    end
    local deadline = proc.now() + (timeout or PAUSE_TIMEOUT)
    while not proc.stopped(self.pid) do
        if proc.now() >= deadline then
            return nil, "zookeeper pid " .. self.pid .. " not stopped after "
                .. (timeout or PAUSE_TIMEOUT) .. " s"
        end
        proc.sleep(0.005)
    end
    return true
end


function Server:resume()
    if not self:running() then
        return nil, "not running"
    end
    return proc.kill(self.pid, "CONT")
end


function Server:destroy()
    local ok, err = self:stop(5)
    live[self] = nil
    if self.dir then
        proc.rm_rf(self.dir)
    end
    return ok, err
end


local function port_clash(s)
    return (proc.read_file(s.log) or ""):find("Address already in use") ~= nil
end


-- Starts a standalone server. opts: tick_time (ms, default 500), extra
-- (cfg lines), port, jvm_flags, java, classpath, zookeeper_home, log_level,
-- timeout (ready, default 30 s), tls (certificates from helpers.tlscerts:
-- also a TLS port that needs a client certificate, s.tls_port and
-- s.tls_hosts, with the x509 ACL scheme), sasl ({ users = { name =
-- password }, required = bool }: DIGEST-MD5 users, the sasl ACL scheme;
-- required: a session without SASL is closed).
function _M.start(opts)
    opts = opts or {}
    assert(type(opts) == "table", "zkserver.start: opts must be a table")
    check_sasl(opts.sasl)
    -- free_port() reserves its port across our processes, but something
    -- else may still bind it meanwhile: retry on a clash when the port was
    -- ours to pick.
    local attempts = opts.port and 1 or 3
    for attempt = 1, attempts do
        local dir, err = proc.mktemp_dir("zkcoord-zk-")
        if not dir then
            return nil, err
        end
        local s
        s, err = new_server(dir, opts.port or proc.free_port(), opts)
        local ok = s ~= nil
        if ok then
            live[s] = true
            ok, err = write_config(s, opts)
        end
        if ok then
            ok, err = s:start({ timeout = opts.timeout })
            if ok then
                return s
            end
        end
        local clash = s and port_clash(s)
        if s then
            s:destroy()
        end
        proc.rm_rf(dir)
        if not clash or attempt == attempts then
            return nil, err
        end
    end
end

-- Ensembles ------------------------------------------------------------------


function Ensemble:leader()
    for i, s in ipairs(self.servers) do
        if s:running() and s:mode(0.5) == "leader" then
            return i
        end
    end
    return nil
end


-- Modes of all servers ({ "follower", "leader", false, ... }).
function Ensemble:modes()
    local modes = {}
    for i, s in ipairs(self.servers) do
        modes[i] = s:running() and s:mode(0.5) or false
    end
    return modes
end


-- Waits until every running server serves and exactly one is the leader.
function Ensemble:wait_ready(timeout)
    timeout = timeout or ENSEMBLE_TIMEOUT
    local deadline = proc.now() + timeout
    local modes
    while true do
        local leaders, ready, running = 0, 0, 0
        modes = {}
        for i, s in ipairs(self.servers) do
            if s.pid then
                if not s:running() then
                    return nil, "server " .. i .. " exited; log tail:\n"
                        .. s:log_tail()
                end
                running = running + 1
                local m = s:ready(0.5) and s:mode(0.5)
                modes[i] = tostring(m)
                if m then
                    ready = ready + 1
                    if m == "leader" then
                        leaders = leaders + 1
                    end
                end
            else
                modes[i] = "stopped"
            end
        end
        if running > 0 and ready == running and leaders == 1 then
            return true
        end
        if proc.now() >= deadline then
            local tails = {}
            for i, s in ipairs(self.servers) do
                tails[#tails + 1] = "server " .. i .. ":\n" .. s:log_tail(8)
            end
            return nil, "ensemble not ready after " .. timeout .. " s (modes: "
                .. table.concat(modes, ",") .. ")\n" .. table.concat(tails, "\n")
        end
        proc.sleep(0.1)
    end
end


function Ensemble:destroy()
    -- TERM everyone first so they shut down in parallel.
    for _, s in ipairs(self.servers) do
        if s:running() then
            proc.kill(s.pid, "CONT")
            proc.kill(s.pid, "TERM")
        end
    end
    local ok, err = true, nil
    for _, s in ipairs(self.servers) do
        local sok, serr = s:stop(5)
        if not sok then
            ok, err = nil, serr
        end
        live[s] = nil
    end
    live[self] = nil
    if self.dir then
        proc.rm_rf(self.dir)
    end
    return ok, err
end


-- Starts `opts.size` (default 3) servers in parallel and waits (default
-- 60 s) for one leader. Other opts as for start().
function _M.start_ensemble(opts)
    opts = opts or {}
    assert(type(opts) == "table", "zkserver.start_ensemble: opts must be a table")
    check_sasl(opts.sasl)
    local size = opts.size or 3
    assert(type(size) == "number" and size >= 1, "opts.size must be >= 1")
    local root, err = proc.mktemp_dir("zkcoord-zk-")
    if not root then
        return nil, err
    end
    local e = setmetatable({ dir = root, servers = {} }, Ensemble)
    live[e] = true

    -- free_port() never hands out one port twice in a process; the check
    -- below is kept as a cheap guard.
    local ports, taken, server_lines, hosts = {}, {}, {}, {}
    for i = 1, size do
        local p = {}
        for k = 1, 3 do
            local port
            repeat
                port, err = proc.free_port()
                if not port then
                    e:destroy()
                    return nil, err
                end
            until not taken[port]
            taken[port] = true
            p[k] = port
        end
        ports[i] = p
        server_lines[i] = string.format("server.%d=127.0.0.1:%d:%d", i,
            p[2], p[3])
        hosts[i] = "127.0.0.1:" .. p[1]
    end
    e.hosts = table.concat(hosts, ",")

    for i = 1, size do
        local dir = root .. "/s" .. i
        local s
        s, err = new_server(dir, ports[i][1], opts, root)
        if not s then
            e:destroy()
            return nil, err
        end
        s.id = i
        local ok
        ok, err = write_config(s, opts, server_lines)
        if ok then
            ok, err = proc.write_file(dir .. "/data/myid", i .. "\n")
        end
        if not ok then
            e:destroy()
            return nil, err
        end
        e.servers[i] = s
        live[s] = true
    end
    for _, s in ipairs(e.servers) do
        local ok
        ok, err = s:start({ wait = false })
        if not ok then
            e:destroy()
            return nil, err
        end
    end
    local t0 = proc.now()
    local ok
    ok, err = e:wait_ready(opts.timeout or ENSEMBLE_TIMEOUT)
    if not ok then
        e:destroy()
        return nil, err
    end
    e.ready_time = proc.now() - t0
    return e
end


-- Destroys every server and ensemble this process started (for an exit
-- hook in spec/helper.lua).
function _M.destroy_all()
    local ensembles, servers = {}, {}
    for obj in pairs(live) do
        local list = getmetatable(obj) == Ensemble and ensembles or servers
        list[#list + 1] = obj
    end
    for _, e in ipairs(ensembles) do
        e:destroy()
    end
    for _, s in ipairs(servers) do
        if live[s] then
            s:destroy()
        end
    end
end

return _M
