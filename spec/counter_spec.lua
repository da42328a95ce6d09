-- The counter against a real server: creation on first use, add/set/
-- compare_and_set, argument checks, the stored format, and 5 processes
-- adding at once (every returned value distinct, none lost).
local zk = require "helpers.zk"
local proc = require "helpers.proc"

-- An adder process: waits for the start file, then `n` add(1), each
-- returned value on its own line, then its stats.
-- args: chroot, path, n, out file, go file
local ADDER = [[
local root, path, n, out, go = ...
local zkcoord = require "zkcoord"
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), chroot = root,
                                   session_timeout = 10 })
local counter = c:counter(path)
assert(counter:get())                 -- connected and the node exists: ready
local f = assert(io.open(out, "w"))
f:write("ready\n")
f:flush()
for _ = 1, 1000 do
    local g = io.open(go)
    if g then g:close() break end
    c:waiter():sleep(0.01)
end
for _ = 1, tonumber(n) do
    local v, err, detail = counter:add(1)
    if not v then
        f:write("error ", tostring(err), " ", tostring(detail), "\n")
        os.exit(1)
    end
    f:write(v, "\n")
end
local s = counter:stats()
f:write(("stats %d %d %d\n"):format(s.adds, s.cas_attempts, s.cas_failures))
f:close()
c:close()
]]

