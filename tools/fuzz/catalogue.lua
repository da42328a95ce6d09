-- fuzz.catalogue: every operation the fuzzer calls, in one place: for each
-- kind of object (the client, what its constructors return, futures,
-- leases), each method with how to make its arguments and what the fuzzer
-- must know of its results:
--
--   name = op(args, { nil_ok = true,       -- documented to return nil alone in some state
--                     yields = "kind",     -- its first result is an object of that kind
--                     closes = true,       -- closes its client (never on the main one)
--                     lua_name_too = true }) -- see OUR_NAMES below
--
-- args(rec) returns the packed arguments (rec: the client record the call
-- runs on, nil for a call from a callback: bounded arguments only). From
-- this table come the coverage list, the methods allowed to return nil, the
-- objects kept for later calls, and the names a clear "bad argument #n to
-- '<name>'" may carry: adding a method is one line here.
local V = require "fuzz.values"
local world = require "fuzz.world"

local type, pairs, unpack, rawget = type, pairs, unpack, rawget
local huge = math.huge

local pick, chance, pack = V.pick, V.chance, V.pack
local gen_path, gen_data, gen_version, gen_fn, gen_acl, gen_opts, bool = V.gen_path, V.gen_data,
    V.gen_version, V.gen_fn, V.gen_acl, V.gen_opts, V.bool
local gen_timeout, gen_soft_timeout, any_value, counting = V.gen_timeout, V.gen_soft_timeout,
    V.any_value, V.counting
local unbounded_ok = world.unbounded_ok

local _M = {}

local function op(args, meta)
    meta = meta or {}
    meta.args = args
    return meta
end

local function none() return pack() end
local function timeout_arg()
    return function(rec) return pack(gen_timeout(unbounded_ok(rec))) end
end
local function fn_arg(rec) return pack(gen_fn(rec)) end

local M = {}
_M.methods = M

M.client = {
    create = op(function()
        local p = gen_path()
        return pack(p, gen_data(p), V.gen_create_opts())
    end, { lua_name_too = true }),
    get = op(function(rec) return pack(gen_path(), chance(0.3) and gen_fn(rec) or nil) end),
    set = op(function() local p = gen_path(); return pack(p, gen_data(p), gen_version()) end),
    delete = op(function() return pack(gen_path(), chance(0.3) and gen_version() or nil) end),
    exists = op(function(rec) return pack(gen_path(), chance(0.3) and gen_fn(rec) or nil) end),
    children = op(function(rec) return pack(gen_path(), chance(0.3) and gen_fn(rec) or nil) end),
    multi = op(function() return pack(V.gen_multi()) end),
    sync = op(function() return pack(gen_path()) end),
    get_acl = op(function() return pack(gen_path()) end),
    set_acl = op(function()
        local p = gen_path()
        if p == "/" then p = "/a" end   -- the namespace root keeps its ACL
        return pack(p, gen_acl(), chance(0.3) and gen_version() or nil)
    end),
    send = op(function(rec)
        local name = pick({ "create", "get", "set", "delete", "exists", "children", "multi", "sync",
                            "get_acl", "set_acl", "bogus", 5, "remove_watch", "__index" })
        local gen = type(name) == "string" and rawget(M.client, name)
        if gen and name ~= "send" then
            local a = gen.args(rec)
            if name == "set_acl" and a[1] == "/" then a[1] = "/a" end
            return pack(name, unpack(a, 1, a.n))
        end
        return pack(name, gen_path())
    end, { yields = "future" }),
    remove_watches = op(function(rec) return pack(gen_path(), chance(0.5) and gen_fn(rec) or nil) end),
    delete_guaranteed = op(function()
        return pack(gen_path(true), chance(0.3) and gen_version() or nil,
                    chance(0.3) and bool() or nil)
    end),
    dispatch = op(function(rec) return pack(gen_timeout(unbounded_ok(rec))) end),
    on_state = op(function(rec) return pack(gen_fn(rec)) end),
    remove_listener = op(function(rec) return pack(gen_fn(rec)) end),
    wait_connected = op(function() return pack(gen_soft_timeout()) end),
    log = op(function()
        return pack(pick({ "error", "warn", "info", "debug", 5, nil }), any_value())
    end, { nil_ok = true, lua_name_too = true }),
    state = op(none),
    session_id = op(none, { nil_ok = true }),
    session_password = op(none, { nil_ok = true }),
    session_timeout = op(none),
    fd = op(none),
    process = op(none, { nil_ok = true }),
    stats = op(none),
    waiter = op(none),
    close = op(none, { closes = true }),
    spawn = op(function(rec)
        return pack(chance(0.7) and V.nested_object or gen_fn(rec), any_value())
    end),
    run = op(function(rec) return pack(gen_timeout(unbounded_ok(rec))) end),
    lock = op(function() return pack(gen_path(true), V.gen_lock_opts()) end, { yields = "lock" }),
    rwlock = op(function()
        return pack(gen_path(true), gen_opts({ owner = function() return pick({ "o1", "o2" }) end,
                                           data = function() return gen_data("/lk") end }))
    end, { yields = "rwlock" }),
    counter = op(function(rec)
        return pack(gen_path(true), V.gen_counter_opts(unbounded_ok(rec)))
    end, { yields = "counter" }),
    watch = op(function(rec)
        return pack(gen_path(true), chance(0.9) and counting or gen_fn(rec),
                    gen_opts({ kind = function() return pick({ "data", "children", "x", 5 }) end,
                               timeout = gen_soft_timeout }))
    end, { yields = "watch" }),
    election = op(function()
        return pack(gen_path(true), gen_opts({ id = function() return gen_data("/el") end }))
    end, { yields = "election" }),
    semaphore = op(function()
        return pack(gen_path(true), pick({ 1, 2, 3, 0, -1, 1.5, 0 / 0, huge, 2147483647, "2", nil }),
                    gen_opts({ data = function() return gen_data("/sem") end }))
    end, { yields = "semaphore" }),
    barrier = op(function() return pack(gen_path(true)) end, { yields = "barrier" }),
    double_barrier = op(function(rec)
        local n = unbounded_ok(rec) and pick({ 1, 2, 3, 2 ^ 31 }) or pick({ 1, 2 })
        return pack(gen_path(true), chance(0.8) and n or pick({ 0, -1, 1.5, 0 / 0, huge, "2" }),
                    gen_opts({ id = function() return gen_data("/db") end }))
    end, { yields = "double_barrier" }),
    queue = op(function() return pack(gen_path(true), V.gen_queue_opts()) end, { yields = "queue" }),
}

