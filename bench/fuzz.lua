-- bench/fuzz.lua: random calls to every public method, checking how each ends.
--
--   luajit bench/fuzz.lua [--iterations N] [--seconds S] [--seed X] [--servers HOSTS]
--                         [--batch N] [--report FILE] [--trace FILE] [--verbose]
--                         [--known-bugs] [--no-known]
--
-- Every call (client methods, zkcoord.connect, every recipe and the methods
-- of what they return, futures, leases) gets random arguments: every Lua
-- type, paths with "..", ".", "//", a trailing "/", NUL, unicode, invalid
-- UTF-8, control characters, 2000-character and 1.1 MB names, data of 0
-- bytes to over 1 MiB (and around ZooKeeper's request limit), negative,
-- NaN, fractional, huge timeouts and versions, wrong ACLs, options tables
-- with unknown keys or wrong types, callbacks that raise, close the client
-- or call back into it, calls after close, recipes whose client was closed
-- (also while they wait), and methods called with a wrong self.
--
-- Each call runs under xpcall and is timed. Its outcome is one of:
--   ok            returned values (false and nil-only where documented)
--   err           returned nil + a known error code (errors.lua, core codes)
--   arg_error     raised a clear message: "bad argument #n to '<our function>'",
--                 "'<method>' must be called on ...", or a documented refusal
--   by_fuzzer     raised by one of the fuzzer's own callbacks or metamethods
--   known_bug     matched a bug found earlier and not fixed yet (see KNOWN below)
-- and, for bugs: internal (a raw "attempt to ..." error), unclear (another
-- raise), bad_code (nil + an unknown code or a non-string), nil_no_code,
-- hang (longer than the retry policy's bound, 5 x request timeout + 2 s, + slack + its own wait),
-- oracle (an ACL or data read back differs from what was written), health
-- (after a batch, a create/get/delete round trip on the main client failed).
--
-- Unbounded waits (nil or huge timeouts, huge backoff delays) are given only
-- to recipes of a "victim" client that is closed, or that is about to be
-- closed by a watch on a node a ticker process changes every 0.2 s (so the
-- wait ends with "closed"); the main client gets bounded ones only.
-- Inputs of a known hang or crash (KNOWN entries marked `avoided`) are
-- probed at start, in a child process where the probe itself could hang or
-- crash, and left out only while the bug is still there (--known-bugs: used
-- anyway). --no-known reports every bug as new, known or not.
--
-- Servers: --servers, else $ZK_HOSTS, else a private standalone server.
-- Stops after --iterations calls or --seconds (default 60 when neither is
-- given). Exit status 0 when no new bug was found. --report FILE writes the
-- counts as a Lua table (`return {...}`); --trace FILE holds the call in
-- progress (what was running if the process died or hung).
local root = (arg and arg[0] or ""):match("^(.*)/bench/[^/]*$") or "."
local cpath = os.getenv("ZKCOORD_CPATH") or "lua/?.so"
if cpath:sub(1, 1) ~= "/" then
    cpath = root .. "/" .. cpath
end
package.path = root .. "/spec/?.lua;" .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;"
    .. package.path
package.cpath = cpath .. ";" .. package.cpath

local ffi = require "ffi"
local zkcoord = require "zkcoord"
local errors = require "zkcoord.errors"
local queue = require "zkcoord.queue"
local proc = require "helpers.proc"

local now = zkcoord.now
local type, pairs, ipairs, tostring, select, unpack = type, pairs, ipairs, tostring, select, unpack
local floor, huge = math.floor, math.huge
local rep, format, concat = string.rep, string.format, table.concat

-- ---------------------------------------------------------------------------
-- Options.

local function usage(msg)
    if msg then
        io.stderr:write("fuzz.lua: ", msg, "\n")
    end
    io.stderr:write("usage: luajit bench/fuzz.lua [--iterations N] [--seconds S] [--seed X]\n"
        .. "         [--servers HOSTS] [--batch N] [--report FILE] [--trace FILE] [--verbose]"
        .. " [--known-bugs] [--no-known]\n")
    os.exit(2)
end

local opts = { batch = 40, verbose = false, known_bugs = false, match_known = true }
do
    local i = 1
    while arg and i <= #arg do
        local a = arg[i]
        local function val()
            i = i + 1
            if arg[i] == nil then
                usage(a .. " needs a value")
            end
            return arg[i]
        end
        if a == "--iterations" then
            opts.iterations = tonumber(val()) or usage("--iterations needs a number")
        elseif a == "--seconds" then
            opts.seconds = tonumber(val()) or usage("--seconds needs a number")
        elseif a == "--seed" then
            opts.seed = tonumber(val()) or usage("--seed needs a number")
        elseif a == "--servers" then
            opts.servers = val()
        elseif a == "--batch" then
            opts.batch = tonumber(val()) or usage("--batch needs a number")
        elseif a == "--report" then
            opts.report = val()
        elseif a == "--trace" then
            opts.trace = val()
        elseif a == "--verbose" then
            opts.verbose = true
        elseif a == "--known-bugs" then
            opts.known_bugs = true
        elseif a == "--no-known" then
            opts.match_known = false
        elseif a == "-h" or a == "--help" then
            usage()
        else
            usage("unknown argument " .. a)
        end
        i = i + 1
    end
    if not opts.iterations and not opts.seconds then
        opts.seconds = 60
    end
    opts.iterations = opts.iterations or 1e9
    opts.seconds = opts.seconds or 1e9
end

-- Our own generator (Park-Miller): zkcoord reseeds math.random, and a seed
-- must replay the same calls.
local seed = floor(opts.seed or (os.time() % 1000000 * 1000 + floor(now() * 1000) % 1000))
local rstate = seed % 2147483646 + 1
local function rnd()
    rstate = (rstate * 48271) % 2147483647
    return (rstate - 1) / 2147483646
end
local function rint(a, b)
    return a + floor(rnd() * (b - a + 1))
end
local function pick(t)
    return t[rint(1, #t)]
end
local function chance(p)
    return rnd() < p
end

-- ---------------------------------------------------------------------------
-- Known outcomes.

-- Every code a call may return: ZooKeeper's (core), ours (errors.own).
local KNOWN_CODES = { closed = true }
for rc, name in pairs(errors.by_rc) do
    if rc ~= 0 then
        KNOWN_CODES[name] = true
    end
end
for name in pairs(errors.own) do
    KNOWN_CODES[name] = true
end

-- Methods documented to return nil alone (or nothing) in some state.
local NIL_OK = {
    ["client.session_id"] = true, ["client.session_password"] = true, ["client.log"] = true,
    ["client.process"] = true, ["lock.node"] = true, ["lease.node"] = true,
    ["queue.node"] = true, ["queue.stat"] = true, ["election.leader"] = true,
    ["queue.on_lost"] = true, ["queue.seq"] = true,
}

-- Function names a clear "bad argument #n to 'name'" may carry.
local OUR_NAMES = {}
for _, n in ipairs({ "connect", "create", "get", "set", "delete", "exists", "children", "multi",
    "sync", "get_acl", "set_acl", "send", "remove_watches", "delete_guaranteed", "dispatch",
    "on_state", "wait_connected", "lock", "rwlock", "counter", "watch", "election",
    "semaphore", "barrier", "double_barrier", "queue.new", "acquire", "release", "on_lost",
    "add", "compare_and_set", "campaign", "on_elected", "on_revoked", "wait", "enter",
    "leave", "cancel", "on_done", "remove_listener", "log", "check_path", "spawn", "run",
    "queue.rule_fewer_than", "watch_line", "fuzz" }) do
    OUR_NAMES[n] = true
end

local CLEAR_PATTERNS = {
    "must be called on a",
    "cannot upgrade a read lock to a write lock",
    "bad rule verdict in 'enter'",
}

-- Bugs this fuzzer found, kept so a regression is recognised: every one is
-- fixed (docs/RELIABILITY.md), and each `avoided` one is probed at start
-- (PROBES), its inputs included once the probe shows the fix. A raise, a
-- code or a read-back that matches one counts as `known_bug`, not as a new
-- bug; a hang or a crash cannot be matched after the fact, so its inputs
-- are left out while its probe fails, unless --known-bugs.
-- match(class, key, msg): class is the outcome class it would have had.
-- (K2-K6 and K14 have no entry: spec/arguments_spec.lua shows each fix.)
local KNOWN = {
    {
        id = "K15", where = "lua/zkcoord/client.lua delete_guaranteed (with K9)", avoided = true,
        what = "delete_guaranteed(path) with a path above the request limit is sent, the server "
            .. "drops the connection, and the delete is sent again after every reconnect, for "
            .. "ever: the client flaps between connected and suspended (27 state changes in 2 s) "
            .. "and every other request fails with 'connectionloss'; a recipe on such a path "
            .. "does the same through its guaranteed deletes",
    },
    {
        id = "K12", where = "lua/zkcoord/queue.lua new, enter", avoided = true,
        what = "a queue whose marker is not among opts.markers never finds its own node: "
            .. "enter() forgets it (left behind, ephemeral) and creates another, for ever, "
            .. "whatever the timeout (1040 nodes in 2 s with enter(0)); an empty marker parses "
            .. "only the last digit of the sequence number, so the line is misordered",
    },
    {
        id = "K11", where = "lua/zkcoord/client.lua send.create, send.multi",
        what = "with a chroot, create('/', data, { sequential = true }) (and the same multi op) "
            .. "creates <chroot><seq> next to the chroot, outside the namespace, and returns "
            .. "'0000000001', a path without '/' (libzookeeper maps '/' to the chroot itself)",
        match = function(class, _, msg)
            return class == "oracle" and msg:find("not a path inside the chroot", 1, true)
        end,
    },
    {
        id = "K1", where = "src/queue.c queue_wait", avoided = true,
        what = "a wait of >= ~9.2e18 s: (time_t) overflow gives an invalid timespec, "
            .. "pthread_cond_timedwait fails with EINVAL at once and the loop spins holding the "
            .. "queue mutex, so no event can arrive: the call never returns (100% CPU). Every "
            .. "nil timeout of a recipe wait (lock:acquire(), barrier:wait() ...) is math.huge "
            .. "in the blocking waiter and hits it as soon as it really waits",
    },
    {
        id = "K7", where = "lua/zkcoord/counter.lua add", avoided = true,
        what = "an add() called from a callback while an add of the same counter object is "
            .. "writing queues behind that write, which cannot go on until the callback "
            .. "returns: it waits max_tries x (request_timeout + max_delay) (17 min by default) "
            .. "and returns 'timeout'",
    },
    {
        id = "K8", where = "src/session.c session_multi (libzookeeper zoo_amulti)", avoided = true,
        what = "a multi op whose path holds a control character (0x01..0x1e, which check_path "
            .. "lets through) makes zoo_amulti free an uninitialised request path: "
            .. "'free(): double free detected', 'munmap_chunk(): invalid pointer', ASan bad-free; "
            .. "the process aborts",
    },
    {
        id = "K9", where = "lua/zkcoord/client.lua data_arg",
        what = "only create/set data is size-checked: a 1.1 MB path (get, exists, delete ...) or "
            .. "a multi whose ops together exceed 1 MiB is sent, the server drops the connection "
            .. "(every request in flight fails, reads retry and drop it 5 times) and the call "
            .. "returns 'connectionloss' instead of 'toolarge'",
        match = function(class, _, msg, oversize)
            return class == "err" and msg == "connectionloss" and oversize
        end,
    },
    {
        id = "K10", where = "lua/zkcoord/client.lua normalize_acl",
        what = "ACL perms strings add up repeated letters: 'rr' becomes 2 (write), 'cdc' 16 "
            .. "(admin), 'aa' 32 (no valid bit): a node gets other permissions than written",
        match = function(class, _, msg)
            return class == "oracle" and msg:find("ACL perms", 1, true)
        end,
    },
}


-- ---------------------------------------------------------------------------
-- Output.

local function say(...)
    io.stdout:write(...)
    io.stdout:write("\n")
    io.stdout:flush()
end

local labels = setmetatable({}, { __mode = "k" })
local nlabel = 0
local function label(v, name)
    nlabel = nlabel + 1
    labels[v] = name .. "#" .. nlabel
    return v
end

local function esc(s)
    return (s:gsub("[%c\128-\255\"\\]", function(c)
        return format("\\%d", c:byte())
    end))
end

local function show(v, depth)
    depth = depth or 0
    local t = type(v)
    if labels[v] then
        return "<" .. labels[v] .. ">"
    elseif t == "string" then
        if #v > 48 then
            return format("<%d-byte string \"%s...\">", #v, esc(v:sub(1, 24)))
        end
        return "\"" .. esc(v) .. "\""
    elseif t == "number" then
        if v ~= v then return "0/0" end
        if v == huge then return "math.huge" end
        if v == -huge then return "-math.huge" end
        if v == 0 and 1 / v < 0 then return "-0.0" end
        return format("%.17g", v)
    elseif t == "table" then
        if depth > 2 then return "{...}" end
        local out, n = {}, 0
        for k, x in pairs(v) do
            n = n + 1
            if n > 6 then out[#out + 1] = "..."; break end
            if type(k) == "number" then
                out[#out + 1] = show(x, depth + 1)
            else
                out[#out + 1] = (type(k) == "string" and k:match("^[%a_][%w_]*$") and k
                                 or "[" .. show(k, depth + 1) .. "]") .. "=" .. show(x, depth + 1)
            end
        end
        return "{" .. concat(out, ", ") .. "}"
    end
    return "<" .. t .. ">"
end

local function show_args(args)
    local out = {}
    for i = 1, args.n do
        out[i] = show(args[i])
    end
    return concat(out, ", ")
end

-- The calls in progress (nested ones below their callers), rewritten at
-- every call so that it holds what was running when the process died.
-- (Coroutines make a stack unreliable: the top-level call and the last
-- call started, which may be one made from a callback inside it.)
local trace_file = opts.trace and io.open(opts.trace, "w")
local trace_top, trace_depth = "", 0
local function trace_push(text)
    if trace_depth <= 0 then
        trace_top, trace_depth = text, 0
    end
    trace_depth = trace_depth + 1
    if trace_file then
        trace_file:close()
        trace_file = io.open(opts.trace, "w")
        trace_file:write(trace_top, "\n")
        if trace_depth > 1 then
            trace_file:write("  and inside it, last: ", text, "\n")
        end
        trace_file:flush()
    end
end
local function trace_pop()
    trace_depth = trace_depth - 1
end

-- ---------------------------------------------------------------------------
-- The server, the namespace, the ticker.

local server
local hosts = opts.servers or os.getenv("ZK_HOSTS")
if not hosts or hosts == "" then
    local zkserver = require "helpers.zkserver"
    local err
    server, err = zkserver.start({ tick_time = 500 })
    if not server then
        io.stderr:write("fuzz.lua: could not start ZooKeeper: ", tostring(err), "\n")
        os.exit(2)
    end
    hosts = server.hosts
end

local REQUEST_TIMEOUT = 3
local SESSION_TIMEOUT = 4
local SLACK = 10         -- seconds: loaded machines, sanitizers
-- A read may take the retry policy's bound after a connection loss: the
-- default 5 tries of up to REQUEST_TIMEOUT each, plus backoff (< 2 s).
local CALL_BOUND = 5 * REQUEST_TIMEOUT + 2
local TICK = 0.2

local function random_secret()
    local f = io.open("/dev/urandom", "rb")
    local b = f and f:read(6) or tostring(os.time())
    if f then f:close() end
    return (b:gsub(".", function(c) return format("%02x", c:byte()) end))
end
local AUTH = { scheme = "digest", credentials = "fuzz:" .. random_secret() }

local logged = { error = 0, warn = 0, info = 0, debug = 0, other = 0 }
local function logger(level, msg)
    local k = logged[level] and level or "other"
    logged[k] = logged[k] + 1
    if opts.verbose then
        io.stderr:write("zkcoord [", tostring(level), "] ", tostring(msg), "\n")
    end
end

local admin = assert(zkcoord.connect { servers = hosts, session_timeout = 10, auth = AUTH,
                                       logger = logger })
local NS = ("/fuzz-%d-%d"):format(seed, proc.getpid())
local TICK_NODE = "/_tick"
local function ensure_ns()
    local ok, err = admin:create(NS .. TICK_NODE, "0", { parents = true })
    return ok or err == "nodeexists", err
end
assert(ensure_ns())

local ticker_pid
local dir = assert(proc.mktemp_dir("zkcoord-fuzz-"))
do
    local file = dir .. "/ticker.lua"
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
            c:dispatch(]] .. TICK .. [[)
            local f = io.open("/proc/" .. ppid .. "/stat")
            if not f then break end
            f:close()
        end
        c:close()
    ]]))
    local limit = math.min(opts.seconds, 36000) + 600
    ticker_pid = assert(proc.spawn({ arg[-1] or "luajit", file, hosts, NS .. TICK_NODE,
                                     tostring(limit), tostring(proc.getpid()) },
                                   { owner = true, stdout = dir .. "/ticker.log",
                                     stderr = dir .. "/ticker.log",
                                     env = { LUA_PATH = package.path,
                                                           LUA_CPATH = package.cpath },
                                     cleanup_dir = dir }))
end

-- ---------------------------------------------------------------------------
-- Known hangs and crashes: still there? Their inputs are used once fixed.

local function sh_quote(v)
    return "'" .. tostring(v):gsub("'", "'\\''") .. "'"
end

-- Runs Lua `code` in a child luajit (same paths), killed after `limit` s.
local function child(name, code, limit)
    local file, out = dir .. "/" .. name .. ".lua", dir .. "/" .. name .. ".out"
    assert(proc.write_file(file, code))
    os.execute(("ZK_HOSTS=%s LUA_PATH=%s LUA_CPATH=%s timeout -s KILL %d %s %s > %s 2>&1"):format(
        sh_quote(hosts), sh_quote(package.path), sh_quote(package.cpath), limit,
        sh_quote(arg[-1] or "luajit"), sh_quote(file), sh_quote(out)))
    return proc.read_file(out) or ""
end

local PROBES = {
    K1 = function()
        return not child("probe-k1", [[
            local zkcoord = require "zkcoord"
            local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS") })
            c:send("exists", "/"):wait(1e300)
            print("returned")
        ]], 10):find("returned", 1, true)
    end,
    K7 = function()
        return not child("probe-k7", [[
            local zkcoord = require "zkcoord"
            local hosts = os.getenv("ZK_HOSTS")
            local c = assert(zkcoord.connect { servers = hosts, request_timeout = 1 })
            local other = assert(zkcoord.connect { servers = hosts })
            local p = "/fuzz-probe-k7-" .. os.time() .. "-" .. math.random(1e6)
            local ctr = c:counter(p .. "/ctr", { max_tries = 2 })
            assert(ctr:add(1))
            c:create(p .. "/w", "0")
            local inner
            c:get(p .. "/w", function() inner = { ctr:add(1) } end)
            other:set(p .. "/w", "1")
            os.execute("sleep 0.3")
            ctr:add(1)
            c:delete(p .. "/w") c:delete(p .. "/ctr") c:delete(p)
            print(inner and inner[1] and "fine" or "stuck")
        ]], 30):find("fine", 1, true)
    end,
    K8 = function()
        return (pcall(zkcoord.check_path, "/a\nb", "probe", 1))
    end,
    K15 = function()
        -- K9 still there (so K15 too): a read of a 1.1 MB path goes to the server
        local c = zkcoord.connect { servers = hosts, request_timeout = 2, logger = logger,
                                    retry = { max_tries = 1 } }
        if not c then
            return true
        end
        local ok, _, err = pcall(c.get, c, "/" .. rep("p", 1100000))
        c:close()
        return ok and err == "connectionloss"
    end,
    K12 = function()
        return (pcall(queue.new, admin, "/x", { marker = "m-", markers = { "x-" },
                                               rule = queue.rule_first }))
    end,
}

local include, present = {}, {}
for id, probe in pairs(PROBES) do
    present[id] = probe() and true or false
    include[id] = opts.known_bugs or not present[id]
end

-- ---------------------------------------------------------------------------
-- Clients and objects.

local clients = {}        -- records { c =, name =, main =, guarded = }
local main                -- the record of the main client
local objects = {}        -- records { kind =, obj =, owner = client record }
local MAX_OBJECTS = 60

local function connect_record(name, is_main, extra)
    local o = { servers = hosts, chroot = NS, session_timeout = SESSION_TIMEOUT,
                request_timeout = REQUEST_TIMEOUT, logger = logger, auth = AUTH }
    for k, v in pairs(extra or {}) do o[k] = v end
    local c, err, detail = zkcoord.connect(o)
    if not c then
        return nil, err, detail
    end
    local rec = { c = c, name = name, main = is_main, guarded = false }
    label(c, name)
    clients[#clients + 1] = rec
    if #clients > 40 then
        table.remove(clients, 1)
    end
    return rec
end

local function add_object(kind, obj, owner)
    if obj == nil or (type(obj) ~= "table") then
        return
    end
    label(obj, kind)
    objects[#objects + 1] = { kind = kind, obj = obj, owner = owner }
    if #objects > MAX_OBJECTS then
        table.remove(objects, rint(1, #objects - 10))
    end
end

local function is_closed(rec)
    return rec.c:state() == "closed"
end

-- May a call on this client wait without bound? Only when closed or guarded.
local function unbounded_ok(rec)
    if not rec or rec.main then
        return false
    elseif is_closed(rec) then
        return "closed"
    end
    return rec.guarded and "guarded"
end

-- ---------------------------------------------------------------------------
-- Values.

local SENTINEL = "FUZZ-SENTINEL"
local poison = setmetatable({}, { __index = function(_, k)
    error(SENTINEL .. ": __index " .. tostring(k))
end })
label(poison, "poisoned-table")
local cyclic = {}
cyclic.self = cyclic
cyclic[1] = cyclic
label(cyclic, "cyclic-table")
local ud = newproxy(true)
label(ud, "userdata")
local co = coroutine.create(function() end)
label(co, "coroutine")
local i64 = ffi.new("int64_t", 7)
local nullp = ffi.new("void *")

local fn_counts = { noop = 0, count = 0 }
local function noop() end
local function counting() fn_counts.count = fn_counts.count + 1 end
local function raising() error(SENTINEL .. ": callback raised") end
local function nested()
    -- calls back into the main client from inside a callback
    local m = main and main.c
    if m and m:state() ~= "closed" then
        trace_push("callback fn:nested: main:exists('/a')")
        pcall(m.exists, m, "/a")
        trace_pop()
    end
end
label(noop, "fn:noop"); label(counting, "fn:count"); label(raising, "fn:raising")
label(nested, "fn:nested")

local BIG = rep("z", 2 * 1024 * 1024 + 64)
local LONG_NAME = rep("n", 2000)
local HUGE_PATH = "/" .. rep("p", 1100000)
local DEEP = rep("/d", 200)

-- Set when generated arguments make a request above the limit that only
-- the server notices (K9); run() takes its value when a call starts.
local oversize = false

-- Inputs of the known hang K1 (left out unless --known-bugs).
local HUGE = { huge, 1e300, 2 ^ 63, 1e19 }

local function any_value()
    local r = rint(1, 34)
    if r == 1 then return nil
    elseif r == 2 then return true
    elseif r == 3 then return false
    elseif r == 4 then return 0
    elseif r == 5 then return -1
    elseif r == 6 then return 1.5
    elseif r == 7 then return 0 / 0
    elseif r == 8 then return include.K1 and huge or 1e15
    elseif r == 9 then return -huge
    elseif r == 10 then return 2 ^ 53
    elseif r == 11 then return -0.0
    elseif r == 12 then return ""
    elseif r == 13 then return "x"
    elseif r == 14 then return "/"
    elseif r == 15 then return "/a"
    elseif r == 16 then return LONG_NAME
    elseif r == 17 then return "\0"
    elseif r == 18 then return {}
    elseif r == 19 then return { 1, 2, 3 }
    elseif r == 20 then return { x = 1 }
    elseif r == 21 then return poison
    elseif r == 22 then return cyclic
    elseif r == 23 then return noop
    elseif r == 24 then return raising
    elseif r == 25 then return co
    elseif r == 26 then return ud
    elseif r == 27 then return io.stdout
    elseif r == 28 then return i64
    elseif r == 29 then return nullp
    elseif r == 30 then return zkcoord
    elseif r == 31 then return main and main.c
    elseif r == 32 then local o = #objects > 0 and pick(objects); return o and o.obj
    elseif r == 33 then return "rwcda"
    end
    return 1e-300
end

local NAMES = { "a", "b", "lk", "lk2", "ctr", "bar", "el", "sem", "db", "q", "w" }

local function good_path()
    local depth = rint(1, 3)
    local parts = {}
    for i = 1, depth do
        parts[i] = i == 1 and pick(NAMES) or pick({ "a", "b", "c", "x" })
    end
    return "/" .. concat(parts, "/")
end

local EDGE_PATHS = {
    "/", "/", "/", "", "a", "a/b", "/a/", "/a//b", "//", "///", "/.", "/..", "/a/.", "/a/..", "/a/./b",
    "/a/../b", "/..a", "/a..", "/...", "/.a", "/a\0b", "\0", "/\0", "/ünïcödé", "/😀/😀",
    "/\255\254", "/\1\2\3", "/\127", "/a b", "/a\nb", "/zookeeper", "/zookeeper/quota",
    "/zookeeper/config", "/" .. LONG_NAME, "/" .. rep("é", 1000), DEEP, "/seq-/", "/a/seq-",
    "/\226\128\174", "/%s%d", "/a/b/c/d/e/f/g",
}

-- `resent`: where a request above the limit would be re-sent for ever
-- (K15: delete_guaranteed, and the guaranteed deletes of every recipe), a
-- 1.1 MB path is used only once K9 is fixed.
local function gen_path(resent)
    local r = rnd()
    if r < 0.6 then
        return good_path()
    elseif r < 0.9 then
        return pick(EDGE_PATHS)
    elseif r < 0.905 then
        if resent and not include.K15 then
            return good_path()
        end
        oversize = true
        return HUGE_PATH
    end
    return any_value()
end

local LIMIT = 1048575
local function gen_data(path)
    local r = rint(1, 14)
    if r == 1 then return nil
    elseif r == 2 then return ""
    elseif r == 3 then return "x"
    elseif r == 4 then return "a\0b\0\255\1"
    elseif r == 5 then return BIG:sub(1, rint(0, 100))
    elseif r == 6 then return LONG_NAME
    elseif r == 7 then
        -- around the request limit, given this path and the namespace
        local plen = type(path) == "string" and #path or 1
        local n = LIMIT - 32 - #NS - plen - 4 - 23 + rint(-3, 3)
        return BIG:sub(1, n > 0 and n or 0)
    elseif r == 8 then return BIG:sub(1, LIMIT - rint(0, 300))
    elseif r == 9 then return BIG:sub(1, 1024 * 1024)
    elseif r == 10 then return BIG:sub(1, 1024 * 1024 + 1)
    elseif r == 11 then return BIG:sub(1, 2 * 1024 * 1024)
    elseif r == 12 then return "ünï😀"
    end
    return any_value()
end

local function gen_version()
    return pick({ nil, -1, 0, 1, 2, 7, -2, 1.5, 0 / 0, huge, -huge, 2147483647, 2147483648,
                  2 ^ 53, "1", {}, true, noop, -0.0 })
end

-- Timeouts: bounded ones for the main client, anything for an unbounded context.
local BOUNDED_T = { 0, -0.0, 1e-9, 0.001, 0.02, 0.1, 0.3 }
local INVALID_T = { -1, -1e-9, 0 / 0, -huge, "0.1", "x", {}, true, noop, i64 }
-- Finite but far away: the wait ends only by what it waits for, or the guard.
local UNBOUNDED_T = { 1e10, 2 ^ 53, 1e18, 86400 }

-- `unbounded`: false (the main client: bounded waits only), "guarded" (a
-- victim about to be closed) or "closed". nil ("no limit") becomes
-- math.huge in the blocking waiter and hits K1 as soon as it really
-- waits, so it goes only to closed clients (that return at once) unless
-- --known-bugs.
local function gen_timeout(unbounded)
    local r = rnd()
    if r < 0.55 then
        return pick(BOUNDED_T)
    elseif r < 0.85 then
        return pick(INVALID_T)
    elseif unbounded then
        if include.K1 and chance(0.3) then
            return pick(HUGE)
        elseif (include.K1 or unbounded == "closed") and chance(0.4) then
            return nil
        end
        return pick(UNBOUNDED_T)
    end
    return pick(BOUNDED_T)
end

-- A timeout for calls that are bounded by the request timeout anyway
-- (future:wait, wait_connected, watch's first delivery).
local function gen_soft_timeout()
    local r = rnd()
    if r < 0.4 then
        return pick(BOUNDED_T)
    elseif r < 0.7 then
        return pick(INVALID_T)
    elseif r < 0.9 then
        return nil
    elseif include.K1 and chance(0.3) then
        return pick(HUGE)
    end
    return pick({ 1e10, 2 ^ 53, 5 })
end

-- A callback or spawned task that calls a random method of a random object
-- (bounded arguments), one level deep: callbacks run inside other calls.
local call_object     -- defined below
local nesting = 0
local nested_calls = 0
local function nested_object()
    if nesting > 0 or #objects == 0 then
        return
    end
    nesting = nesting + 1
    nested_calls = nested_calls + 1
    local ok, err = pcall(call_object, pick(objects), true)
    nesting = nesting - 1
    if not ok then
        error(err, 0)
    end
end
label(nested_object, "fn:nested-object")

local function gen_fn(rec)
    local r = rint(1, 11)
    if r <= 3 then return noop
    elseif r <= 5 then return counting
    elseif r == 6 then return raising
    elseif r == 7 then return nested
    elseif r == 8 then return nested_object
    elseif r == 9 and rec and not rec.main then
        local c = rec.c
        local name = rec.name
        local f = function()
            trace_push("callback: close " .. name)
            c:close()
            trace_pop()
        end
        return label(f, "fn:close-" .. rec.name)
    end
    return any_value()
end

local function gen_acl()
    local r = rint(1, 22)
    if r == 1 then return nil
    elseif r == 2 then return "open"
    elseif r == 3 then return "creator_all"
    elseif r == 4 then return "read"
    elseif r == 5 then return "bogus"
    elseif r == 6 then return {}
    elseif r == 7 then return { {} }
    elseif r == 8 then return { { perms = "rwcda", scheme = "world", id = "anyone" } }
    elseif r == 9 then return { { perms = "r", scheme = "digest", id = "u:bad" } }
    elseif r == 10 then return { { perms = "x", scheme = "world", id = "anyone" } }
    elseif r == 11 then return { { perms = 32, scheme = "world", id = "anyone" } }
    elseif r == 12 then return { { perms = -1, scheme = "world", id = "anyone" } }
    elseif r == 13 then return { { perms = 1.5, scheme = "world", id = "anyone" } }
    elseif r == 14 then return { { perms = "", scheme = "world", id = "anyone" } }
    elseif r == 15 then return { { perms = "rwcda", scheme = "ip", id = "127.0.0.1" } }
    elseif r == 16 then return { { perms = "rwcda", scheme = "ip", id = "not-an-ip" } }
    elseif r == 17 then return { { perms = "rwcda", scheme = "auth", id = "" } }
    elseif r == 18 then return { { perms = "r", scheme = 5, id = "x" } }
    elseif r == 19 then return { "open" }
    elseif r == 20 then
        -- letters picked at random, repeats allowed ("rr", "cdc" ...)
        local p = {}
        for i = 1, rint(1, 4) do p[i] = pick({ "r", "w", "c", "d", "a" }) end
        return { { perms = concat(p), scheme = "world", id = "anyone" } }
    elseif r == 21 then return { { perms = rint(0, 31), scheme = "world", id = "anyone" } }
    end
    return any_value()
end

-- An options table: some valid keys with values from `valid`, maybe an
-- unknown key, maybe a wrong type, maybe not a table at all.
local function gen_opts(valid)
    local r = rnd()
    if r < 0.15 then
        return nil
    elseif r < 0.22 then
        return any_value()
    end
    local t = {}
    for k, gen in pairs(valid) do
        if chance(0.4) then
            t[k] = gen()
        end
    end
    if chance(0.12) then
        t[pick({ "bogus", "Ephemeral", "timeout ", 1, "__index" })] = any_value()
    end
    if chance(0.05) then
        t[pick({ "owner", "data", "id" })] = any_value()
    end
    return t
end

local function bool() return chance(0.5) end

local CREATE_OPTS = {
    ephemeral = bool, sequential = bool, container = function() return chance(0.3) end,
    ttl = function() return pick({ 1, 60, 0.0001, -1, 0 / 0, "5", 1e9, 1e300, huge }) end,
    parents = function() return pick({ true, false, "container", 5 }) end,
    acl = gen_acl,
}

local function gen_create_opts()
    local o = gen_opts(CREATE_OPTS)
    -- containers and TTLs exclude each other and ephemeral: keep most valid
    if type(o) == "table" and getmetatable(o) == nil and chance(0.7) then
        if o.container then o.ttl, o.ephemeral, o.sequential = nil, nil, nil end
        if o.ttl then o.ephemeral = nil end
    end
    return o
end

local function gen_multi_op()
    local r = rnd()
    if r < 0.05 then
        return any_value()
    end
    local path = gen_path()
    local op = { op = pick({ "create", "delete", "set", "check", "create", "bogus", nil }),
                 path = path }
    if chance(0.5) then op.data = gen_data(path) end
    if chance(0.4) then op.version = gen_version() end
    if chance(0.2) then op.ephemeral = bool() end
    if chance(0.2) then op.sequential = bool() end
    if chance(0.1) then op.acl = gen_acl() end
    if chance(0.05) then op.ttl = 1 end
    if chance(0.05) then op = { pick({ "create", "delete" }), path } end
    return op
end

-- K8: a control character in a multi op path crashes the process.
local function control_chars(p)
    return type(p) == "string" and p:find("[\1-\30]") ~= nil
end

local function gen_multi()
    local r = rnd()
    if r < 0.1 then return any_value() end
    local ops = {}
    for i = 1, rint(0, 5) do
        local op = gen_multi_op()
        if not include.K8 and type(op) == "table" and getmetatable(op) == nil then
            if control_chars(op.path) then op.path = good_path() end
            if control_chars(op[2]) then op[2] = good_path() end
        end
        ops[i] = op
    end
    if chance(0.05) then
        -- big data in several ops: together above the request limit
        ops = {}
        oversize = true
        for i = 1, 3 do
            ops[i] = { op = "create", path = "/big" .. i, data = BIG:sub(1, 500000) }
        end
    end
    return ops
end

local function pack(...)
    return { n = select("#", ...), ... }
end

local function gen_lock_opts()
    return gen_opts({ owner = function() return pick({ "o1", "o2", 1, cyclic, true }) end,
                      data = function() return gen_data("/lk") end,
                      reentrant = bool })
end

local function gen_counter_opts(unbounded)
    return gen_opts({
        initial = function() return pick({ 0, 5, -7, 2 ^ 53, 1.5, 0 / 0, "1" }) end,
        max_tries = function() return pick({ 1, 3, 100, 0, -1, 1.5, 0 / 0, huge, "3" }) end,
        base_delay = function()
            return pick(unbounded and { 0, 0.001, 1e6, -1, 0 / 0, huge, "x" }
                        or { 0, 0.001, 0.01, -1, 0 / 0, huge, "x" })
        end,
        max_delay = function()
            return pick(unbounded and { 0, 0.01, 1e6, -1, 0 / 0, huge }
                        or { 0, 0.01, 0.05, -1, 0 / 0, huge })
        end,
    })
end

local function gen_queue_opts()
    local r = rnd()
    if r < 0.1 then return any_value() end
    local rules = { queue.rule_first, queue.rule_fewer_than(rint(1, 3)), queue.rule_fewer_than,
                    queue.rule_none_below("x-"), function() return "junk" end,
                    function() return queue.ANY end, queue.rule_always,
                    function() error(SENTINEL .. ": rule raised") end, noop, "rule" }
    local o = {
        marker = pick({ "m-", "lock-", "", "x-", 5, nil }),
        markers = chance(0.2) and pick({ { "m-", "x-" }, { 5 }, {}, "m-" }) or nil,
        rule = pick(rules),
        data = chance(0.3) and gen_data("/q") or nil,
        parents = chance(0.2) and pick({ "persistent", "container", 5 }) or nil,
    }
    -- K12: our own marker missing from `markers` makes enter() loop for ever
    if not include.K12 and type(o.markers) == "table" and type(o.marker) == "string" then
        o.markers = { o.marker, unpack(o.markers) }
    end
    return o
end

-- ---------------------------------------------------------------------------
-- The method catalogue: kind -> { name = args(rec) -> packed args, wait = extra seconds }.

local M = {}

M.client = {
    create = function() local p = gen_path(); return pack(p, gen_data(p), gen_create_opts()) end,
    get = function(rec) return pack(gen_path(), chance(0.3) and gen_fn(rec) or nil) end,
    set = function() local p = gen_path(); return pack(p, gen_data(p), gen_version()) end,
    delete = function() return pack(gen_path(), chance(0.3) and gen_version() or nil) end,
    exists = function(rec) return pack(gen_path(), chance(0.3) and gen_fn(rec) or nil) end,
    children = function(rec) return pack(gen_path(), chance(0.3) and gen_fn(rec) or nil) end,
    multi = function() return pack(gen_multi()) end,
    sync = function() return pack(gen_path()) end,
    get_acl = function() return pack(gen_path()) end,
    set_acl = function()
        local p = gen_path()
        if p == "/" then p = "/a" end   -- the namespace root keeps its ACL (see header)
        return pack(p, gen_acl(), chance(0.3) and gen_version() or nil)
    end,
    send = function(rec)
        local op = pick({ "create", "get", "set", "delete", "exists", "children", "multi", "sync",
                          "get_acl", "set_acl", "bogus", 5, "remove_watch", "__index" })
        local gen = M.client[op]
        if type(op) == "string" and gen and op ~= "send" then
            local a = gen(rec)
            if op == "set_acl" and a[1] == "/" then a[1] = "/a" end
            return pack(op, unpack(a, 1, a.n))
        end
        return pack(op, gen_path())
    end,
    remove_watches = function(rec) return pack(gen_path(), chance(0.5) and gen_fn(rec) or nil) end,
    delete_guaranteed = function()
        return pack(gen_path(true), chance(0.3) and gen_version() or nil,
                    chance(0.3) and bool() or nil)
    end,
    dispatch = function(rec) return pack(gen_timeout(unbounded_ok(rec))) end,
    on_state = function(rec) return pack(gen_fn(rec)) end,
    remove_listener = function(rec) return pack(gen_fn(rec)) end,
    wait_connected = function() return pack(gen_soft_timeout()) end,
    log = function() return pack(pick({ "error", "warn", "info", "debug", 5, nil }), any_value()) end,
    state = function() return pack() end,
    session_id = function() return pack() end,
    session_password = function() return pack() end,
    session_timeout = function() return pack() end,
    fd = function() return pack() end,
    process = function() return pack() end,
    stats = function() return pack() end,
    waiter = function() return pack() end,
    close = function() return pack() end,
    spawn = function(rec)
        return pack(chance(0.7) and nested_object or gen_fn(rec), any_value())
    end,
    run = function(rec) return pack(gen_timeout(unbounded_ok(rec))) end,
    lock = function() return pack(gen_path(true), gen_lock_opts()) end,
    rwlock = function()
        return pack(gen_path(true), gen_opts({ owner = function() return pick({ "o1", "o2" }) end,
                                           data = function() return gen_data("/lk") end }))
    end,
    counter = function(rec) return pack(gen_path(true), gen_counter_opts(unbounded_ok(rec))) end,
    watch = function(rec)
        return pack(gen_path(true), chance(0.9) and counting or gen_fn(rec),
                    gen_opts({ kind = function() return pick({ "data", "children", "x", 5 }) end,
                               timeout = gen_soft_timeout }))
    end,
    election = function()
        return pack(gen_path(true), gen_opts({ id = function() return gen_data("/el") end }))
    end,
    semaphore = function()
        return pack(gen_path(true), pick({ 1, 2, 3, 0, -1, 1.5, 0 / 0, huge, 2147483647, "2", nil }),
                    gen_opts({ data = function() return gen_data("/sem") end }))
    end,
    barrier = function() return pack(gen_path(true)) end,
    double_barrier = function(rec)
        local n = unbounded_ok(rec) and pick({ 1, 2, 3, 2 ^ 31 }) or pick({ 1, 2 })
        return pack(gen_path(true), chance(0.8) and n or pick({ 0, -1, 1.5, 0 / 0, huge, "2" }),
                    gen_opts({ id = function() return gen_data("/db") end }))
    end,
    queue = function() return pack(gen_path(true), gen_queue_opts()) end,
}
-- Operations that run under a client whose closing is part of the plan.
local CLOSES = { close = true }
-- Constructors: kind of object they return.
local MAKES = { lock = "lock", rwlock = "rwlock", counter = "counter", watch = "watch",
                election = "election", semaphore = "semaphore", barrier = "barrier",
                double_barrier = "double_barrier", queue = "queue" }

local function timeout_arg(unb)
    return function(rec) return pack(gen_timeout(unb or unbounded_ok(rec))) end
end
local function fn_arg(rec) return pack(gen_fn(rec)) end
local function none() return pack() end

M.future = { wait = function() return pack(gen_soft_timeout()) end, on_done = fn_arg }
M.lock = { acquire = timeout_arg(), release = none, held = none, token = none, node = none,
           count = none, on_lost = fn_arg, contenders = none }
M.rwlock = { read_lock = none, write_lock = none, contenders = none }
M.counter = {
    get = none,
    add = function() return pack(pick({ 1, -1, 0, 5, 2 ^ 53, 1.5, 0 / 0, huge, "1", nil, {} })) end,
    set = function() return pack(pick({ 0, 1, -5, 2 ^ 53, 2 ^ 53 - 1, 1.5, 0 / 0, "1", nil })) end,
    compare_and_set = function()
        return pack(pick({ 0, 1, 2, 1.5, nil, "0" }), pick({ 1, 2, 3, 2 ^ 60, nil }))
    end,
    stats = none,
}
M.watch = { cancel = none, is_active = none }
M.election = { campaign = timeout_arg(), resign = none, is_leader = none, leader = none,
               participants = none, on_elected = fn_arg, on_revoked = fn_arg }
M.semaphore = { acquire = timeout_arg(), leases = none, participants = none }
M.lease = { release = none, held = none, node = none, on_lost = fn_arg }
M.barrier = { create = none, remove = none, is_set = none, wait = timeout_arg() }
M.double_barrier = { enter = timeout_arg(), leave = timeout_arg(), participants = none }
M.queue = { enter = timeout_arg(), leave = none, entries = none, is_through = none,
            node = none, seq = none, stat = none, on_lost = fn_arg, watch_line = fn_arg }

-- What some methods return, to keep for later calls.
local RETURNS = { ["rwlock.read_lock"] = "lock", ["rwlock.write_lock"] = "lock",
                  ["semaphore.acquire"] = "lease", ["client.send"] = "future",
                  ["future.on_done"] = "future" }

-- Every method, for coverage.
local ALL_KEYS = { "module.connect", "module.check_path" }
for kind, ms in pairs(M) do
    for name in pairs(ms) do
        ALL_KEYS[#ALL_KEYS + 1] = kind .. "." .. name
    end
end
table.sort(ALL_KEYS)

-- ---------------------------------------------------------------------------
-- Running and classifying one call.

local counts = { ok = 0, err = 0, arg_error = 0, by_fuzzer = 0, known_bug = 0, internal = 0,
                 unclear = 0, bad_code = 0, nil_no_code = 0, hang = 0, oracle = 0, health = 0 }
local BUG_CLASSES = { internal = true, unclear = true, bad_code = true, nil_no_code = true,
                      hang = true, oracle = true, health = true }
local codes = {}          -- code -> count
local known_hits = {}     -- known bug id -> count
local coverage = {}       -- key -> calls
local bugs = {}           -- signature -> { class, key, call, message, traceback, count }
local bug_order = {}
local slowest = { t = 0 }
local calls, wrong_self_calls, coroutine_calls = 0, 0, 0

local known_match, count_known   -- below

local function record_bug(class, key, call, msg, tb)
    local kb = known_match(class, key, msg)
    if kb then
        count_known(kb)
        if opts.verbose then say("  known bug ", kb, ": ", call, ": ", tostring(msg)) end
        return
    end
    counts[class] = counts[class] + 1
    local sig = class .. " " .. key .. " " .. tostring(msg):gsub("0x%x+", "0x?")
                                                          :gsub("#%d+", "#?"):sub(1, 200)
    local b = bugs[sig]
    if not b then
        b = { class = class, key = key, call = call, message = tostring(msg), traceback = tb,
              count = 0, seed = seed, at_call = calls }
        bugs[sig] = b
        bug_order[#bug_order + 1] = sig
        say("BUG [", class, "] ", call, "\n    ", tostring(msg), tb and ("\n" .. tb) or "")
    end
    b.count = b.count + 1
end

local function clear_message(msg)
    local name = msg:match("bad argument #%d+ to '([^']+)'")
    if name and OUR_NAMES[name] then
        return true
    end
    for _, p in ipairs(CLEAR_PATTERNS) do
        if msg:find(p, 1, true) then
            return true
        end
    end
    return false
end

function known_match(class, key, msg, big)
    if not opts.match_known then
        return nil
    end
    for _, k in ipairs(KNOWN) do
        if k.match and k.match(class, key, tostring(msg), big) then
            return k.id
        end
    end
    return nil
end

function count_known(id)
    counts.known_bug = counts.known_bug + 1
    known_hits[id] = (known_hits[id] or 0) + 1
end

local function handler(e)
    return { err = e, tb = debug.traceback("", 2) }
end

-- Runs fn(self, args...) and classifies it. Returns ok, results (packed).
local function run(key, fn, self, args, extra_wait, where)
    calls = calls + 1
    coverage[key] = (coverage[key] or 0) + 1
    local oversize_args = oversize
    oversize = false
    local desc = ("%s(%s%s)%s"):format(key, show(self), args.n > 0 and ", " .. show_args(args) or "",
                                       where or "")
    trace_push(("call %d seed %d: %s"):format(calls, seed, desc))
    if opts.verbose then
        say("call ", calls, ": ", desc)
    end
    local t0 = now()
    local r
    if chance(0.05) then
        -- from another coroutine: another lock owner
        coroutine_calls = coroutine_calls + 1
        local c = coroutine.create(function()
            return pack(xpcall(fn, handler, self, unpack(args, 1, args.n)))
        end)
        local okc, res = coroutine.resume(c)
        r = okc and res or pack(false, handler(res))
    else
        r = pack(xpcall(fn, handler, self, unpack(args, 1, args.n)))
    end
    trace_pop()
    local elapsed = now() - t0
    if elapsed > slowest.t then
        slowest.t, slowest.call = elapsed, desc
    end
    if elapsed > CALL_BOUND + SLACK + (extra_wait or 0) then
        record_bug("hang", key, desc, ("took %.1f s"):format(elapsed))
    end
    if not r[1] then
        local e, tb = r[2].err, r[2].tb
        if type(e) == "string" and e:find(SENTINEL, 1, true) then
            counts.by_fuzzer = counts.by_fuzzer + 1
        elseif type(e) ~= "string" then
            record_bug("unclear", key, desc, "raised a " .. type(e) .. ": " .. show(e), tb)
        elseif clear_message(e) then
            counts.arg_error = counts.arg_error + 1
        elseif e:find("attempt to ", 1, true) or e:find("has no member named", 1, true) then
            record_bug("internal", key, desc, e, tb)
        else
            record_bug("unclear", key, desc, e, tb)
        end
        return false
    end
    local v1, v2 = r[2], r[3]
    if r.n == 1 or (v1 == nil and v2 == nil) then
        if NIL_OK[key] or (r.n >= 2 and v1 ~= nil) then
            counts.ok = counts.ok + 1
        else
            record_bug("nil_no_code", key, desc, "returned nil without an error code")
        end
    elseif v1 == nil then
        if type(v2) == "string" and KNOWN_CODES[v2] then
            local kb = known_match("err", key, v2, oversize_args)
            if kb then
                count_known(kb)
            else
                counts.err = counts.err + 1
                codes[v2] = (codes[v2] or 0) + 1
            end
        else
            record_bug("bad_code", key, desc, "returned nil, " .. show(v2))
        end
    else
        counts.ok = counts.ok + 1
    end
    return true, pack(unpack(r, 2, r.n))
end

-- Expected perms string of an all-"world:anyone" ACL of one entry, or nil.
local function expected_perms(acl)
    if type(acl) ~= "table" or #acl ~= 1 or type(acl[1]) ~= "table" then return nil end
    local e = acl[1]
    if e.scheme ~= "world" or e.id ~= "anyone" then return nil end
    local set = {}
    if type(e.perms) == "string" then
        for ch in e.perms:gmatch(".") do set[ch] = true end
    elseif type(e.perms) == "number" and e.perms % 1 == 0 and e.perms >= 0 and e.perms <= 31 then
        local bits = { r = 1, w = 2, c = 4, d = 8, a = 16 }
        for ch, b in pairs(bits) do
            if floor(e.perms / b) % 2 == 1 then set[ch] = true end
        end
    else
        return nil
    end
    local out = {}
    for _, ch in ipairs({ "r", "w", "c", "d", "a" }) do
        if set[ch] then out[#out + 1] = ch end
    end
    return concat(out)
end

-- Read back what a successful write on the main client wrote.
local function oracle(key, args, res, desc)
    local c = main.c
    if key == "client.create" and res[1] and (type(res[1]) ~= "string" or res[1]:sub(1, 1) ~= "/") then
        record_bug("oracle", key, desc, "create returned the path " .. show(res[1])
                                        .. ": not a path inside the chroot")
        return
    end
    if key == "client.multi" and type(res[1]) == "table" then
        for _, r in ipairs(res[1]) do
            if type(r) == "table" and r.path ~= nil
                    and (type(r.path) ~= "string" or r.path:sub(1, 1) ~= "/") then
                record_bug("oracle", key, desc, "multi create returned the path " .. show(r.path)
                                                .. ": not a path inside the chroot")
                return
            end
        end
    end
    if res[1] and (key == "client.create" or key == "client.set_acl") then
        local acl = key == "client.create" and type(args[3]) == "table" and args[3].acl or args[2]
        local want = expected_perms(acl)
        if want and want ~= "" then
            local path = key == "client.create" and res[1] or args[1]
            local got = c:get_acl(path)
            if got and got[1] and got[1].perms ~= want then
                record_bug("oracle", key, desc, ("ACL perms %s read back as %s"):format(
                    want, tostring(got[1].perms)))
            end
        end
    end
    if res[1] and type(args[2]) == "string"
            and (key == "client.create" or key == "client.set") then
        local path = key == "client.create" and res[1] or args[1]
        local data = c:get(path)
        if data ~= nil and data ~= args[2] then
            record_bug("oracle", key, desc, ("wrote %d bytes, read back %d bytes"):format(
                #args[2], #data))
        end
    end
end

-- ---------------------------------------------------------------------------
-- Choosing calls.

local function call_client(rec, unbounded_call)
    oversize = false
    local names = {}
    for name in pairs(M.client) do
        if not (rec.main and CLOSES[name]) then
            names[#names + 1] = name
        end
    end
    table.sort(names)
    -- the writes and reads that reach the server, more often
    for _, name in ipairs({ "create", "create", "create", "set_acl", "set_acl", "multi", "get",
                            "set", "delete", "children" }) do
        names[#names + 1] = name
    end
    local name = pick(names)
    if unbounded_call then
        name = pick({ "dispatch", "lock", "barrier", "double_barrier", "semaphore", "election" })
    end
    local args = M.client[name](rec)
    local self = rec.c
    local fn = rec.c[name]
    if chance(0.04) then
        self = any_value()
        if CLOSES[name] and main and self == main.c then
            self = nil    -- a right self after all: closing the main client is no bug
        end
        wrong_self_calls = wrong_self_calls + 1
    end
    local key = "client." .. name
    local ok, res = run(key, fn, self, args, 0.5)
    if ok and self == rec.c then
        if MAKES[name] and type(res[1]) == "table" then
            add_object(MAKES[name], res[1], rec)
        elseif RETURNS[key] and type(res[1]) == "table" then
            add_object(RETURNS[key], res[1], rec)
        end
        if rec.main and not is_closed(rec) and (chance(0.3) or key == "client.create"
                                                 or key == "client.multi") then
            local ook, oerr = pcall(oracle, key, args, res, key .. "(" .. show_args(args) .. ")")
            if not ook then
                record_bug("oracle", key, key .. "(" .. show_args(args) .. ")",
                           "reading back failed: " .. tostring(oerr))
            end
        end
    end
end

call_object = function(o, bounded)
    oversize = false
    local ms = M[o.kind]
    local names = {}
    for name in pairs(ms) do
        -- K7: a counter add re-entered while the same counter writes waits
        -- for itself (see KNOWN): not from callbacks unless --known-bugs
        if not (bounded and o.kind == "counter" and not include.K7) then
            names[#names + 1] = name
        end
    end
    if #names == 0 then
        return
    end
    table.sort(names)
    local name = pick(names)
    local args = ms[name](not bounded and o.owner or nil)
    local fn = o.obj[name]
    local self = o.obj
    if chance(0.04) or type(fn) ~= "function" then
        self = any_value()
        wrong_self_calls = wrong_self_calls + 1
        -- the method itself, called on something else
        if type(fn) ~= "function" then
            return
        end
    end
    local key = o.kind .. "." .. name
    local rec = o.owner
    local where = rec and (" [on %s, %s%s]"):format(labels[rec.c] or rec.name, rec.c:state(),
                                                   rec.guarded and ", guarded" or "") or ""
    local ok, res = run(key, fn, self, args, 0.5, where)
    if ok and self == o.obj and RETURNS[key] and type(res[1]) == "table" then
        add_object(RETURNS[key], res[1], o.owner)
    end
end

local CONNECT_OPTS = {
    servers = function() return pick({ hosts, "127.0.0.1:1", "", {}, { hosts }, { 5 }, 5 }) end,
    session_timeout = function() return pick({ 2, 4, 0, -1, 0 / 0, 1e7, "4" }) end,
    connect_timeout = function() return pick({ 0.2, 0.05, 1e-300, 0, -1, 0 / 0, "1" }) end,
    request_timeout = function() return pick({ 1, 3, 0, -1, 0 / 0 }) end,
    chroot = function() return pick({ NS, NS .. "/a", "/", "/..", "x", NS .. "/", "/nonexistent" }) end,
    auth = function()
        return pick({ AUTH, { scheme = "digest", credentials = "x" }, { scheme = "bogus",
                      credentials = "u:p" }, {}, { 5 }, { scheme = 5 }, { AUTH, AUTH } })
    end,
    acl = gen_acl,
    retry = function()
        return pick({ {}, { max_tries = 2 }, { max_tries = 0 }, { max_tries = "x" },
                      { base_delay = -1 }, { max_delay = 0.01 } })
    end,
    wait = function() return pick({ "auto", "blocking", "ngx", "bogus", {} }) end,
    reconnect = bool,
    max_packet_size = function() return pick({ 1048575, 100, 0, -1, 0 / 0 }) end,
    logger = function() return pick({ logger, noop, raising, 5 }) end,
    zk_log_level = function() return pick({ 0, 1, -1, 5, 1.5, 0 / 0, "1" }) end,
    session_id = function() return pick({ "0123456789abcdef", "zz", "" }) end,
    session_password = function() return pick({ rep("p", 16), "short" }) end,
}

local function call_module()
    oversize = false
    if chance(0.3) then
        run("module.check_path", zkcoord.check_path, gen_path(),
            pack(pick({ "fuzz", nil, 5 }), pick({ 1, nil, "x" })))
        return
    end
    local o = gen_opts(CONNECT_OPTS)
    if type(o) == "table" and getmetatable(o) == nil then
        -- a reachable server must answer soon or not at all
        if o.servers == nil and chance(0.7) then o.servers = hosts end
        if o.connect_timeout == nil or (type(o.connect_timeout) == "number"
                                        and o.connect_timeout > 0.5) then
            o.connect_timeout = 0.3
        end
    end
    local ok, res = run("module.connect", zkcoord.connect, o, pack(), 1)
    if ok and type(res[1]) == "table" then
        local c = res[1]
        label(c, "connected")
        if chance(0.8) then
            c:close()
        end               -- else left to the garbage collector
    end
end

-- ---------------------------------------------------------------------------
-- Batches.

local health_ok, health_failed, health_retries = 0, 0, 0
local call_started, call_dumped   -- the watchdog's view of the current call
local victims, rotations, guard_closes = 0, 0, 0
local batch_no = 0

local function health()
    local ok, err = ensure_ns()
    if not ok then
        record_bug("health", "namespace", "admin create " .. NS, tostring(err))
        return
    end
    local c = main.c
    local steps = {}
    local p = "/_health-" .. batch_no
    local created, e1, data, e2, deleted, e3
    -- A connection dropped by an earlier oversize request (K9) may still be
    -- coming back: a round trip that fails on connectionloss is tried
    -- again, up to 3 times, once connected.
    for try = 1, 3 do
        local cok, cerr = c:wait_connected(10)
        steps[#steps + 1] = "wait_connected " .. tostring(cok) .. " " .. tostring(cerr)
        created, e1 = c:create(p, "hc")
        if created or e1 == "nodeexists" then
            data, e2 = c:get(p)
            deleted, e3 = c:delete(p)
        end
        c:dispatch(0)
        if created == p and data == "hc" and deleted == true then
            break
        end
        if try < 3 then
            health_retries = health_retries + 1
            c:delete(p)
        end
    end
    if created == p and data == "hc" and deleted == true then
        health_ok = health_ok + 1
    else
        health_failed = health_failed + 1
        record_bug("health", "client.roundtrip", main.name .. " state " .. c:state(),
                   ("create %s %s / get %s %s / delete %s %s / %s"):format(
                       tostring(created), tostring(e1), show(data), tostring(e2),
                       tostring(deleted), tostring(e3), concat(steps, ", ")))
        -- carry on with a fresh main client
        main.main = false
        main = assert(connect_record("main", true))
    end
end

local function new_victim()
    local extra = {}
    if chance(0.3) then
        extra.auth = pick({ nil, { scheme = "digest", credentials = "other:pw" } })
    end
    if chance(0.2) then extra.reconnect = false end
    if chance(0.2) then extra.acl = "creator_all" end
    local rec = connect_record("victim", false, extra)
    if rec then
        victims = victims + 1
        -- a few objects on it
        for _ = 1, rint(1, 4) do
            local name = pick({ "lock", "rwlock", "counter", "election", "semaphore", "barrier",
                                "double_barrier", "queue", "watch" })
            local path = good_path()
            local ok, obj = pcall(function()
                if name == "semaphore" then
                    return rec.c:semaphore(path, rint(1, 3))
                elseif name == "double_barrier" then
                    return rec.c:double_barrier(path, rint(1, 3))
                elseif name == "queue" then
                    return rec.c:queue(path, { marker = "m-", rule = queue.rule_first })
                elseif name == "watch" then
                    return rec.c:watch(path, counting, { timeout = 2 })
                end
                return rec.c[name](rec.c, path)
            end)
            if ok and obj then
                add_object(name, obj, rec)
            end
        end
    end
    return rec
end

-- Arms the guard: the victim closes on the ticker's next change.
local function guard(rec)
    if rec.guarded or is_closed(rec) then
        return
    end
    local c = rec.c
    local st = c:exists(TICK_NODE, function()
        guard_closes = guard_closes + 1
        trace_push("guard: close " .. (labels[c] or "?"))
        c:close()
        trace_pop()
    end)
    if st then
        rec.guarded = true
    end
end

-- Keeps one object of every kind in the pool (on the main client), so that
-- every method is called in a short run too.
local function stock()
    local have = {}
    for _, o in ipairs(objects) do have[o.kind] = true end
    local c = main.c
    local function make(kind, fn)
        if not have[kind] then
            local ok, obj = pcall(fn)
            if ok and type(obj) == "table" then add_object(kind, obj, main) end
        end
    end
    make("lock", function() return c:lock(good_path()) end)
    make("rwlock", function() return c:rwlock(good_path()) end)
    make("counter", function() return c:counter("/ctr/x") end)
    make("watch", function() return c:watch(good_path(), counting, { timeout = 2 }) end)
    make("election", function() return c:election(good_path()) end)
    make("semaphore", function() return c:semaphore("/sem/s", 3) end)
    make("barrier", function() return c:barrier(good_path()) end)
    make("double_barrier", function() return c:double_barrier(good_path(), 1) end)
    make("queue", function() return c:queue(good_path(), { marker = "m-", rule = queue.rule_first }) end)
    make("future", function() return c:send("exists", good_path()) end)
    make("lease", function() return c:semaphore("/sem/l", 1000):acquire(1) end)
end

local function one_call(victim)
    call_started, call_dumped = now(), false
    trace_depth = 0
    local r = rnd()
    if r < 0.33 then
        call_client(main)
    elseif r < 0.40 then
        call_module()
    elseif r < 0.52 and victim then
        call_client(victim)
    elseif #objects > 0 then
        call_object(pick(objects))
    else
        call_client(main)
    end
end

local t_start = now()
local deadline = t_start + opts.seconds

-- A call stuck in Lua code for a minute: its traceback goes to the trace
-- file (once per call), the run goes on. One stuck in C is not seen here:
-- the spec's time limit kills it and the trace shows the call.
call_started, call_dumped = now(), false
debug.sethook(function()
    if not call_dumped and now() - call_started > 60 then
        call_dumped = true
        trace_push("stuck for 60 s in:\n" .. debug.traceback("", 2))
        trace_pop()
    end
end, "", 100000)
main = assert(connect_record("main", true))
say(("fuzz: seed %d, namespace %s, servers %s%s"):format(seed, NS, hosts,
    opts.known_bugs and ", known-bug inputs included" or ""))

local function done()
    return calls >= opts.iterations or now() >= deadline
end

local MAX_BATCHES = 1e7
while batch_no < MAX_BATCHES and not done() do
    batch_no = batch_no + 1
    stock()
    local victim = new_victim()
    local guard_at = rint(1, opts.batch)
    for i = 1, opts.batch do
        if done() then break end
        if victim and i == guard_at and not is_closed(victim) then
            -- unbounded waits on the victim, ended by the guard
            guard(victim)
            if victim.guarded then
                for _ = 1, rint(1, 3) do
                    if chance(0.5) then
                        call_client(victim, true)
                    else
                        local mine = {}
                        for _, o in ipairs(objects) do
                            if o.owner == victim then mine[#mine + 1] = o end
                        end
                        if #mine > 0 then call_object(pick(mine)) end
                    end
                end
            end
        else
            one_call(victim)
        end
    end
    if victim and not is_closed(victim) then
        if chance(0.5) then
            run("client.close", victim.c.close, victim.c, pack())
        else
            victim.c:close()
        end
    end
    health()
    if batch_no % 25 == 0 then
        -- rotate: close the main client on purpose; its objects stay in the pool
        rotations = rotations + 1
        local old = main
        old.main = false
        main = assert(connect_record("main", true))
        old.c:close()
        collectgarbage()
    end
    if not opts.verbose and batch_no % 10 == 0 then
        say(("  %.0f s: %d calls, %d batches, %d bugs"):format(now() - t_start, calls, batch_no,
                                                               #bug_order))
    end
end
local elapsed = now() - t_start

-- Last: close the main client, then every object once more (after close).
local last = main
last.main = false
last.c:close()
for _, o in ipairs(objects) do
    call_object(o)
end
for _, rec in ipairs(clients) do
    if not is_closed(rec) then rec.c:close() end
end
main = connect_record("main", true) or main
health()
main.c:close()
collectgarbage()
collectgarbage()

-- Clean up the namespace (nodes with a restrictive ACL may stay).
local function delete_tree(path)
    local names = admin:children(path)
    for _, n in ipairs(names or {}) do
        delete_tree((path == "/" and "" or path) .. "/" .. n)
    end
    admin:delete(path)
end
delete_tree(NS)
local leftover = admin:exists(NS) and true or false
admin:close()
proc.kill(ticker_pid, "TERM")
proc.wait_exit(ticker_pid, 5)
if server then
    server:destroy()
end

-- ---------------------------------------------------------------------------
-- Report.

local nbugs = 0
for class in pairs(BUG_CLASSES) do nbugs = nbugs + counts[class] end
local missing = {}
for _, k in ipairs(ALL_KEYS) do
    if not coverage[k] then missing[#missing + 1] = k end
end

say(("fuzz: seed %d: %d calls in %.1f s (%.0f/s), %d batches, %d victims (%d closed by the "
     .. "guard), %d main clients rotated, %d wrong-self calls, %d from coroutines"):format(
    seed, calls, elapsed, calls / elapsed, batch_no, victims, guard_closes, rotations,
    wrong_self_calls, coroutine_calls))
local code_list = {}
for k, v in pairs(codes) do code_list[#code_list + 1] = k .. "=" .. v end
table.sort(code_list)
local known_list = {}
for k, v in pairs(known_hits) do known_list[#known_list + 1] = k .. "=" .. v end
table.sort(known_list)
for _, cls in ipairs({ "ok", "err", "arg_error", "by_fuzzer", "known_bug", "internal", "unclear",
                       "bad_code", "nil_no_code", "hang", "oracle", "health" }) do
    local extra = ""
    if cls == "err" then extra = "  " .. concat(code_list, " ") end
    if cls == "known_bug" then extra = "  " .. concat(known_list, " ") end
    say(("  %-12s %7d%s%s"):format(cls, counts[cls], BUG_CLASSES[cls] and " (bug)" or "", extra))
end
say(("  health checks: %d ok (%d retried), %d failed; logged: %d error, %d warn; %d nested calls")
    :format(health_ok, health_retries, health_failed, logged.error, logged.warn, nested_calls))
say(("  slowest call %.2f s: %s"):format(slowest.t, tostring(slowest.call)))
local known_sorted = {}
for i, k in ipairs(KNOWN) do known_sorted[i] = k end
table.sort(known_sorted, function(a, b) return tonumber(a.id:sub(2)) < tonumber(b.id:sub(2)) end)
for _, k in ipairs(known_sorted) do
    if known_hits[k.id] or k.avoided then
        local status
        if k.avoided and not include[k.id] then
            status = "still present (probe): inputs left out"
        elseif k.avoided and present[k.id] == false then
            status = "fixed (probe): inputs included"
        elseif k.avoided then
            status = "inputs included (--known-bugs)"
        else
            status = "x" .. known_hits[k.id]
        end
        say(("  known %s (%s) %s: %s"):format(k.id, k.where, status, k.what))
    end
end
say(("  coverage: %d of %d methods called%s"):format(#ALL_KEYS - #missing, #ALL_KEYS,
    #missing > 0 and (", missing: " .. concat(missing, " ")) or ""))
if leftover then
    say("  namespace ", NS, " not fully deleted (restrictive ACLs)")
end
for _, sig in ipairs(bug_order) do
    local b = bugs[sig]
    say(("BUG x%d [%s] %s\n    %s"):format(b.count, b.class, b.call, b.message))
end
say(nbugs == 0 and "fuzz: no new bug" or ("fuzz: %d new bug outcomes"):format(nbugs))

local function serialize(v, indent)
    indent = indent or ""
    local t = type(v)
    if t == "table" then
        local keys = {}
        for k in pairs(v) do keys[#keys + 1] = k end
        table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
        local out = { "{\n" }
        for _, k in ipairs(keys) do
            out[#out + 1] = ("%s  [%s] = %s,\n"):format(indent,
                type(k) == "number" and tostring(k) or format("%q", tostring(k)),
                serialize(v[k], indent .. "  "))
        end
        out[#out + 1] = indent .. "}"
        return concat(out)
    elseif t == "number" then
        if v ~= v or v == huge or v == -huge then return "0/0" end
        return format("%.17g", v)
    elseif t == "string" then
        return format("%q", v)
    end
    return tostring(v)
end

if opts.report then
    local list = {}
    for _, sig in ipairs(bug_order) do list[#list + 1] = bugs[sig] end
    local f = assert(io.open(opts.report, "w"))
    f:write("return ", serialize({
        seed = seed, calls = calls, seconds = elapsed, batches = batch_no, victims = victims,
        guard_closes = guard_closes, rotations = rotations, counts = counts, codes = codes,
        known = known_hits, still_present = present, bugs = list, new_bugs = nbugs, coverage = coverage,
        missing = missing, methods = #ALL_KEYS, health_ok = health_ok,
        health_failed = health_failed, health_retries = health_retries,
        wrong_self = wrong_self_calls, nested = nested_calls,
        slowest = slowest.t, slowest_call = slowest.call, finished = true,
    }), "\n")
    f:close()
end
if trace_file then
    trace_file:close()
end
os.exit(nbugs == 0 and 0 or 1)
