-- zkcoord counters beside real Curator (Debian's libcurator-*-java) on one
-- node: format "int32" with SharedCount, format "int64" with
-- DistributedAtomicLong. Each side reads the value the other wrote, and a
-- JVM of 4 threads and 2 zkcoord processes increment at once: every
-- increment returns a value no other returns and the total is exact.
-- Curator's side is spec/peers/CuratorCounterPeer.java, compiled here with
-- javac. Not under the sanitizer run (#nosan): the JVM must not inherit
-- ASan's LD_PRELOAD.
local zk = require "helpers.zk"
local proc = require "helpers.proc"

local JAVA_DIR = "/usr/share/java"
local JARS = { "curator-framework", "curator-recipes", "curator-client", "zookeeper",
               "zookeeper-jute", "guava", "slf4j-api", "slf4j-nop" }

-- A zkcoord adder: "ready", waits for the go file, n add(1) (each new
-- value on a line "v V"), "done". args: path, format, n, go file
local LUA_ADDER = [[
local path, fmt, n, go = ...
local zkcoord = require "zkcoord"
io.stdout:setvbuf("line")
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 10 })
local counter = c:counter(path, { format = fmt })
assert(counter:get())
print("ready")
for _ = 1, 6000 do
    local g = io.open(go)
    if g then g:close() break end
    c:waiter():sleep(0.01)
end
for _ = 1, tonumber(n) do
    local v, err, detail = counter:add(1)
    if not v then
        print("error " .. tostring(err) .. " " .. tostring(detail))
        break
    end
    print("v " .. ("%d"):format(v))
    c:waiter():sleep(0.005)   -- spread over 0.5 s: the JVM's threads start later than we do
end
print("done")
c:close()
]]

