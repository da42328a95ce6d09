-- Smoke test of an installed zkcoord on whichever VM runs it (Lua 5.1 to
-- 5.4, LuaJIT), plain Lua without busted or FFI, against a running server:
--
--   ZKCOORD_SMOKE_SERVERS=127.0.0.1:2181 lua5.4 spec/smoke/rock.lua [version]
--
-- connect, create/get, lock, counter, watch, election callbacks, and the
-- portability rules: integers stay integers, loading changes no global state,
-- a bad argument raises, a runtime failure returns nil, err. With a version
-- argument the loaded zkcoord must be that version. Prints
-- "smoke <VM>: N passed, N failed" and exits 1 if any failed.
local servers = os.getenv("ZKCOORD_SMOKE_SERVERS")
if not servers or servers == "" then
    io.stderr:write("smoke: set ZKCOORD_SMOKE_SERVERS (host:port)\n")
    os.exit(2)
end
local want_version = arg and arg[1]
local vm = (type(jit) == "table" and jit.version) or _VERSION   -- luacheck: ignore 113

local passed, failed = 0, 0
local function check(name, fn)
    local ok, err = pcall(fn)
    if ok then
        passed = passed + 1
        print("ok     " .. name)
    else
        failed = failed + 1
        print("FAILED " .. name .. ": " .. tostring(err))
    end
end

local function expect(cond, msg, ...)
    if not cond then
        error(msg .. (select("#", ...) > 0 and (": " .. table.concat({ tostring((...)),
              tostring(select(2, ...)) }, ", ")) or ""), 2)
    end
    return cond
end

-- On 5.3+ a count must be an integer, not a float (224, not 224.0).
local function expect_integer(v, what)
    expect(type(v) == "number" and v % 1 == 0, what .. " is not a whole number", v)
    if math.type then   -- luacheck: ignore 143
        expect(math.type(v) == "integer", what .. " is a float", v)   -- luacheck: ignore 143
    end
end

