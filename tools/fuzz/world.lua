-- fuzz.world: what the calls run against. The ZooKeeper server (--servers,
-- $ZK_HOSTS, or a private one), the namespace every fuzzed client is
-- chrooted to, the ticker process that changes a node every 0.2 s (its
-- watch closes a "guarded" victim client, ending unbounded waits), the
-- client records and the pool of objects the calls made, the victims, the
-- health check after each batch, and the clean-up at the end.
local zkcoord = require "zkcoord"
local queue = require "zkcoord.queue"
local proc = require "helpers.proc"
local S = require "fuzz.state"
local show = require "fuzz.show"
local V = require "fuzz.values"

local pairs, ipairs, tostring, type, pcall = pairs, ipairs, tostring, type, pcall
local format, concat = string.format, table.concat

local _M = {}

local function random_secret()
    local f = io.open("/dev/urandom", "rb")
    local b = f and f:read(6) or tostring(os.time())
    if f then f:close() end
    return (b:gsub(".", function(c) return format("%02x", c:byte()) end))
end

local function logger(level, msg)
    local logged = S.logged
    local k = logged[level] and level or "other"
    logged[k] = logged[k] + 1
    if S.opts.verbose then
        io.stderr:write("zkcoord [", tostring(level), "] ", tostring(msg), "\n")
    end
end

function _M.ensure_ns()
    local ok, err = S.admin:create(S.ns .. S.TICK_NODE, "0", { parents = true })
    return ok or err == "nodeexists", err
end

-- The ticker: another process that sets TICK_NODE every TICK seconds until
-- this one is gone.
local function start_ticker()
    local file = S.dir .. "/ticker.lua"
    assert(proc.write_file(file, [[
        local zkcoord = require "zkcoord"
        local hosts, path, seconds, ppid = ...
        local c = assert(zkcoord.connect { servers = hosts, session_timeout = 10 })
        local deadline = zkcoord.now() + tonumber(seconds)
        local i = 0
        while zkcoord.now() < deadline do
            i = i + 1
            local ok, err = c:set(path, tostring(i))
            if not ok and err == "nonode" then
                c:create(path, "0", { parents = true })
            end
            c:dispatch(]] .. S.TICK .. [[)
            local f = io.open("/proc/" .. ppid .. "/stat")
            if not f then break end
            f:close()
        end
        c:close()
    ]]))
    local limit = math.min(S.opts.seconds, 36000) + 600
    S.ticker_pid = assert(proc.spawn({ arg[-1] or "luajit", file, S.hosts, S.ns .. S.TICK_NODE,
                                       tostring(limit), tostring(proc.getpid()) },
                                     { owner = true, stdout = S.dir .. "/ticker.log",
                                       stderr = S.dir .. "/ticker.log",
                                       env = { LUA_PATH = package.path,
                                               LUA_CPATH = package.cpath },
                                       cleanup_dir = S.dir }))
end

--- The server, the admin client, the namespace and the ticker.
function _M.setup()
    local hosts
    hosts, S.server = require("helpers.tool").servers(S.opts.servers, "fuzz.lua")
    S.hosts = hosts
    S.auth = { scheme = "digest", credentials = "fuzz:" .. random_secret() }
    S.logger = logger
    S.admin = assert(zkcoord.connect { servers = hosts, session_timeout = 10, auth = S.auth,
                                       logger = logger })
    S.ns = ("/fuzz-%d-%d"):format(S.seed, proc.getpid())
    assert(_M.ensure_ns())
    S.dir = assert(proc.mktemp_dir("zkcoord-fuzz-"))
    start_ticker()
end

-- ---------------------------------------------------------------------------
-- Clients and objects.

