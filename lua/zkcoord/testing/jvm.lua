-- zkcoord.testing.jvm: what a test server's JVM is given: its class
-- path, its log configuration and its zoo.cfg (zkcoord.testing.server
-- starts it).
local proc = require "zkcoord.testing.proc"

local _M = {}

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


_M.classpath, _M.log_configs, _M.write_config = classpath, log_configs, write_config

return _M
