--- Real Curator (Debian's libcurator-*-java) beside zkcoord: compiles the
--- Java peers in spec/peers/ with javac and starts them.
local proc = require "helpers.proc"
local zk = require "helpers.zk"

local _M = {}

local JAVA_DIR = "/usr/share/java"
local JARS = { "curator-framework", "curator-recipes", "curator-client", "zookeeper",
               "zookeeper-jute", "guava", "slf4j-api", "slf4j-nop",
               -- CuratorDiscoveryPeer: ServiceDiscovery and its JSON
               "curator-x-discovery", "jackson-databind", "jackson-core", "jackson-annotations" }

local classpath   -- once compiled: the class directory and the jars

--- Compiles spec/peers/<name>.java for every name given (once per run of
--- each name set); returns the classpath. Raises with javac's output.
function _M.compile(...)
    local classes = zk.tmpdir() .. "/curator-peers"
    assert(proc.mkdir_p(classes))
    local parts = { classes }
    for _, j in ipairs(JARS) do
        local jar = JAVA_DIR .. "/" .. j .. ".jar"
        local f = io.open(jar, "rb")
        assert(f, jar .. " missing: scripts/install-deps.sh installs libcurator-*-java")
        f:close()
        parts[#parts + 1] = jar
    end
    classpath = table.concat(parts, ":")
    local sources = {}
    for i, name in ipairs({ ... }) do
        sources[i] = ("%q"):format("spec/peers/" .. name .. ".java")
    end
    local log = classes .. "/javac.log"
    local ok = os.execute(("javac -nowarn -d %q -cp %q %s > %q 2>&1")
                          :format(classes, classpath, table.concat(sources, " "), log))
    assert(ok == true or ok == 0, "javac failed: " .. tostring(proc.read_file(log)))
    return classpath
end


--- Starts `java <class> args...` with output to `log`; returns its pid.
function _M.spawn(class, args, log)
    assert(classpath, "curator.compile first")
    local argv = { "java", "-Xss512k", "-XX:TieredStopAtLevel=1", "-cp", classpath, class }
    for _, a in ipairs(args) do argv[#argv + 1] = tostring(a) end
    return assert(proc.spawn(argv, { stdout = log, stderr = log }))
end

return _M