describe("counters side by side with Curator #zk #nosan", function()
    local root, cp
    local pids = {}

    setup(function()
        local classes = zk.tmpdir() .. "/curator-counter-peer"
        assert(proc.mkdir_p(classes))
        local parts = { classes }
        for _, j in ipairs(JARS) do
            local jar = JAVA_DIR .. "/" .. j .. ".jar"
            assert(io.open(jar, "rb"), jar .. " missing: scripts/install-deps.sh installs "
                   .. "libcurator-recipes-java"):close()
            parts[#parts + 1] = jar
        end
        cp = table.concat(parts, ":")
        local log = classes .. "/javac.log"
        local ok = os.execute(("javac -nowarn -d %q -cp %q spec/peers/CuratorCounterPeer.java > %q 2>&1")
                              :format(classes, cp, log))
        assert(ok == true or ok == 0, "javac failed: " .. tostring(proc.read_file(log)))
    end)

    before_each(function()
        root = zk.new_root("curator-counter")
    end)

    after_each(function()
        for _, pid in ipairs(pids) do
            if proc.alive(pid) then proc.kill(pid, "KILL") end
        end
        pids = {}
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    local function log_file(tag)
        local f = ("%s/%s-%s-%d.log"):format(zk.tmpdir(), root:gsub("/", "_"), tag, math.random(1e6))
        os.remove(f)
        return f
    end

    local function java(args, log)
        local argv = { "java", "-Xss512k", "-XX:TieredStopAtLevel=1", "-cp", cp,
                       "CuratorCounterPeer" }
        for _, x in ipairs(args) do argv[#argv + 1] = tostring(x) end
        local pid = assert(proc.spawn(argv, { stdout = log, stderr = log }))
        pids[#pids + 1] = pid
        return pid
    end

    -- Runs a short Java action to its end; returns its output.
    local function java_run(args)
        local log = log_file("java")
        local pid = java(args, log)
        assert.truthy(proc.wait_exit(pid, 60), "Curator peer did not finish")
        return proc.read_file(log) or ""
    end

    for _, case in ipairs {
        { fmt = "int32", kind = "shared", name = "SharedCount", big = 2 ^ 31 - 1000 },
        { fmt = "int64", kind = "atomic", name = "DistributedAtomicLong", big = 2 ^ 40 + 3 },
    } do
        it(("format %s: %s reads zkcoord's value and zkcoord reads Curator's"):format(
                case.fmt, case.name), function()
            local c = zk.client()
            local path = root .. "/n"
            local n = c:counter(path, { format = case.fmt })
            assert.is_true(n:set(-12345))
            assert.matches("value %-12345\n", java_run { case.kind, "get", zk.hosts(), path })
            assert.matches("ok\n", java_run { case.kind, "set", zk.hosts(), path,
                                              ("%d"):format(case.big) })
            assert.equal(case.big, n:get())
            assert.equal(case.big + 1, n:add(1))
            assert.matches(("value %d\n"):format(case.big + 1),
                           java_run { case.kind, "get", zk.hosts(), path })
            -- and not the other format: 4 bytes are no long, 8 no int
            local other = c:counter(path, { format = case.fmt == "int32" and "int64" or "int32" })
            assert.equal("invalid", select(2, other:get()))
        end)

        it(("format %s: %s (4 threads x 50) and 2 zkcoord processes x 100 add at once"):format(
                case.fmt, case.name), function()
            local c = zk.client()
            local path = root .. "/n"
            local start = 1000
            assert.is_true(c:counter(path, { format = case.fmt }):set(start))
            local go = log_file("go")
            local logs = { java = log_file("java-add") }
            local jpid = java({ case.kind, "add", zk.hosts(), path, 50, 4, go }, logs.java)
            local lpids = {}
            for i = 1, 2 do
                logs["lua" .. i] = log_file("lua-add")
                lpids[i] = assert(zk.spawn_lua(LUA_ADDER, { path, case.fmt, 100, go },
                                               logs["lua" .. i]))
                pids[#pids + 1] = lpids[i]
            end
            assert.truthy(zk.wait_until(function()
                for _, l in pairs(logs) do
                    if not (proc.read_file(l) or ""):find("ready") then return false end
                end
                return true
            end, 60), "contenders did not get ready")
            assert(proc.write_file(go, "go"))
            for _, pid in ipairs { jpid, lpids[1], lpids[2] } do
                assert.truthy(proc.wait_exit(pid, 120), "a contender did not finish")
            end
            local seen, count = {}, { java = 0, lua1 = 0, lua2 = 0 }
            for who, l in pairs(logs) do
                local text = proc.read_file(l) or ""
                assert.is_nil(text:find("error"), who .. ": " .. text)
                assert.matches("\ndone\n", text, 1, true)
                for v in text:gmatch("\nv (%-?%d+)") do
                    v = tonumber(v)
                    assert.is_nil(seen[v], ("value %d returned twice"):format(v))
                    seen[v] = who
                    count[who] = count[who] + 1
                end
            end
            assert.same({ java = 200, lua1 = 100, lua2 = 100 }, count)
            -- at once: each side took values between the other's
            local lo, hi = { java = math.huge, lua = math.huge }, { java = 0, lua = 0 }
            for v, who in pairs(seen) do
                who = who == "java" and "java" or "lua"
                lo[who], hi[who] = math.min(lo[who], v), math.max(hi[who], v)
            end
            assert.is_true(lo.java < hi.lua and lo.lua < hi.java,
                           ("no overlap: java %d..%d, zkcoord %d..%d"):format(lo.java, hi.java,
                                                                             lo.lua, hi.lua))
            for v = start + 1, start + 400 do
                assert.truthy(seen[v], "value " .. v .. " missing")
            end
            assert.equal(start + 400, c:counter(path, { format = case.fmt }):get())
            assert.matches(("value %d\n"):format(start + 400),
                           java_run { case.kind, "get", zk.hosts(), path })
            assert.same({}, (c:children(path)))
        end)
    end
end)
