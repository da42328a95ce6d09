-- The fuzzer (tools/fuzz.lua), bounded: random calls to every public method
-- with random arguments for FUZZ_SECONDS (default 25) against the shared
-- server, in a process of its own (so a crash or a hang is seen, not
-- suffered). Runs in the ASan+UBSan pass too: the child inherits
-- LD_PRELOAD and ZKCOORD_CPATH. FUZZ_SEED replays a run.
--
-- Passes when the run finished and found no new bug: every call returned
-- values or nil + a known code, or raised a clear argument error, or hit a
-- bug already known (listed in tools/fuzz/known.lua: a regression);
-- no hang, the main client passed every health check, every method was
-- called. The last tests probe the known crash and hang in a child process
-- with a short time limit: pending while they are still there, passing once
-- fixed.
local zk = require "helpers.zk"

local function sh_quote(s)
    return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- Runs `luajit <args>` with the project's paths, killed after `limit`
-- seconds. Returns its output.
local function run_lua(args, limit, out)
    local env = zk.lua_env()
    local cmd = ("ZK_HOSTS=%s LUA_PATH=%s LUA_CPATH=%s timeout -s KILL %d luajit %s > %s 2>&1")
        :format(sh_quote(env.ZK_HOSTS), sh_quote(env.LUA_PATH), sh_quote(env.LUA_CPATH), limit,
                args, sh_quote(out))
    os.execute(cmd)
    return zk.proc.read_file(out) or ""
end

local function tail(text, n)
    local lines = {}
    for line in text:gmatch("[^\n]*\n?") do lines[#lines + 1] = line end
    return table.concat(lines, "", math.max(1, #lines - (n or 40)))
end

describe("fuzzer #zk", function()
    it("finds no new bug in a bounded run: no crash, no hang, the client stays usable", function()
        local seconds = tonumber(os.getenv("FUZZ_SECONDS")) or 25
        local seed = tonumber(os.getenv("FUZZ_SEED"))
            or (os.time() % 100000) * 10 + zk.proc.getpid() % 10
        local dir = zk.tmpdir()
        local report, trace, log = dir .. "/fuzz-report.lua", dir .. "/fuzz-trace.txt",
            dir .. "/fuzz.log"
        os.remove(report)
        print(("fuzz: seed %d, %d s (FUZZ_SEED=%d to replay)"):format(seed, seconds, seed))
        local out = run_lua(("tools/fuzz.lua --seconds %d --seed %d --report %s --trace %s")
                                :format(seconds, seed, sh_quote(report), sh_quote(trace)),
                            seconds + 150, log)
        -- sanitizer reports, glibc's heap checks ("free(): ...") and signals,
        -- as they start a line (the fuzzer's own summary quotes some of them)
        local crashed = out:find("\n==%d+==ERROR: ") or out:find("\n[^\n]-:%d+:%d+: runtime error: ")
            or out:find("\n[%w_]+%(%): [^\n]*\n") or out:find("\nKilled", 1, true)
            or out:find("\nSegmentation fault", 1, true) or out:find("\nAborted", 1, true)
        local f = loadfile(report)
        local r = f and f()
        if not r or crashed then
            error(("fuzz run (seed %d) did not finish: crash or hang. Call in progress:\n%s\n"
                   .. "output:\n%s"):format(seed, zk.proc.read_file(trace) or "?", tail(out, 60)))
        end
        print(out:match("(fuzz: seed %d+: .-)\nBUG") or out:match("(fuzz: seed %d+: .*)$") or "")
        local bugs = {}
        for _, b in ipairs(r.bugs) do
            bugs[#bugs + 1] = ("[%s] x%d %s\n    %s\n%s"):format(b.class, b.count, b.call,
                                                            b.message, b.traceback or "")
        end
        assert.is_true(r.finished)
        assert.equal(0, r.new_bugs, ("seed %d: new bugs:\n%s"):format(seed, table.concat(bugs, "\n")))
        assert.equal(0, r.counts.hang)
        assert.equal(0, r.health_failed)
        assert.truthy(r.health_ok >= 2)
        assert.same({}, r.missing, "methods never called")
        -- the run did something of every kind
        assert.truthy(r.calls >= 300, "only " .. r.calls .. " calls")
        assert.truthy(r.counts.ok > 0 and r.counts.err > 0 and r.counts.arg_error > 0)
        assert.truthy(r.wrong_self > 0)
    end)

    -- Bugs the fuzzer found (tools/fuzz/known.lua), fixed: they must stay fixed.

    it("a wait of math.huge returns when its reply comes (K1, src/completions.c)", function()
        local dir = zk.tmpdir()
        local script = dir .. "/k1.lua"
        zk.proc.write_file(script, [[
            local zkcoord = require "zkcoord"
            local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS") })
            print("result", c:send("get", "/"):wait(math.huge) ~= nil)
            c:close()
        ]])
        local out = run_lua(sh_quote(script), 5, dir .. "/k1.out")
        if not out:find("result%strue") then
            error("bug K1 is back: wait(math.huge) never returns:\n" .. out)
            return
        end
        assert.matches("result%strue", out)
    end)

    it("a multi op path with a control character is refused, not a crash (K8, src/session.c)",
       function()
        local dir = zk.tmpdir()
        local script = dir .. "/k8.lua"
        zk.proc.write_file(script, [[
            local zkcoord = require "zkcoord"
            local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS") })
            for _ = 1, 20 do
                pcall(c.multi, c, { { op = "delete", path = "/a\nb" } })
                pcall(c.multi, c, { { op = "create", path = "/x\1y" } })
            end
            print("survived", c:get("/") ~= nil)
            c:close()
        ]])
        local out = run_lua(sh_quote(script), 20, dir .. "/k8.out")
        if not out:find("survived%strue") then
            error("bug K8 is back: multi with a control character in a path crashed:\n" .. out)
            return
        end
        assert.matches("survived%strue", out)
    end)
end)