M.future = { wait = op(function() return pack(gen_soft_timeout()) end),
             on_done = op(fn_arg, { yields = "future" }) }
M.lock = { acquire = op(timeout_arg()), release = op(none), held = op(none), token = op(none),
           node = op(none, { nil_ok = true }), count = op(none), on_lost = op(fn_arg),
           contenders = op(none) }
M.rwlock = { read_lock = op(none, { yields = "lock" }), write_lock = op(none, { yields = "lock" }),
             contenders = op(none) }
M.counter = {
    get = op(none),
    add = op(function() return pack(pick({ 1, -1, 0, 5, 2 ^ 53, 1.5, 0 / 0, huge, "1", nil, {} })) end),
    set = op(function() return pack(pick({ 0, 1, -5, 2 ^ 53, 2 ^ 53 - 1, 1.5, 0 / 0, "1", nil })) end),
    compare_and_set = op(function()
        return pack(pick({ 0, 1, 2, 1.5, nil, "0" }), pick({ 1, 2, 3, 2 ^ 60, nil }))
    end),
    stats = op(none),
}
M.watch = { cancel = op(none), is_active = op(none) }
M.election = { campaign = op(timeout_arg()), resign = op(none), is_leader = op(none),
               leader = op(none, { nil_ok = true }), participants = op(none),
               on_elected = op(fn_arg), on_lost = op(fn_arg), token = op(none) }
M.semaphore = { acquire = op(timeout_arg(), { yields = "lease" }), leases = op(none),
                participants = op(none) }
M.lease = { release = op(none), held = op(none), node = op(none, { nil_ok = true }),
            on_lost = op(fn_arg), token = op(none) }
M.barrier = { create = op(none), remove = op(none), is_set = op(none), wait = op(timeout_arg()) }
M.double_barrier = { enter = op(timeout_arg()), leave = op(timeout_arg()), participants = op(none) }
M.queue = { enter = op(timeout_arg()), leave = op(none), interrupt = op(none),
            entries = op(none), is_through = op(none),
            node = op(none, { nil_ok = true }), seq = op(none, { nil_ok = true }),
            stat = op(none, { nil_ok = true }), on_lost = op(fn_arg, { nil_ok = true }),
            token = op(none), watch_line = op(fn_arg) }

-- The module's own functions (driver.lua calls them), and the names its
-- helpers are called under: check_path(path, "fuzz", 1) raises as 'fuzz'.
_M.MODULE = { "connect", "check_path" }
local OTHER_NAMES = { "line.new", "rules.fewer_than", "fuzz" }

-- Derived: "kind.name" -> true for the methods allowed to return nil alone.
_M.NIL_OK = {}
-- Derived: "kind.name" -> kind of the object its first result is.
_M.YIELDS = {}
-- Derived: every "kind.name", sorted, for coverage.
_M.ALL_KEYS = {}
for _, name in ipairs(_M.MODULE) do
    _M.ALL_KEYS[#_M.ALL_KEYS + 1] = "module." .. name
end
for kind, ms in pairs(M) do
    for name, o in pairs(ms) do
        local key = kind .. "." .. name
        _M.ALL_KEYS[#_M.ALL_KEYS + 1] = key
        _M.NIL_OK[key] = o.nil_ok or nil
        _M.YIELDS[key] = o.yields
    end
end
table.sort(_M.ALL_KEYS)

-- Derived: the function names a clear "bad argument #n to 'name'" may
-- carry: every method name above, the module's functions and OTHER_NAMES.
-- A name Lua's own libraries use too ('remove', 'close', ...) could be a raw
-- error of a library call inside zkcoord, an internal bug: it counts only
-- when its entry says lua_name_too (the method does raise under that name).
local LUA_NAMES = {}
for _, lib in ipairs({ _G, string, table, math, io, os, coroutine, debug, package }) do
    for name, v in pairs(lib) do
        if type(v) == "function" then LUA_NAMES[name] = true end
    end
end
_M.OUR_NAMES = {}
for _, name in ipairs(_M.MODULE) do _M.OUR_NAMES[name] = true end
for _, name in ipairs(OTHER_NAMES) do _M.OUR_NAMES[name] = true end
for _, ms in pairs(M) do
    for name, o in pairs(ms) do
        if not LUA_NAMES[name] or o.lua_name_too then
            _M.OUR_NAMES[name] = true
        end
    end
end

return _M