function _M.connect_record(name, is_main, extra)
    local o = { servers = S.hosts, chroot = S.ns, session_timeout = S.SESSION_TIMEOUT,
                request_timeout = S.REQUEST_TIMEOUT, logger = logger, auth = S.auth }
    for k, v in pairs(extra or {}) do o[k] = v end
    local c, err, detail = zkcoord.connect(o)
    if not c then
        return nil, err, detail
    end
    local rec = { c = c, name = name, main = is_main, guarded = false }
    show.label(c, name)
    local clients = S.clients
    clients[#clients + 1] = rec
    if #clients > 40 then
        table.remove(clients, 1)
    end
    return rec
end

function _M.add_object(kind, obj, owner)
    if obj == nil or (type(obj) ~= "table") then
        return
    end
    show.label(obj, kind)
    local objects = S.objects
    objects[#objects + 1] = { kind = kind, obj = obj, owner = owner }
    if #objects > S.MAX_OBJECTS then
        table.remove(objects, V.rint(1, #objects - 10))
    end
end

function _M.is_closed(rec)
    return rec.c:state() == "closed"
end

-- May a call on this client wait without bound? Only when closed or guarded.
function _M.unbounded_ok(rec)
    if not rec or rec.main then
        return false
    elseif _M.is_closed(rec) then
        return "closed"
    end
    return rec.guarded and "guarded"
end

function _M.new_victim()
    local extra = {}
    if V.chance(0.3) then
        extra.auth = V.pick({ nil, { scheme = "digest", credentials = "other:pw" } })
    end
    if V.chance(0.2) then extra.reconnect = false end
    if V.chance(0.2) then extra.acl = "creator_all" end
    local rec = _M.connect_record("victim", false, extra)
    if rec then
        S.victims = S.victims + 1
        -- a few objects on it
        for _ = 1, V.rint(1, 4) do
            local name = V.pick({ "lock", "rwlock", "counter", "election", "semaphore", "barrier",
                                  "double_barrier", "queue", "watch" })
            local path = V.good_path()
            local ok, obj = pcall(function()
                if name == "semaphore" then
                    return rec.c:semaphore(path, V.rint(1, 3))
                elseif name == "double_barrier" then
                    return rec.c:double_barrier(path, V.rint(1, 3))
                elseif name == "queue" then
                    return rec.c:queue(path, { marker = "m-", rule = queue.rule_first })
                elseif name == "watch" then
                    return rec.c:watch(path, V.counting, { timeout = 2 })
                end
                return rec.c[name](rec.c, path)
            end)
            if ok and obj then
                _M.add_object(name, obj, rec)
            end
        end
    end
    return rec
end

-- Arms the guard: the victim closes on the ticker's next change.
function _M.guard(rec)
    if rec.guarded or _M.is_closed(rec) then
        return
    end
    local c = rec.c
    local st = c:exists(S.TICK_NODE, function()
        S.guard_closes = S.guard_closes + 1
        show.trace_push("guard: close " .. (show.labels[c] or "?"))
        c:close()
        show.trace_pop()
    end)
    if st then
        rec.guarded = true
    end
end

-- Keeps one object of every kind in the pool (on the main client), so that
-- every method is called in a short run too.
function _M.stock()
    local have = {}
    for _, o in ipairs(S.objects) do have[o.kind] = true end
    local c = S.main.c
    local good_path = V.good_path
    local function make(kind, fn)
        if not have[kind] then
            local ok, obj = pcall(fn)
            if ok and type(obj) == "table" then _M.add_object(kind, obj, S.main) end
        end
    end
    make("lock", function() return c:lock(good_path()) end)
    make("rwlock", function() return c:rwlock(good_path()) end)
    make("counter", function() return c:counter("/ctr/x") end)
    make("watch", function() return c:watch(good_path(), V.counting, { timeout = 2 }) end)
    make("election", function() return c:election(good_path()) end)
    make("semaphore", function() return c:semaphore("/sem/s", 3) end)
    make("barrier", function() return c:barrier(good_path()) end)
    make("double_barrier", function() return c:double_barrier(good_path(), 1) end)
    make("queue", function() return c:queue(good_path(), { marker = "m-", rule = queue.rule_first }) end)
    make("future", function() return c:send("exists", good_path()) end)
    make("lease", function() return c:semaphore("/sem/l", 1000):acquire(1) end)
end

-- ---------------------------------------------------------------------------
-- Health: after each batch, a create/get/delete round trip on the main client.

-- A connection dropped by an earlier oversize request (K9) may still be
-- coming back: a round trip that fails on connectionloss is tried again, up
-- to 3 times, once connected. Returns what each step gave.
local function roundtrip(c, p)
    local steps = {}
    local r = {}
    for try = 1, 3 do
        local cok, cerr = c:wait_connected(10)
        steps[#steps + 1] = "wait_connected " .. tostring(cok) .. " " .. tostring(cerr)
        r.created, r.e1 = c:create(p, "hc")
        if r.created or r.e1 == "nodeexists" then
            r.data, r.e2 = c:get(p)
            r.deleted, r.e3 = c:delete(p)
        end
        c:dispatch(0)
        if r.created == p and r.data == "hc" and r.deleted == true then
            break
        end
        if try < 3 then
            S.health_retries = S.health_retries + 1
            c:delete(p)
        end
    end
    r.steps = steps
    return r
end

function _M.health(record_bug)
    local ok, err = _M.ensure_ns()
    if not ok then
        record_bug("health", "namespace", "admin create " .. S.ns, tostring(err))
        return
    end
    local c = S.main.c
    local p = "/_health-" .. S.batch_no
    local r = roundtrip(c, p)
    if r.created == p and r.data == "hc" and r.deleted == true then
        S.health_ok = S.health_ok + 1
    else
        S.health_failed = S.health_failed + 1
        record_bug("health", "client.roundtrip", S.main.name .. " state " .. c:state(),
                   ("create %s %s / get %s %s / delete %s %s / %s"):format(
                       tostring(r.created), tostring(r.e1), show.show(r.data), tostring(r.e2),
                       tostring(r.deleted), tostring(r.e3), concat(r.steps, ", ")))
        -- carry on with a fresh main client
        S.main.main = false
        S.main = assert(_M.connect_record("main", true))
    end
end

-- ---------------------------------------------------------------------------
-- The end.

local function delete_tree(path)
    local names = S.admin:children(path)
    for _, n in ipairs(names or {}) do
        delete_tree((path == "/" and "" or path) .. "/" .. n)
    end
    S.admin:delete(path)
end

--- Cleans up the namespace (nodes with a restrictive ACL may stay: returns
--- true then), stops the ticker and the private server.
function _M.teardown()
    delete_tree(S.ns)
    local leftover = S.admin:exists(S.ns) and true or false
    S.admin:close()
    proc.kill(S.ticker_pid, "TERM")
    proc.wait_exit(S.ticker_pid, 5)
    if S.server then
        S.server:destroy()
    end
    return leftover
end

return _M
