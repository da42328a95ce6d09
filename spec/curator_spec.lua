-- zkcoord beside real Curator (Debian's libcurator-*-java) on the same
-- paths, at once: the lock, the rwlock, the semaphore, the leader latch and
-- group membership. Each contender marks itself with an ephemeral node
-- while it holds and counts the marks, so an overlap is seen by ZooKeeper
-- itself, whichever side broke the rule. Curator's side is
-- spec/peers/CuratorPeer.java, compiled here with javac. Not under the
-- sanitizer run (#nosan): the JVM must not inherit ASan's LD_PRELOAD.
local zk = require "helpers.zk"
local proc = require "helpers.proc"

local JAVA_DIR = "/usr/share/java"
local JARS = { "curator-framework", "curator-recipes", "curator-client", "zookeeper",
               "zookeeper-jute", "guava", "slf4j-api", "slf4j-nop" }

-- The zkcoord contender: the same protocol as CuratorPeer.
local LUA_PEER = [[
local zkcoord = require "zkcoord"
local mode, path, markers, name, rounds, hold, max = ...
rounds, hold, max = tonumber(rounds), tonumber(hold) / 1000, tonumber(max)
io.stdout:setvbuf("line")
local function say(s) io.stdout:write(s, "\n") end
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 4 })
local function count(kinds)
    local n = 0
    for _, m in ipairs(assert(c:children(markers))) do
        if kinds:find(m:sub(1, 1), 1, true) then n = n + 1 end
    end
    return n
end
local function mark(kind, count_kinds)
    assert(c:create(markers .. "/" .. kind .. "-" .. name, "", { ephemeral = true }))
    return count(count_kinds)
end
local function unmark(kind) assert(c:delete(markers .. "/" .. kind .. "-" .. name)) end
say("ready")
-- "<mode>_cohort": 4 coroutines of this process share one node (cohort =
-- true), the rounds split among them, each with its own mark
local base = mode:match("^(.*)_cohort$")
if base then
    local K = 4
    for k = 1, K do
        c:spawn(function()
            local rw = base ~= "lock" and c:rwlock(path, { cohort = true })
            local l = base == "lock" and c:lock(path, { cohort = true })
                      or base == "write" and rw:write_lock() or rw:read_lock()
            local me = name .. "-" .. k
            for _ = 1, rounds / K do
                local ok, err = l:acquire(20)
                if not ok then say("error " .. tostring(err)) return end
                local kind = base == "read" and "r" or "w"
                assert(c:create(markers .. "/" .. kind .. "-" .. me, "", { ephemeral = true }))
                local n = 0
                for _, m in ipairs(assert(c:children(markers))) do
                    if (base == "read" and "w" or "wr"):find(m:sub(1, 1), 1, true) then n = n + 1 end
                end
                say("acquired " .. n)
                if n > (base == "read" and 0 or 1) then say("violation " .. n) end
                c:waiter():sleep(hold)
                assert(c:delete(markers .. "/" .. kind .. "-" .. me))
                l:release()
                say("released")
            end
        end)
    end
    assert(c:run(80))
    rounds = 0
end
for _ = 1, rounds do
    if mode == "lock" or mode == "read" or mode == "write" then
        local l = mode == "lock" and c:lock(path)
                  or mode == "write" and c:rwlock(path):write_lock() or c:rwlock(path):read_lock()
        local ok, err = l:acquire(20)
        if not ok then say("error " .. tostring(err)) break end
        local kind = mode == "read" and "r" or "w"
        local n = mark(kind, mode == "read" and "w" or "wr")
        say("acquired " .. n)
        if n > (mode == "read" and 0 or 1) then say("violation " .. n) end
        c:waiter():sleep(hold)
        unmark(kind)
        l:release()
        say("released")
    elseif mode == "semaphore" then
        local lease, err = c:semaphore(path, max):acquire(20)
        if not lease then say("error " .. tostring(err)) break end
        local n = mark("s", "s")
        say("acquired " .. n)
        if n > max then say("violation " .. n) end
        c:waiter():sleep(hold)
        unmark("s")
        lease:release()
        say("released")
    elseif mode == "leader" then
        local e = c:election(path, { id = name })
        local ok, err = e:campaign(20)
        if not ok then say("error " .. tostring(err)) break end
        local n = mark("l", "l")
        say("acquired " .. n)
        if n > 1 then say("violation " .. n) end
        c:waiter():sleep(hold)
        unmark("l")
        e:resign()
        say("released")
    elseif mode == "group" then
        local g = c:group(path, { id = name, data = "data-" .. name })
        assert(g:join(5))
        -- a member until each of the max contenders has seen them all (its
        -- "g" marker), for at most hold: they start at different times
        local seen, ids, marked, until_t = {}, {}, false, c:waiter():now() + hold
        while c:waiter():now() < until_t do
            for id in pairs(assert(g:members())) do
                if not seen[id] then seen[id], ids[#ids + 1] = true, id end
            end
            if not marked and #ids >= max then
                -- persistent, as Curator's side makes its own: an ephemeral
                -- one went with the first peer to leave, and those still
                -- counting never saw all of them (60 s each)
                assert(c:create(markers .. "/g-" .. name, ""))
                marked = true
            end
            if marked and count("g") >= max then break end
            c:waiter():sleep(0.05)
        end
        table.sort(ids)
        say("members " .. table.concat(ids, ","))
        g:close()
    end
end
say("done")
c:close()
]]

describe("side by side with Curator #zk #nosan", function()
    local root, classes, cp
    local pids = {}

    setup(function()
        classes = zk.tmpdir() .. "/curator-peer"
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
        local ok = os.execute(("javac -nowarn -d %q -cp %q spec/peers/CuratorPeer.java > %q 2>&1")
                              :format(classes, cp, log))
        assert(ok == true or ok == 0, "javac failed: " .. tostring(proc.read_file(log)))
    end)

    before_each(function()
        root = zk.new_root("curator")
    end)

    after_each(function()
        for _, pid in ipairs(pids) do
            if proc.alive(pid) then proc.kill(pid, "KILL") end
        end
        pids = {}
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    -- Runs `each` Curator and `each` zkcoord contenders (modes[i] for the
    -- i-th of each side) on one path; returns every contender's log lines.
    local function run(modes, rounds, hold_ms, max)
        -- Curator's side takes the mode without "_cohort"
        local path, markers = root .. "/r", root .. "/markers"
        assert(zk.admin():create(markers))
        local logs = {}
        for i, mode in ipairs(modes) do
            for _, side in ipairs { "java", "lua" } do
                local name = side .. i
                local log = ("%s/%s-%d-%s.log"):format(zk.tmpdir(), root:gsub("/", "_"), i, side)
                os.remove(log)
                local m = side == "java" and mode:gsub("_cohort$", "") or mode
                local args = { m, path, markers, name, rounds, hold_ms, max or 1 }
                local pid
                if side == "java" then
                    pid = assert(proc.spawn({ "java", "-Xss512k", "-XX:TieredStopAtLevel=1",
                                              "-cp", cp, "CuratorPeer", m, zk.hosts(),
                                              unpack(args, 2) },
                                            { stdout = log, stderr = log }))
                else
                    pid = assert(zk.spawn_lua(LUA_PEER, args, log))
                end
                pids[#pids + 1] = pid
                logs[#logs + 1] = { name = name, file = log }
            end
        end
        for _, pid in ipairs(pids) do
            assert.truthy(proc.wait_exit(pid, 90), "a contender did not finish")
        end
        local out = {}
        for _, l in ipairs(logs) do
            local text = proc.read_file(l.file) or ""
            local lines = {}
            for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
            out[l.name] = { text = text, lines = lines }
        end
        return out
    end

    local function check(out, rounds, max_seen_at_least)
        local most = 0
        for name, r in pairs(out) do
            local acquired = 0
            for _, line in ipairs(r.lines) do
                assert.is_nil(line:match("^violation"), name .. ": " .. r.text)
                assert.is_nil(line:match("^error"), name .. ": " .. r.text)
                local n = tonumber(line:match("^acquired (%d+)"))
                if n then
                    acquired = acquired + 1
                    if n > most then most = n end
                end
            end
            assert.equal(rounds, acquired, name .. ": " .. r.text)
            assert.matches("\ndone", r.text, 1, true)
        end
        if max_seen_at_least then
            assert.is_true(most >= max_seen_at_least, "never held together: " .. most)
        end
    end

    it("lock: Curator's InterProcessMutex and zkcoord exclude each other", function()
        check(run({ "lock", "lock" }, 8, 30), 8)
    end)

    it("rwlock: Curator's and zkcoord's readers and writers", function()
        check(run({ "write", "read", "read" }, 6, 30), 6)
    end)

    -- issue 25: the cohort shares one node among the process's owners; to
    -- Curator it is one contender in line like any other
    it("lock with cohort = true: Curator's InterProcessMutex and 4 coroutines exclude each other",
       function()
        check(run({ "lock_cohort", "lock_cohort" }, 8, 30), 8)
    end)

    it("rwlock with cohort = true: Curator's readers and writers, and cohorts of readers",
       function()
        check(run({ "write_cohort", "read_cohort", "read_cohort" }, 8, 30), 8)
    end)

    it("semaphore: InterProcessSemaphoreV2 and zkcoord share 2 leases", function()
        check(run({ "semaphore", "semaphore" }, 8, 60, 2), 8, 2)
    end)

    it("election: LeaderLatch and zkcoord elect one leader at a time", function()
        check(run({ "leader", "leader" }, 4, 50), 4)
    end)

    it("group: GroupMember and zkcoord see each other as members", function()
        -- each stays until all 4 have seen all 4 (before: 2.5 s each, from
        -- its own start; at load 7 the JVMs joined after zkcoord's two had
        -- gone, 1 run in 6), at most 60 s
        local out = run({ "group", "group" }, 1, 60000, 4)
        for name, r in pairs(out) do
            assert.matches("members java1,java2,lua1,lua2", r.text, 1, true, name .. ": " .. r.text)
        end
    end)
end)
