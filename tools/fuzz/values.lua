-- fuzz.values: the random arguments. Every Lua type, edge-case paths and
-- data sizes, timeouts bounded or not (see unbounded below), callbacks that
-- raise, close a client or call back into it, ACLs, options tables with
-- unknown keys or wrong types, multi ops, the recipes' options. Inputs of a
-- known hang or crash (fuzz/known.lua) are left out while S.include says so.
local ffi = require "ffi"
local zkcoord = require "zkcoord"
local queue = require "zkcoord.queue"
local S = require "fuzz.state"
local show = require "fuzz.show"

local type, select, unpack = type, select, unpack
local huge = math.huge
local rep, concat = string.rep, table.concat

local _M = {}

local function rnd() return S.rng:float() end
local function rint(a, b) return S.rng:int(a, b) end
local function pick(t) return S.rng:pick(t) end
local function chance(p) return S.rng:chance(p) end
_M.rnd, _M.rint, _M.pick, _M.chance = rnd, rint, pick, chance

local function pack(...)
    return { n = select("#", ...), ... }
end
_M.pack = pack

local poison = setmetatable({}, { __index = function(_, k)
    error(S.SENTINEL .. ": __index " .. tostring(k))
end })
show.label(poison, "poisoned-table")
local cyclic = {}
cyclic.self = cyclic
cyclic[1] = cyclic
show.label(cyclic, "cyclic-table")
local ud = newproxy(true)
show.label(ud, "userdata")
local co = coroutine.create(function() end)
show.label(co, "coroutine")
local i64 = ffi.new("int64_t", 7)
local nullp = ffi.new("void *")

local fn_counts = { noop = 0, count = 0 }
local function noop() end
local function counting() fn_counts.count = fn_counts.count + 1 end
local function raising() error(S.SENTINEL .. ": callback raised") end
local function nested()
    -- calls back into the main client from inside a callback
    local m = S.main and S.main.c
    if m and m:state() ~= "closed" then
        show.trace_push("callback fn:nested: main:exists('/a')")
        pcall(m.exists, m, "/a")
        show.trace_pop()
    end
end
show.label(noop, "fn:noop"); show.label(counting, "fn:count"); show.label(raising, "fn:raising")
show.label(nested, "fn:nested")

local BIG = rep("z", 2 * 1024 * 1024 + 64)
local LONG_NAME = rep("n", 2000)
local HUGE_PATH = "/" .. rep("p", 1100000)
local DEEP = rep("/d", 200)

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
    elseif r == 8 then return S.include.K1 and huge or 1e15
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
    elseif r == 31 then return S.main and S.main.c
    elseif r == 32 then local o = #S.objects > 0 and pick(S.objects); return o and o.obj
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
        if resent and not S.include.K15 then
            return good_path()
        end
        S.oversize = true
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
        local n = LIMIT - 32 - #S.ns - plen - 4 - 23 + rint(-3, 3)
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
-- Finite but far away: the wait ends only by what it waits for, or the guard
-- (600 and below); above 600 a call of the API refuses it (milliseconds by
-- mistake) and a waiter's primitive takes it.
local UNBOUNDED_T = { 600, 599.5, 1e10, 2 ^ 53, 1e18, 86400 }

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
        if S.include.K1 and chance(0.3) then
            return pick(HUGE)
        elseif (S.include.K1 or unbounded == "closed") and chance(0.4) then
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
    elseif S.include.K1 and chance(0.3) then
        return pick(HUGE)
    end
    return pick({ 1e10, 2 ^ 53, 5 })
end

-- A callback or spawned task that calls a random method of a random object
-- (bounded arguments), one level deep: callbacks run inside other calls.
local function nested_object()
    if S.nesting > 0 or #S.objects == 0 then
        return
    end
    S.nesting = S.nesting + 1
    S.nested_calls = S.nested_calls + 1
    local ok, err = pcall(require("fuzz.driver").call_object, pick(S.objects), true)
    S.nesting = S.nesting - 1
    if not ok then
        error(err, 0)
    end
end
show.label(nested_object, "fn:nested-object")

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
            show.trace_push("callback: close " .. name)
            c:close()
            show.trace_pop()
        end
        return show.label(f, "fn:close-" .. rec.name)
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
        if not S.include.K8 and type(op) == "table" and getmetatable(op) == nil then
            if control_chars(op.path) then op.path = good_path() end
            if control_chars(op[2]) then op[2] = good_path() end
        end
        ops[i] = op
    end
    if chance(0.05) then
        -- big data in several ops: together above the request limit
        ops = {}
        S.oversize = true
        for i = 1, 3 do
            ops[i] = { op = "create", path = "/big" .. i, data = BIG:sub(1, 500000) }
        end
    end
    return ops
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
                    function() error(S.SENTINEL .. ": rule raised") end, noop, "rule" }
    local o = {
        marker = pick({ "m-", "lock-", "", "x-", 5, nil }),
        markers = chance(0.2) and pick({ { "m-", "x-" }, { 5 }, {}, "m-" }) or nil,
        rule = pick(rules),
        data = chance(0.3) and gen_data("/q") or nil,
        parents = chance(0.2) and pick({ "persistent", "container", 5 }) or nil,
    }
    -- K12: our own marker missing from `markers` makes enter() loop for ever
    if not S.include.K12 and type(o.markers) == "table" and type(o.marker) == "string" then
        o.markers = { o.marker, unpack(o.markers) }
    end
    return o
end

_M.noop, _M.counting, _M.raising = noop, counting, raising
_M.cyclic = cyclic
_M.any_value, _M.good_path, _M.gen_path, _M.gen_data, _M.gen_version = any_value, good_path,
    gen_path, gen_data, gen_version
_M.gen_timeout, _M.gen_soft_timeout, _M.gen_fn, _M.gen_acl, _M.gen_opts, _M.bool = gen_timeout,
    gen_soft_timeout, gen_fn, gen_acl, gen_opts, bool
_M.gen_create_opts, _M.gen_multi = gen_create_opts, gen_multi
_M.gen_lock_opts, _M.gen_counter_opts, _M.gen_queue_opts = gen_lock_opts, gen_counter_opts,
    gen_queue_opts
_M.nested_object = nested_object

return _M
