-- fuzz.driver: chooses the calls. One call goes to the main client, the
-- module (connect, check_path), the batch's victim client or an object of
-- the pool; a batch is --batch calls with, at a random point, unbounded
-- waits on the victim once its guard is armed; after a batch the victim is
-- closed, the main client health-checked, and every 25 batches replaced.
local zkcoord = require "zkcoord"
local S = require "fuzz.state"
local show = require "fuzz.show"
local V = require "fuzz.values"
local catalogue = require "fuzz.catalogue"
local classify = require "fuzz.classify"
local world = require "fuzz.world"

local type, pairs, ipairs, getmetatable = type, pairs, ipairs, getmetatable
local rep = string.rep
local now = zkcoord.now
local pick, chance, rint, pack = V.pick, V.chance, V.rint, V.pack
local M = catalogue.methods

local _M = {}

-- The writes and reads that reach the server, more often.
local OFTEN = { "create", "create", "create", "set_acl", "set_acl", "multi", "get", "set", "delete",
                "children" }
local UNBOUNDED = { "dispatch", "lock", "barrier", "double_barrier", "semaphore", "election" }

local function client_method(rec, unbounded_call)
    local names = {}
    for name, o in pairs(M.client) do
        if not (rec.main and o.closes) then
            names[#names + 1] = name
        end
    end
    table.sort(names)
    for _, name in ipairs(OFTEN) do
        names[#names + 1] = name
    end
    local name = pick(names)
    if unbounded_call then
        name = pick(UNBOUNDED)
    end
    return name
end

-- Something else as self. With a wait without bound in the arguments, not
-- the main client nor an object of the pool: those are not guarded, so the
-- wait would really last (dispatch(main, 86400) hung a CI run).
local function wrong_self(unbounded)
    for _ = 1, 100 do
        local v = V.any_value()
        local real = S.main and v == S.main.c
        for _, o in ipairs(S.objects) do
            real = real or v == o.obj
        end
        if not (unbounded and real) then
            return v
        end
    end
    return nil
end

function _M.call_client(rec, unbounded_call)
    S.oversize = false
    local name = client_method(rec, unbounded_call)
    local entry = M.client[name]
    local args = entry.args(rec)
    local self = rec.c
    local fn = rec.c[name]
    if chance(0.04) then
        self = wrong_self(unbounded_call or world.unbounded_ok(rec))
        if entry.closes and S.main and self == S.main.c then
            self = nil    -- a right self after all: closing the main client is no bug
        end
        S.wrong_self_calls = S.wrong_self_calls + 1
    end
    local key = "client." .. name
    local ok, res = classify.run(key, fn, self, args, 0.5)
    if ok and self == rec.c then
        if entry.yields and type(res[1]) == "table" then
            world.add_object(entry.yields, res[1], rec)
        end
        if rec.main and not world.is_closed(rec) and (chance(0.3) or key == "client.create"
                                                       or key == "client.multi") then
            classify.oracle(key, args, res)
        end
    end
end

function _M.call_object(o, bounded)
    S.oversize = false
    local ms = M[o.kind]
    local names = {}
    for name in pairs(ms) do
        -- K7: a counter add re-entered while the same counter writes waits
        -- for itself (see fuzz/known.lua): not from callbacks unless --known-bugs
        if not (bounded and o.kind == "counter" and not S.include.K7) then
            names[#names + 1] = name
        end
    end
    if #names == 0 then
        return
    end
    table.sort(names)
    local name = pick(names)
    local args = ms[name].args(not bounded and o.owner or nil)
    local fn = o.obj[name]
    local self = o.obj
    if chance(0.04) or type(fn) ~= "function" then
        self = wrong_self(not bounded and world.unbounded_ok(o.owner))
        S.wrong_self_calls = S.wrong_self_calls + 1
        -- the method itself, called on something else
        if type(fn) ~= "function" then
            return
        end
    end
    local key = o.kind .. "." .. name
    local rec = o.owner
    local where = rec and (" [on %s, %s%s]"):format(show.labels[rec.c] or rec.name, rec.c:state(),
                                                   rec.guarded and ", guarded" or "") or ""
    local ok, res = classify.run(key, fn, self, args, 0.5, where)
    local yields = ms[name].yields
    if ok and self == o.obj and yields and type(res[1]) == "table" then
        world.add_object(yields, res[1], o.owner)
    end
end

local CONNECT_OPTS = {
    servers = function() return pick({ S.hosts, "127.0.0.1:1", "", {}, { S.hosts }, { 5 }, 5 }) end,
    session_timeout = function() return pick({ 2, 4, 0, -1, 0 / 0, 1e7, "4" }) end,
    connect_timeout = function() return pick({ 0.2, 0.05, 1e-300, 0, -1, 0 / 0, "1" }) end,
    request_timeout = function() return pick({ 1, 3, 0, -1, 0 / 0 }) end,
    chroot = function()
        return pick({ S.ns, S.ns .. "/a", "/", "/..", "x", S.ns .. "/", "/nonexistent" })
    end,
    auth = function()
        return pick({ S.auth, { scheme = "digest", credentials = "x" }, { scheme = "bogus",
                      credentials = "u:p" }, {}, { 5 }, { scheme = 5 }, { S.auth, S.auth } })
    end,
    acl = V.gen_acl,
    retry = function()
        return pick({ {}, { max_tries = 2 }, { max_tries = 0 }, { max_tries = "x" },
                      { base_delay = -1 }, { max_delay = 0.01 } })
    end,
    wait = function() return pick({ "auto", "blocking", "ngx", "bogus", {} }) end,
    reconnect = V.bool,
    max_packet_size = function() return pick({ 1048575, 100, 0, -1, 0 / 0 }) end,
    logger = function() return pick({ S.logger, V.noop, V.raising, 5 }) end,
    zk_log_level = function() return pick({ 0, 1, -1, 5, 1.5, 0 / 0, "1" }) end,
    session_id = function() return pick({ "0123456789abcdef", "zz", "" }) end,
    session_password = function() return pick({ rep("p", 16), "short" }) end,
}

function _M.call_module()
    S.oversize = false
    if chance(0.3) then
        classify.run("module.check_path", zkcoord.check_path, V.gen_path(),
                     pack(pick({ "fuzz", nil, 5 }), pick({ 1, nil, "x" })))
        return
    end
    local o = V.gen_opts(CONNECT_OPTS)
    if type(o) == "table" and getmetatable(o) == nil then
        -- a reachable server must answer soon or not at all
        if o.servers == nil and chance(0.7) then o.servers = S.hosts end
        if o.connect_timeout == nil or (type(o.connect_timeout) == "number"
                                        and o.connect_timeout > 0.5) then
            o.connect_timeout = 0.3
        end
    end
    local ok, res = classify.run("module.connect", zkcoord.connect, o, pack(), 1)
    if ok and type(res[1]) == "table" then
        local c = res[1]
        show.label(c, "connected")
        if chance(0.8) then
            c:close()
        end               -- else left to the garbage collector
    end
end

-- ---------------------------------------------------------------------------
-- Batches.

local call_started, call_dumped   -- the watchdog's view of the current call

local function one_call(victim)
    call_started, call_dumped = now(), false
    show.trace_reset()
    local r = V.rnd()
    if r < 0.33 then
        _M.call_client(S.main)
    elseif r < 0.40 then
        _M.call_module()
    elseif r < 0.52 and victim then
        _M.call_client(victim)
    elseif #S.objects > 0 then
        _M.call_object(pick(S.objects))
    else
        _M.call_client(S.main)
    end
end

-- A call stuck in Lua code for a minute: its traceback goes to the trace
-- file (once per call), the run goes on. One stuck in C is not seen here:
-- the spec's time limit kills it and the trace shows the call.
function _M.start_watchdog()
    call_started, call_dumped = now(), false
    debug.sethook(function()
        if not call_dumped and now() - call_started > 60 then
            call_dumped = true
            show.trace_push("stuck for 60 s in:\n" .. debug.traceback("", 2))
            show.trace_pop()
        end
    end, "", 100000)
end

-- Unbounded waits on the victim, ended by the guard.
local function unbounded_calls(victim)
    world.guard(victim)
    if not victim.guarded then
        return
    end
    for _ = 1, rint(1, 3) do
        if chance(0.5) then
            _M.call_client(victim, true)
        else
            local mine = {}
            for _, o in ipairs(S.objects) do
                if o.owner == victim then mine[#mine + 1] = o end
            end
            if #mine > 0 then _M.call_object(pick(mine)) end
        end
    end
end

--- One batch; `done()` says when the run is over.
function _M.batch(done)
    S.batch_no = S.batch_no + 1
    world.stock()
    local victim = world.new_victim()
    local guard_at = rint(1, S.opts.batch)
    for i = 1, S.opts.batch do
        if done() then break end
        if victim and i == guard_at and not world.is_closed(victim) then
            unbounded_calls(victim)
        else
            one_call(victim)
        end
    end
    if victim and not world.is_closed(victim) then
        if chance(0.5) then
            classify.run("client.close", victim.c.close, victim.c, pack())
        else
            victim.c:close()
        end
    end
    world.health(classify.record_bug)
    if S.batch_no % 25 == 0 then
        -- rotate: close the main client on purpose; its objects stay in the pool
        S.rotations = S.rotations + 1
        local old = S.main
        old.main = false
        S.main = assert(world.connect_record("main", true))
        old.c:close()
        collectgarbage()
    end
end

--- The last round: the main client closed, then every object called once
--- more (after close), every client closed, a last health check.
function _M.finish()
    local last = S.main
    last.main = false
    last.c:close()
    for _, o in ipairs(S.objects) do
        _M.call_object(o)
    end
    for _, rec in ipairs(S.clients) do
        if not world.is_closed(rec) then rec.c:close() end
    end
    S.main = world.connect_record("main", true) or S.main
    world.health(classify.record_bug)
    S.main.c:close()
    collectgarbage()
    collectgarbage()
end

return _M
