-- What the per-cycle savings of the lock path must keep: core.uuid's
-- format and uniqueness (in this process and across a fork), check_path's
-- verdicts on paths it has seen before, and the fields of a stat table.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local core = require "zkcoord.core"
local zkcoord = require "zkcoord"

local UUID = "^%x%x%x%x%x%x%x%x%-%x%x%x%x%-4%x%x%x%-[89ab]%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x$"

local function assert_uuid(u)
    assert.is_string(u)
    assert.equal(36, #u)
    assert.is_truthy(u:match(UUID), u)
    assert.equal(u:lower(), u)
end

-- What a luajit process prints running `code` (the uuids, one a line),
-- its command prefixed by `prefix`.
local function run_lua(code, prefix)
    local file = zk.tmpdir() .. "/fork_uuids.lua"
    assert(proc.write_file(file, code))
    local env = zk.lua_env()
    local p = assert(io.popen(("LUA_PATH=%s LUA_CPATH=%s %sluajit %s %s 2>&1"):format(
        proc.shquote(env.LUA_PATH), proc.shquote(env.LUA_CPATH), prefix or "", proc.shquote(file),
        proc.shquote(zk.tmpdir() .. "/child_uuids"))))
    local out = p:read("*a")
    p:close()
    return out
end

describe("core.uuid", function()
    it("is a version-4 uuid, 36 lowercase hex characters and dashes, never repeated", function()
        local seen = {}
        -- many batches of the per-thread pool, and a partial one
        for _ = 1, 32 * 300 + 7 do
            local u = core.uuid()
            assert_uuid(u)
            assert.is_nil(seen[u], "repeated: " .. u)
            seen[u] = true
        end
    end)

    it("uses all 122 random bits: every hex digit appears in every free position", function()
        local digits = {}
        for _ = 1, 4000 do
            local u = core.uuid()
            for i = 1, 36 do
                digits[i] = digits[i] or {}
                digits[i][u:sub(i, i)] = true
            end
        end
        for i = 1, 36 do
            local n = 0
            for _ in pairs(digits[i]) do n = n + 1 end
            if i == 9 or i == 14 or i == 19 or i == 24 then
                assert.same({ ["-"] = true }, digits[i])
            elseif i == 15 then
                assert.same({ ["4"] = true }, digits[i])
            elseif i == 20 then
                assert.equal(4, n)    -- the variant: 8, 9, a, b
            else
                assert.equal(16, n, "position " .. i)
            end
        end
    end)

    it("differs between a parent and its forked child (no bytes buffered before the fork reused)",
       function()
        local out = run_lua([[
            local ffi = require "ffi"
            ffi.cdef [=[ int fork(void); int waitpid(int, int *, int); void _exit(int); ]=]
            local core = require "zkcoord.core"
            local before = core.uuid()      -- the pool now holds bytes for 31 more
            io.stdout:flush()
            local pid = ffi.C.fork()
            if pid == 0 then
                local f = io.open(arg[1], "w")
                for _ = 1, 40 do f:write(core.uuid(), "\n") end
                f:close()
                ffi.C._exit(0)
            end
            assert(pid > 0, "fork failed")
            local status = ffi.new("int[1]")
            assert(ffi.C.waitpid(pid, status, 0) == pid)
            print(before)
            for _ = 1, 40 do print(core.uuid()) end
        ]])
        local parent = {}
        for u in out:gmatch("[^\n]+") do parent[#parent + 1] = u end
        local child = {}
        for u in (proc.read_file(zk.tmpdir() .. "/child_uuids") or ""):gmatch("[^\n]+") do
            child[#child + 1] = u
        end
        assert.equal(41, #parent, out)
        assert.equal(40, #child)
        local seen = {}
        for _, list in ipairs({ parent, child }) do
            for _, u in ipairs(list) do
                assert_uuid(u)
                assert.is_nil(seen[u], "parent and child share " .. u)
                seen[u] = true
            end
        end
    end)
end)

describe("check_path with paths it has seen", function()
    local check_path = zkcoord.check_path

    -- The message check_path raises for `path`, or nil when it accepts it.
    local function verdict(path, sequential)
        local ok, err = pcall(check_path, path, "create", 1, sequential)
        if ok then
            assert.equal(path, err)
            return nil
        end
        return tostring(err)
    end

    local BAD = {
        { "rel" }, { "/a/" }, { "/a//b" }, { "/a/./b" }, { "/a/../b" }, { "/a/.." },
        { "/a\0b" }, { "/a\nb" }, { "/", true }, { "//", true }, { 5 }, { nil },
        { "/." }, { "/.." }, { "/a/." }, { "/a/./", true }, { "/a/../", true }, { "/a\127" },
        { "\31/a" }, { "/a\0" },
    }
    local GOOD = {
        { "/" }, { "/a." }, { "/.a" }, { "/a/..b" }, { "/a/b." }, { "/..a/", true }, { "/a/.b/", true },
        { "/a\128\255" }, { "/a b" },
    }

    it("rejects a bad path every time, with the same message, however often good ones pass", function()
        local first = {}
        for i, b in ipairs(BAD) do
            first[i] = verdict(b[1], b[2])
            assert.is_string(first[i], "accepted " .. tostring(b[1]))
        end
        for round = 1, 3 do
            -- more distinct good paths than any memo keeps, and the same ones again
            for j = 1, 2000 do
                assert.is_nil(verdict("/good/" .. (j % 700) .. "/r" .. round))
                assert.is_nil(verdict("/good/" .. j .. "/", true))
            end
            for i, b in ipairs(BAD) do
                assert.equal(first[i], verdict(b[1], b[2]))
            end
            for _, g in ipairs(GOOD) do
                assert.is_nil(verdict(g[1], g[2]), g[1])
            end
        end
        assert.matches("path must start with '/': rel", first[1], 1, true)
        assert.matches("path must not end with '/': /a/", first[2], 1, true)
        assert.matches("a sequential node needs a name prefix, not '/'", first[9], 1, true)
    end)

    it("keeps the rules of the sequential flag apart for one path", function()
        for _ = 1, 3 do
            -- "/a/" is a sequential prefix, not a node; "/" is a node, not a prefix
            assert.is_nil(verdict("/a/", true))
            assert.matches("must not end with '/'", verdict("/a/"), 1, true)
            assert.matches("must not end with '/'", verdict("/a/", false), 1, true)
            assert.is_nil(verdict("/"))
            assert.matches("needs a name prefix", verdict("/", true), 1, true)
            assert.matches("needs a name prefix", verdict("/", 1), 1, true)
            assert.is_nil(verdict("/b", true))
            assert.is_nil(verdict("/b"))
        end
    end)

    it("keeps memory bounded over many distinct paths", function()
        collectgarbage()
        collectgarbage()
        local base = collectgarbage("count")
        for i = 1, 200000 do
            check_path("/bounded/_c_" .. i .. "-lock-", "create", 1, i % 2 == 0)
        end
        collectgarbage()
        collectgarbage()
        -- 200,000 remembered paths would hold about 15 MB
        -- measured at load 2: no growth (-40 KiB)
        assert.is_true(collectgarbage("count") - base < 2048,
                       ("grew by %.0f KiB"):format(collectgarbage("count") - base))
    end)
end)

describe("stat tables #zk", function()
    -- one client and one root for both tests: their nodes have other names
    local root, c
    setup(function()
        root = zk.new_root("core")
        c = zk.client { chroot = root }
    end)
    teardown(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    local FIELDS = { "czxid", "mzxid", "pzxid", "ctime", "mtime", "version", "cversion",
                     "aversion", "data_length", "num_children" }

    local function keys_of(st)
        local list = {}
        for k, v in pairs(st) do
            list[#list + 1] = k
            if k == "ephemeral_owner" then
                assert.is_string(v)
            else
                assert.is_number(v, k)
            end
        end
        table.sort(list)
        return list
    end

    local function sorted(list, extra)
        local t = { extra }   -- { nil } is empty
        for _, k in ipairs(list) do t[#t + 1] = k end
        table.sort(t)
        return t
    end

    it("has the same fields and values whichever reply carries it", function()
        local t0 = os.time()
        local _, created = assert(c:create("/e", "abc", { ephemeral = true }))
        local _, got = assert(c:get("/e"))
        local exists = assert(c:exists("/e"))
        for _, st in ipairs({ created, got, exists }) do
            assert.same(sorted(FIELDS, "ephemeral_owner"), keys_of(st))
            assert.equal(c:session_id(), st.ephemeral_owner)
            assert.is_truthy(st.ephemeral_owner:match("^" .. ("%x"):rep(16) .. "$"))
            assert.equal(3, st.data_length)
            assert.equal(0, st.version)
            assert.equal(0, st.cversion)
            assert.equal(0, st.aversion)
            assert.equal(0, st.num_children)
            assert.equal(st.czxid, st.mzxid)
            assert.equal(st.czxid, st.pzxid)
            assert.equal(st.ctime, st.mtime)
            assert.is_true(math.abs(st.ctime - t0) < 60, "ctime in seconds")
        end
        assert.same(created, got)
        assert.same(created, exists)
    end)

    it("has no ephemeral_owner for a persistent node; multi and children give the same fields",
       function()
        local _, created = assert(c:create("/p", "xy"))
        assert.same(sorted(FIELDS), keys_of(created))
        assert(c:create("/p/a"))
        local res = assert(c:multi { { op = "set", path = "/p", data = "xyz", version = 0 } })
        local st = res[1].stat
        assert.same(sorted(FIELDS), keys_of(st))
        assert.equal(1, st.version)
        assert.equal(3, st.data_length)
        assert.equal(1, st.num_children)
        assert.equal(1, st.cversion)
        assert.is_true(st.mzxid > st.czxid)
        assert.is_true(st.pzxid > st.czxid)
        local names, cst = c:children("/p")
        assert.same({ "a" }, names)
        assert.same(st, cst)
    end)
end)

describe("the C session #zk", function()
    local C = core.c
    -- A new queue and a session on it, connected (its session records drained).
    local function open_connected(serial)
        local q = assert(core.completions())
        local s = assert(core.open(q, zk.hosts(), 10, serial))
        local rec = {}
        local deadline = core.now() + 10
        while true do
            assert(core.now() < deadline, "not connected")
            q:wait(0.2)
            local up = false
            while q:next(rec) do
                if rec.kind == C.SESSION and rec.state == C.CONNECTED_STATE then up = true end
            end
            if up then return q, s end
        end
    end

    -- The reply codes that reached q, by request id.
    local function replies(q)
        local got, rec = {}, {}
        while q:next(rec) do
            if rec.kind == C.REPLY then got[rec.id] = rec.rc end
        end
        return got
    end

    it("answers every request in flight when closed or collected, ZCLOSING for the unanswered",
       function()
        local short, lost = 0, 0
        for round = 1, 40 do
            local q, s = open_connected(round)
            local ids = {}
            for i = 1, 10 do ids[i] = assert(s:get("/zookeeper")) end
            ids[11] = assert(s:multi { { type = C.OP_CHECK, path = "/zookeeper", version = -1 } })
            if round % 2 == 0 then
                s:close()
            else
                s = nil   -- luacheck: ignore 311
                collectgarbage()
                collectgarbage()
            end
            local got = replies(q)
            local missing = 0
            for _, id in ipairs(ids) do
                if got[id] == nil then missing = missing + 1 end
            end
            if missing > 0 then short = short + 1 end
            lost = lost + missing
        end
        assert.equal(0, lost, ("sessions with missing replies after close: %d of 40; "
                               .. "replies never delivered: %d"):format(short, lost))
    end)

    it("rejects a version or a mode an int cannot hold, instead of truncating it", function()
        local q, s = open_connected(1)
        local name = "/core_version_" .. core.uuid()
        local function rc_of(id)
            local rec = {}
            local deadline = core.now() + 10
            while core.now() < deadline do
                q:wait(0.2)
                while q:next(rec) do
                    if rec.kind == C.REPLY and rec.id == id then return rec.rc end
                end
            end
            error("no reply")
        end
        assert.equal(0, rc_of(assert(s:create(name, "x", nil, C.PERSISTENT))))
        for _, v in ipairs({ 4294967296, 2147483648, -2, 0.5, 0 / 0, math.huge }) do
            local ok, err = pcall(s.set, s, name, "y", v)
            assert.is_false(ok, "set version " .. v)
            assert.matches("bad argument #4 to '[^']*' %(version must be an integer", err)
            ok, err = pcall(s.delete, s, name, v)
            assert.is_false(ok, "delete version " .. v)
            assert.matches("bad argument #3 to '[^']*'", err)
            ok, err = pcall(s.set_acl, s, name, { { perms = 31, scheme = "world", id = "anyone" } }, v)
            assert.is_false(ok, "set_acl version " .. v)
            assert.matches("bad argument #4 to '[^']*'", err)
            ok, err = pcall(s.multi, s, { { type = C.OP_SET, path = name, data = "y", version = v } })
            assert.is_false(ok, "multi version " .. v)
            assert.matches("bad argument #2 to '[^']*' %(op 1: version must be", err)
        end
        for _, m in ipairs({ 4294967296, 7, -1, 1.5 }) do
            local ok, err = pcall(s.create, s, name .. "m", nil, nil, m)
            assert.is_false(ok, "create mode " .. m)
            assert.matches("bad argument #5 to '[^']*' %(mode must be", err)
            ok, err = pcall(s.multi, s, { { type = C.OP_CREATE, path = name .. "m", mode = m } })
            assert.is_false(ok, "multi mode " .. m)
            assert.matches("op 1: mode must be", err)
        end
        -- the node is still at version 0, and the limits still work
        assert.equal(-103, rc_of(assert(s:set(name, "y", 1))))     -- ZBADVERSION
        assert.equal(0, rc_of(assert(s:set(name, "y", 0))))
        assert.equal(0, rc_of(assert(s:delete(name, -1))))
        s:close()
    end)

    it("rejects a malformed ACL entry in a multi naming the op, and sends nothing", function()
        local q, s = open_connected(1)
        local ok, err = pcall(s.multi, s, {
            { type = C.OP_CREATE, path = "/a", acl = { { perms = 31, scheme = "world", id = "anyone" } } },
            { type = C.OP_CREATE, path = "/b", acl = { { perms = "x", scheme = "world", id = "anyone" } } } })
        assert.is_false(ok)
        assert.matches("bad argument #2 to '[^']*' %(op 2: ACL entry needs numeric perms", err)
        s:close()
        assert.same({}, replies(q))
    end)

    it("raises on a NaN timeout instead of waiting forever (q:wait, process.poll)", function()
        -- in a child with a time limit: the old code never returned
        local out = run_lua([[
            local core = require "zkcoord.core"
            local q = assert(core.completions())
            print(pcall(q.wait, q, 0 / 0))
            print(pcall(core.process.poll, 0 / 0))
        ]], "timeout 10 ")
        assert.matches("false\t[^\n]*bad argument #2 to '[^']*' %(timeout must be a number, not NaN%)\n"
                       .. "false\t[^\n]*bad argument #1 to '[^']*' %(timeout must be a number, not NaN%)\n",
                       out)
    end)
end)