-- Every module under lua/zkcoord but the nginx ones (zkcoord.ngx,
-- zkcoord.wait.ngx need an nginx worker), the command line's too: they
-- load on every VM (process control is in the core, not LuaJIT's FFI).
local MODULES = { "zkcoord", "zkcoord.version", "zkcoord.errors", "zkcoord.compat",
    "zkcoord.util", "zkcoord.util.args", "zkcoord.util.callbacks", "zkcoord.util.deadline",
    "zkcoord.util.deprecated", "zkcoord.util.held", "zkcoord.util.ids", "zkcoord.util.reads",
    "zkcoord.util.retry",
    "zkcoord.client", "zkcoord.client.acl", "zkcoord.client.checks", "zkcoord.client.class",
    "zkcoord.client.connect", "zkcoord.client.future", "zkcoord.client.lifecycle",
    "zkcoord.client.nodes", "zkcoord.client.ops", "zkcoord.client.options",
    "zkcoord.client.paths", "zkcoord.client.pump", "zkcoord.client.requests",
    "zkcoord.client.session", "zkcoord.client.contract", "zkcoord.contract",
    "zkcoord.wait.blocking",
    "zkcoord.line", "zkcoord.line.driver", "zkcoord.line.node", "zkcoord.line.rules",
    "zkcoord.queue", "zkcoord.lock", "zkcoord.cohort", "zkcoord.rwlock", "zkcoord.semaphore",
    "zkcoord.election",
    "zkcoord.multi_lock",
    "zkcoord.counter", "zkcoord.counter.format", "zkcoord.counter.line", "zkcoord.counter.write",
    "zkcoord.cache", "zkcoord.cache.delivery", "zkcoord.cache.events", "zkcoord.cache.loader",
    "zkcoord.cache.tree",
    "zkcoord.watch", "zkcoord.barrier", "zkcoord.double_barrier", "zkcoord.work_queue",
    "zkcoord.owned_node", "zkcoord.persistent_node", "zkcoord.group", "zkcoord.partitioner",
    "zkcoord.service_discovery", "zkcoord.discovery.json", "zkcoord.discovery.curator",
    "zkcoord.discovery.dubbo", "zkcoord.discovery.provider", "zkcoord.discovery.view",
    "zkcoord.lease", "zkcoord.lease.format", "zkcoord.multi_lease",
    "zkcoord.cli.args", "zkcoord.cli.exit", "zkcoord.cli.help", "zkcoord.cli.session",
    "zkcoord.cli.show", "zkcoord.cli", "zkcoord.cli.held", "zkcoord.cli.locks",
    "zkcoord.cli.once", "zkcoord.cli.supervise", "zkcoord.cli.sys", "zkcoord.cli.verbs",
    "zkcoord.testing", "zkcoord.testing.files", "zkcoord.testing.proc",
    "zkcoord.testing.server", "zkcoord.testing.jvm", "zkcoord.testing.ensemble",
    "zkcoord.testing.proxy" }

local zkcoord
check("loading every module changes no global and not math.random's sequence", function()
    local before = {}
    for k in pairs(_G) do before[k] = true end
    math.randomseed(42)
    local a1, a2 = math.random(), math.random()
    math.randomseed(42)
    for _, m in ipairs(MODULES) do
        require(m)
    end
    local b1, b2 = math.random(), math.random()
    expect(a1 == b1 and a2 == b2, "math.random's sequence changed")
    for k in pairs(_G) do
        expect(before[k], "new global " .. tostring(k))
    end
end)
local loaded
loaded, zkcoord = pcall(require, "zkcoord")
if not loaded then
    print("FAILED require 'zkcoord': " .. tostring(zkcoord))
    print(("smoke %s: %d passed, %d failed"):format(vm, passed, failed))
    os.exit(1)
end

check("one version everywhere", function()
    local v = require "zkcoord.version"
    expect(zkcoord._VERSION == v and require("zkcoord.core")._VERSION == v,
           "zkcoord and core.so differ", zkcoord._VERSION, require("zkcoord.core")._VERSION)
    for _, m in ipairs(MODULES) do
        local t = require(m)
        if type(t) == "table" and t._VERSION ~= nil then
            expect(t._VERSION == v, m .. "._VERSION", t._VERSION)
        end
    end
    if want_version then
        expect(v == want_version, "installed version", v, want_version)
    end
    local tree = os.getenv("ZKCOORD_SMOKE_TREE")
    if tree then
        for _, fn in ipairs({ require("zkcoord.client").connect, require("zkcoord.core").uuid }) do
            local src = debug.getinfo(fn, "S").source
            expect(src == "=[C]" or src:sub(1, #tree + 1) == "@" .. tree, "not loaded from " .. tree, src)
        end
        expect(package.cpath:find(tree, 1, true), "package.cpath lacks the tree", package.cpath)
    end
end)

check("uuids from the kernel: version 4, all different", function()
    local uuid, seen = require("zkcoord.queue").uuid, {}
    for _ = 1, 1000 do
        local u = uuid()
        expect(u:match("^%x%x%x%x%x%x%x%x%-%x%x%x%x%-4%x%x%x%-[89ab]%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x$"),
               "not a v4 uuid", u)
        expect(not seen[u], "uuid repeated", u)
        seen[u] = true
    end
end)

local client, err, detail = zkcoord.connect { servers = servers, session_timeout = 10 }
check("connect", function()
    expect(client, "connect failed", err, detail)
    expect(client:state() == "connected", "state", client:state())
end)
if not client then
    print(("smoke %s: %d passed, %d failed"):format(vm, passed, failed))
    os.exit(1)
end
local client2 = assert(zkcoord.connect { servers = servers, session_timeout = 10 })

local base = "/zkcoord-smoke/" .. require("zkcoord.queue").uuid()
local node = base .. "/node"

check("create and get (binary data, integer stat)", function()
    local p, cerr = client:create(node, "v\0x", { parents = true })
    expect(p == node, "create", p, cerr)
    local data, stat = client:get(node)
    expect(data == "v\0x", "get", data, stat)
    for _, f in ipairs({ "czxid", "mzxid", "pzxid", "version", "cversion", "aversion",
                         "data_length", "num_children" }) do
        expect_integer(stat[f], "stat." .. f)
    end
    expect(stat.version == 0 and stat.data_length == 3, "stat values", stat.version, stat.data_length)
    local st = client:set(node, "w", 0)
    expect(st and st.version == 1, "set", st)
    expect_integer(st.version, "set's stat.version")
end)

check("a runtime failure returns nil, err", function()
    local v, e = client:get(base .. "/missing")
    expect(v == nil and e == "nonode", "get missing", v, e)
    v, e = client:create(node, "x")
    expect(v == nil and e == "nodeexists", "create twice", v, e)
    v, e = client:delete(node, 42)
    expect(v == nil and e == "badversion", "delete with a wrong version", v, e)
end)

check("a bad argument raises", function()
    expect(not pcall(client.get, client, "no-slash"), "relative path accepted")
    expect(not pcall(client.create, client, 42), "number path accepted")
    expect(not pcall(client.lock, client, node, 42), "number opts accepted")
    expect(not pcall(client.get, nil, node), "nil self accepted")
end)

check("lock: exclusive, fencing token, release", function()
    local l1 = client:lock(base .. "/lock")
    local l2 = client2:lock(base .. "/lock")
    local ok, e = l1:acquire(5)
    expect(ok == true and l1:held(), "acquire", ok, e)
    local t1 = l1:token()
    expect_integer(t1, "token")
    ok, e = l2:acquire(0)
    expect(ok == nil and e == "timeout", "second holder", ok, e)
    expect(l1:release(), "release")
    ok, e = l2:acquire(5)
    expect(ok == true, "acquire after release", ok, e)
    expect(l2:token() > t1, "token grows", l2:token(), t1)
    l2:release()
end)

check("counter: add, get, compare_and_set", function()
    local c = client:counter(base .. "/counter")
    local v, e = c:add(5)
    expect(v == 5, "add", v, e)
    expect_integer(v, "add's value")
    v = client2:counter(base .. "/counter"):add(-2)
    expect(v == 3, "add from another client", v)
    v = c:get()
    expect(v == 3, "get", v)
    expect_integer(v, "get's value")
    expect(c:compare_and_set(3, 10) == true and c:get() == 10, "compare_and_set")
end)

check("watch: callbacks get their arguments, latest value delivered", function()
    local seen = {}
    local w = client:watch(node, function(data, stat)
        seen[#seen + 1] = { data = data, version = stat and stat.version }
    end, { kind = "data" })
    local deadline = os.time() + 10
    while #seen == 0 and os.time() < deadline do client:dispatch(0.1) end
    expect(seen[1] and seen[1].data == "w", "first delivery", seen[1] and seen[1].data)
    assert(client2:set(node, "changed"))
    while seen[#seen].data ~= "changed" and os.time() < deadline do client:dispatch(0.1) end
    expect(seen[#seen].data == "changed", "change delivered", seen[#seen].data)
    expect_integer(seen[#seen].version, "watched stat.version")
    w:cancel()
end)

check("election: on_elected and on_lost(reason)", function()
    local e = client:election(base .. "/election", { id = "smoke" })
    local elected, reason = false, nil
    e:on_elected(function() elected = true end)
    e:on_lost(function(r) reason = r end)
    local ok, cerr = e:campaign(5)
    expect(ok == true and elected and e:is_leader(), "campaign", ok, cerr)
    e:resign()
    local deadline = os.time() + 5
    while reason == nil and os.time() < deadline do client:dispatch(0.05) end
    expect(reason == "resigned", "on_lost's argument", reason)
end)

check("rwlock, semaphore, barrier, double barrier", function()
    local rw = client:rwlock(base .. "/rw")
    local rw2 = client2:rwlock(base .. "/rw")
    local r1, r2 = rw:read_lock(), rw2:read_lock()
    expect(r1:acquire(5) == true, "read lock")
    expect(r2:acquire(5) == true, "second reader")
    r2:release()
    local ok, e = rw2:write_lock():acquire(0)
    expect(ok == nil and e == "timeout", "writer behind a reader", ok, e)
    r1:release()
    expect(rw2:write_lock():acquire(5) == true, "writer after the reader")
    local sem = client:semaphore(base .. "/sem", 2)
    local a = sem:acquire(5)
    local b = client2:semaphore(base .. "/sem", 2):acquire(5)
    expect(a and b and a:held(), "two leases")
    ok, e = sem:acquire(0)
    expect(ok == nil and e == "timeout", "third lease", ok, e)
    a:release()
    b:release()
    local bar = client:barrier(base .. "/bar")
    expect(bar:create(), "barrier create")
    expect(bar:is_set() == true, "barrier set")
    ok, e = bar:wait(0)
    expect(ok == nil and e == "timeout", "wait on a set barrier", ok, e)
    expect(bar:remove() and bar:wait(1) == true, "barrier removed")
    local db = client:double_barrier(base .. "/db", 1)
    expect(db:enter(5) == true and db:leave(5) == true, "double barrier")
end)

check("lease: the record's bytes, refused, renewed (kazoo's NonBlockingLease)", function()
    local t = 10
    local function lease(id)
        return client:lease(base .. "/lease", 3, { identifier = id, clock = function() return t end })
    end
    expect(lease("h\195\180st \240\159\152\128"):obtain() == true, "obtain")
    local data = client:get(base .. "/lease/lease_holder")
    expect(data == '{"version": 1, "holder": "h\\u00f4st \\ud83d\\ude00", "end": '
                   .. '"1970-01-01T00:00:13"}', "json.dumps's bytes", data)
    local ok, rec = lease("other"):obtain()
    expect(ok == false and rec.ends == 13, "refused", ok, rec)
    t = 12
    expect(lease("h\195\180st \240\159\152\128"):obtain() == true, "renewed")
end)

check("coroutines: spawn and run share one client", function()
    local c = client:counter(base .. "/spawned")
    local results = {}
    for i = 1, 4 do
        client:spawn(function(delta)
            local l = client:lock(base .. "/spawned-lock")
            assert(l:acquire(5))
            results[#results + 1] = assert(c:add(delta))
            l:release()
        end, i)
    end
    expect(client:run(20) == true, "run did not finish")
    expect(#results == 4, "coroutines finished", #results)
    expect(c:get() == 10, "sum of adds", c:get())
end)

check("coroutines: a wait inside pcall ends run() only when every coroutine is done", function()
    -- Lua 5.1 cannot yield across pcall (the wait raises there); the other
    -- coroutine must still run to its end.
    local holder = client2:lock(base .. "/held")
    assert(holder:acquire(5))
    local outcome, got
    client:spawn(function()
        outcome = { pcall(function() return client:lock(base .. "/held"):acquire(0.3) end) }
    end)
    client:spawn(function() got = client:get(node) end)
    expect(client:run(20) == true, "run did not finish")
    expect(got == "changed", "the other coroutine did not finish", got)
    if outcome[1] then
        expect(outcome[2] == nil and outcome[3] == "timeout", "acquire", outcome[2], outcome[3])
    else
        local puc51 = _VERSION == "Lua 5.1" and not jit   -- luacheck: ignore 113
        expect(puc51, "a wait in pcall raised", outcome[2])
    end
    holder:release()
end)

check("zkcoord.testing: a throwaway server, a restart, an expired session, a cut", function()
    local testing = require "zkcoord.testing"
    local s, serr = testing.server()
    expect(s, "testing.server()", serr)
    local ok, e2 = pcall(function()
        local c = assert(zkcoord.connect { servers = s.hosts, session_timeout = 4 })
        expect(c:create("/t", "v") == "/t", "create on the test server")
        local sid = c:session_id()
        expect(s:restart(), "restart")
        expect(c:get("/t") == "v", "the data survives a restart")
        expect(testing.expire_session(c, s.hosts, 20), "expire_session")
        expect(c:session_id() ~= sid, "a new session after the expiry")
        c:close()
        -- through the proxy (a luajit process, whatever this VM is)
        local p = assert(testing.proxy(s))
        local c2 = assert(zkcoord.connect { servers = p.hosts, session_timeout = 4 })
        local sid2 = c2:session_id()
        expect(p:cut(), "cut")
        expect(c2:get("/t") == "v", "a read after the cut")
        expect(c2:session_id() == sid2, "the same session after the cut")
        c2:close()
        p:stop()
    end)
    local pid, dir = s.pid, s.dir
    s:destroy()
    expect(ok, "on the test server", e2)
    expect(not require("zkcoord.testing.proc").alive(pid), "the server's process is gone")
    local f = io.open(dir .. "/zoo.cfg")
    if f then f:close() end
    expect(f == nil, "its dir is gone")
end)

check("service_discovery: Curator's JSON (lua-cjson), integers stay integers", function()
    local sd = client:service_discovery(base .. "/sd")
    local reg = sd:register{ name = "api", id = "i1", address = "h", port = 8080,
                             payload = { n = 3, f = 0.5 } }
    expect(reg:wait(5), "register")
    local data = client:get(base .. "/sd/api/i1")
    expect(data:find('"port":8080,"sslPort":null,"payload":{"@class":"java.util.LinkedHashMap",'
                     .. '"f":0.5,"n":3},"registrationTimeUTC":', 1, true), "JSON", data)
    local inst = sd:instances("api")[1]
    expect_integer(inst.port, "port")
    expect_integer(inst.registrationTimeUTC, "registrationTimeUTC")
    expect(inst.registrationTimeUTC > 1.5e12, "registrationTimeUTC in ms", inst.registrationTimeUTC)
    expect_integer(inst.payload.n, "payload.n")
    sd:close()
end)

check("cleanup and close", function()
    local function rm(path)
        local names = client:children(path)
        for _, n in ipairs(names or {}) do rm(path .. "/" .. n) end
        client:delete(path)
    end
    rm(base)
    expect(client:exists(base) == false, "left nodes behind")
    client2:close()
    client:close()
    expect(client:state() == "closed", "state after close", client:state())
    local v, e = client:get(node)
    expect(v == nil and e == "closed", "get after close", v, e)
end)

print(("smoke %s: %d passed, %d failed"):format(vm, passed, failed))
os.exit(failed == 0 and 0 or 1)