describe("counter #zk", function()
    local root, c1, c2

    before_each(function()
        root = zk.new_root("counter")
        c1 = zk.client { chroot = root }
        c2 = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("starts at its initial value, created on first use", function()
        assert.is_false(c1:exists("/a/b/n"))
        assert.equal(0, c1:counter("/a/b/n"):get())
        assert.equal("0", (c1:get("/a/b/n")))
        assert.equal(7, c1:counter("/m", { initial = 7 }):get())
        -- an existing counter keeps its value whatever `initial` says
        assert.equal(7, c2:counter("/m", { initial = 100 }):get())
        assert.equal(-3, c2:counter("/neg", { initial = -3 }):get())
    end)

    it("add returns the new value, stored as a decimal string", function()
        local n = c1:counter("/n")
        assert.equal(1, n:add(1))
        assert.equal(6, n:add(5))
        assert.equal(-4, n:add(-10))
        assert.equal(-3, n:add())
        assert.equal(-3, n:add(0))
        assert.equal(-3, n:get())
        assert.equal("-3", (c2:get("/n")))
        assert.equal(2 ^ 53 - 4, n:add(2 ^ 53 - 1))
        assert.equal("9007199254740988", (c2:get("/n")))
        assert.same({ adds = 6, cas_attempts = 6, cas_failures = 0 }, n:stats())
    end)

    it("sees the other clients' adds (one lost race, counted)", function()
        local a, b = c1:counter("/n"), c2:counter("/n")
        assert.equal(1, a:add(1))
        assert.equal(2, b:add(1))
        assert.equal(3, a:add(1))       -- a's cached version is stale: one badversion
        assert.same({ adds = 2, cas_attempts = 3, cas_failures = 1 }, a:stats())
        assert.same({ adds = 1, cas_attempts = 1, cas_failures = 0 }, b:stats())
        assert.equal(3, b:get())
        assert.same({ 0, 0 }, { c1:stats().pending, c1:stats().watches })
    end)

    it("set and compare_and_set", function()
        local a, b = c1:counter("/n"), c2:counter("/n")
        assert.is_true(a:set(10))                 -- creates the node with 10
        assert.equal(10, b:get())
        assert.is_true(a:compare_and_set(10, 20))
        assert.is_false(a:compare_and_set(10, 30))
        assert.equal(20, b:get())
        assert.is_true(b:set(50))
        -- a's cached value (20) is stale: it decides on a fresh read
        assert.is_true(a:compare_and_set(50, 60))
        assert.is_false(a:compare_and_set(20, 1))
        assert.is_true(b:set(-5))
        assert.is_false(a:compare_and_set(60, 1))
        assert.equal(-5, a:get())
        assert.is_true(a:compare_and_set(-5, -5))
        assert.equal(-4, b:add(1))
    end)

    it("raises on bad arguments", function()
        local n = c1:counter("/n")
        assert.has_error(function() n:add(1.5) end)
        assert.has_error(function() n:add("1") end)
        assert.has_error(function() n:add(2 ^ 53) end)
        assert.has_error(function() n:add(-2 ^ 53) end)
        assert.has_error(function() n:add(0 / 0) end)
        assert.has_error(function() n:add(math.huge) end)
        assert.has_error(function() n:set(nil) end)
        assert.has_error(function() n:set(0.1) end)
        assert.has_error(function() n:compare_and_set(1, "2") end)
        assert.has_error(function() n:compare_and_set(nil, 2) end)
        assert.has_error(function() c1:counter("n") end)
        assert.has_error(function() c1:counter("/n", { initial = 0.5 }) end)
        assert.has_error(function() c1:counter("/n", { initial = "1" }) end)
        assert.has_error(function() c1:counter("/n", { bogus = true }) end)
        assert.has_error(function() c1:counter("/n", { max_tries = 0 }) end)
        assert.error_matches(function() n:add(1.5) end, "bad argument #1 to 'add'", 1, true)
        -- nothing was written by the failed calls
        assert.is_false(c1:exists("/n"))
    end)

    it("returns invalid for foreign data and for an overflow", function()
        c1:create("/junk", "twelve")
        local j = c1:counter("/junk")
        local v, err = j:get()
        assert.is_nil(v)
        assert.equal("invalid", err)
        local v2, err2 = j:add(1)
        assert.is_nil(v2)
        assert.equal("invalid", err2)
        c1:create("/empty")
        assert.equal(5, c1:counter("/empty", { initial = 5 }):get())
        local big = c1:counter("/big", { initial = 2 ^ 53 - 1 })
        local bv, berr = big:add(1)
        assert.is_nil(bv)
        assert.equal("invalid", berr)
        assert.equal(2 ^ 53 - 1, big:get())
    end)

    it("gives up with timeout after max_tries lost races", function()
        local a = c1:counter("/n", { max_tries = 1 })
        local b = c2:counter("/n")
        assert.equal(1, a:add(1))
        assert.equal(2, b:add(1))
        local v, err = a:add(1)      -- stale version, badversion, no tries left
        assert.is_nil(v)
        assert.equal("timeout", err)
        assert.same({ adds = 1, cas_attempts = 2, cas_failures = 1 }, a:stats())
        assert.equal(3, a:add(1))      -- read fresh after the failure: fine again
    end)

    it("an add from a callback while the same counter writes does not wait for it", function()
        local ctr = c1:counter("/n", { max_tries = 2 })   -- bounds the wait if it queued
        assert.equal(1, ctr:add(1))
        assert(c1:create("/w", "0"))
        local inner
        -- The watch fires inside the outer add's wait, while its write is in
        -- flight: queueing behind that write would wait for ever.
        assert(c1:get("/w", function() inner = { ctr:add(10) } end))
        local outer = c1:send("set", "/w", "1")
        local t0 = require("zkcoord").now()
        local v = assert(ctr:add(1))
        assert(outer:wait(5))
        assert.truthy(zk.wait_until(function() return inner ~= nil end, 5, c1))
        assert.is_true(require("zkcoord").now() - t0 < 5)
        assert.is_number(inner[1], tostring(inner[2]))
        -- Both applied, each with its own step.
        assert.equal(12, ctr:get())
        assert.is_true((v == 2 and inner[1] == 12) or (v == 12 and inner[1] == 11),
                       ("outer %s, inner %s"):format(tostring(v), tostring(inner[1])))
    end)

    it("5 processes x 40 add(1): 200 distinct values, final 200", function()
        local dir = zk.tmpdir()
        local tag = proc.getpid() .. "-" .. os.time()
        local go = ("%s/go-%s"):format(dir, tag)
        local outs, pids = {}, {}
        assert.equal(0, c1:counter("/n"):get())
        for i = 1, 5 do
            outs[i] = ("%s/adder-%s-%d"):format(dir, tag, i)
            pids[i] = assert(zk.spawn_lua(ADDER, { root, "/n", 40, outs[i], go },
                                          outs[i] .. ".log"))
        end
        assert.truthy(zk.wait_until(function()
            for i = 1, 5 do
                if not (proc.read_file(outs[i]) or ""):find("ready") then return false end
            end
            return true
        end, 15), "adders did not get ready")
        assert(proc.write_file(go, "go"))
        for i = 1, 5 do
            if not proc.wait_exit(pids[i], 30) then
                proc.kill(pids[i], "KILL")
                error("adder " .. i .. " did not finish")
            end
        end
        local seen, n = {}, 0
        local adds, attempts, failures = 0, 0, 0
        for i = 1, 5 do
            local text = proc.read_file(outs[i]) or ""
            assert.is_nil(text:find("error"), text .. (proc.read_file(outs[i] .. ".log") or ""))
            for v in text:gmatch("\n(%d+)") do
                v = tonumber(v)
                assert.is_nil(seen[v], "value " .. v .. " returned twice")
                seen[v] = true
                n = n + 1
            end
            local a, t, f = text:match("stats (%d+) (%d+) (%d+)")
            assert.truthy(a, text)
            adds, attempts, failures = adds + a, attempts + t, failures + f
        end
        assert.equal(200, n)
        for v = 1, 200 do
            assert.truthy(seen[v], "value " .. v .. " missing")
        end
        assert.equal(200, c2:counter("/n"):get())
        assert.equal(200, adds)
        -- every attempt either won or lost a race: nothing else happened
        assert.equal(200 + failures, attempts)
        assert.is_true(failures > 0, "no contention at all?")
    end)
end)
