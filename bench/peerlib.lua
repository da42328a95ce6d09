-- bench/peerlib.lua: building and starting the peer programs of bench/peers/
-- (zkcoord, raw C, kazoo, Curator), for bench/run.lua and bench/scale.lua.
--
--   local peerlib = require "peerlib"      -- with bench/ on package.path
--   local libs = peerlib.libs(root, luajit)  -- { { key =, name =, build =, argv = }, ... }
local proc = require "helpers.proc"

local _M = {}

-- Runs a shell command: its output (stdout and stderr) and whether it
-- exited 0 (LuaJIT's popen close does not tell).
function _M.sh(cmd)
    local f = assert(io.popen("( " .. cmd .. " ) 2>&1; echo \"__rc=$?\""))
    local out = f:read("*a")
    f:close()
    local rc = tonumber(out:match("__rc=(%d+)%s*$"))
    return (out:gsub("__rc=%d+%s*$", "")), rc == 0
end

function _M.shquote(s)
    return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

function _M.file_exists(p)
    local f = io.open(p)
    if f then
        f:close()
        return true
    end
    return false
end

function _M.trim(s)
    return (tostring(s or ""):gsub("^%s+", ""):gsub("%s+$", ""))
end

function _M.loadavg()
    return _M.trim((proc.read_file("/proc/loadavg") or ""):match("^(%S+ %S+ %S+)"))
end

function _M.python()
    local p = os.getenv("BENCH_PYTHON")
    if p and p ~= "" then
        return p
    end
    -- Debian's python3 has python3-kazoo; a python3 earlier on PATH may not.
    return _M.file_exists("/usr/bin/python3") and "/usr/bin/python3" or "python3"
end

local JAVA_DIR = "/usr/share/java"
local CURATOR_JARS = { "curator-framework", "curator-recipes", "curator-client", "zookeeper",
                       "zookeeper-jute", "guava", "slf4j-api", "slf4j-nop" }

--- The peers, for the checkout at `root`; `luajit` runs the zkcoord peer.
function _M.libs(root, luajit)
    local sh, shquote, file_exists, trim = _M.sh, _M.shquote, _M.file_exists, _M.trim
    local build_dir = root .. "/bench/results/build"
    local peers = root .. "/bench/peers"
    local function curator_cp()
        local cp = { build_dir .. "/java" }
        for _, j in ipairs(CURATOR_JARS) do
            cp[#cp + 1] = JAVA_DIR .. "/" .. j .. ".jar"
        end
        -- Guava 31 needs failureaccess for some classes; Debian ships it apart.
        if file_exists(JAVA_DIR .. "/failureaccess.jar") then
            cp[#cp + 1] = JAVA_DIR .. "/failureaccess.jar"
        end
        return table.concat(cp, ":")
    end
    return {
        {
            key = "zkcoord", name = "zkcoord",
            build = function()
                if not file_exists(root .. "/lua/zkcoord/core.so") then
                    local out, ok = sh("bash " .. shquote(root .. "/scripts/build.sh"))
                    if not ok then
                        return nil, "scripts/build.sh failed: " .. out
                    end
                end
                return true
            end,
            -- program: "bench" (run.lua's rows) or "scale" (bench/scale.lua's curves)
            argv = function(scen, hosts, path, dur, extra, program)
                local file = program == "scale" and "/zkcoord_scale.lua" or "/zkcoord_bench.lua"
                return { luajit, peers .. file, scen, hosts, path, dur, extra }
            end,
        },
        {
            key = "raw", name = "raw C",
            build = function()
                local out, ok = sh(("mkdir -p %s && cc -O2 -Wall -o %s %s -lzookeeper_mt -lpthread")
                    :format(shquote(build_dir), shquote(build_dir .. "/raw_bench"),
                            shquote(peers .. "/raw_bench.c")))
                if not ok then
                    return nil, "cc failed (libzookeeper-mt-dev installed?): " .. out
                end
                return true
            end,
            argv = function(scen, hosts, path, dur, extra)
                return { build_dir .. "/raw_bench", scen, hosts, path, dur, extra }
            end,
        },
        {
            key = "kazoo", name = "kazoo",
            build = function()
                local out, ok = sh(shquote(_M.python()) .. " -c 'import kazoo.client'")
                if not ok then
                    return nil, "python3-kazoo is not installed (" .. trim(out) .. ")"
                end
                return true
            end,
            argv = function(scen, hosts, path, dur, extra)
                return { _M.python(), peers .. "/kazoo_bench.py", scen, hosts, path, dur, extra }
            end,
        },
        {
            key = "curator", name = "Curator",
            build = function()
                for _, j in ipairs(CURATOR_JARS) do
                    if not file_exists(JAVA_DIR .. "/" .. j .. ".jar") then
                        return nil, JAVA_DIR .. "/" .. j .. ".jar is missing "
                            .. "(libcurator-recipes-java, libslf4j-java)"
                    end
                end
                local out, ok = sh(("mkdir -p %s && javac -nowarn -d %s -cp %s %s"):format(
                    shquote(build_dir .. "/java"), shquote(build_dir .. "/java"),
                    shquote(curator_cp()), shquote(peers .. "/CuratorBench.java")))
                if not ok then
                    return nil, "javac failed (default-jdk-headless installed?): " .. out
                end
                return true
            end,
            argv = function(scen, hosts, path, dur, extra)
                local a = { "java" }
                for w in (os.getenv("BENCH_JAVA_OPTS") or ""):gmatch("%S+") do
                    a[#a + 1] = w
                end
                for _, x in ipairs({ "-cp", curator_cp(), "CuratorBench", scen, hosts, path, dur }) do
                    a[#a + 1] = x
                end
                a[#a + 1] = extra
                return a
            end,
        },
    }
end

return _M
