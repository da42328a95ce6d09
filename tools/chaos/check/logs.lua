-- chaos.check.logs: reads what a chaos run left in its directory into the
-- checker's record R: the driver's log (faults, spawns, kills, the final
-- listing and counter) and each contender's log (its operations: try, the
-- outcome, writes, notices of a lost lock; its connection states, orphan
-- checks, raises, exit). The rules (chaos/check/rules.lua) judge them.
local util = require "chaos.util"

local tonumber, tostring, ipairs = tonumber, tostring, ipairs

local _M = {}

local function list_dir(dir)
    local p = io.popen("ls -1 '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
    local out = {}
    if p then
        for l in p:lines() do out[#out + 1] = l end
        p:close()
    end
    return out
end

local function read_lines(path)
    local f = io.open(path, "r")
    if not f then
        return {}
    end
    local out = {}
    for l in f:lines() do out[#out + 1] = l end
    f:close()
    return out
end

local num = tonumber

-- A completed fault: indexed by target, and kills and pauses by process key.
local function add_fault(R, kv)
    local f = { kind = kv.kind, target = num(kv.target), inc = num(kv.inc),
                from = num(kv.from), to = num(kv.to), kv = kv }
    R.faults[#R.faults + 1] = f
    if not f.target then
        return
    end
    R.by_target[f.target] = R.by_target[f.target] or {}
    local l = R.by_target[f.target]
    l[#l + 1] = f
    local key = f.target .. "." .. tostring(f.inc)
    if f.kind == "kill_contender" then
        R.killed[key] = f.from
    elseif f.kind == "pause_contender" then
        R.paused[key] = R.paused[key] or {}
        local p = R.paused[key]
        p[#p + 1] = { f.from, f.to }
    end
end

--- DIR/driver.log: R.cfg, faults, by_target (contender id -> faults),
--- killed and stuck ("id.inc" -> time), paused ("id.inc" -> { {from, to} }),
--- died, final_nodes / final_names / final_counter, driver_error, spawns.
function _M.read_driver(R)
    R.cfg, R.faults, R.by_target, R.killed, R.stuck, R.paused, R.died = {}, {}, {}, {}, {}, {}, {}
    R.spawns = 0
    R.driver_events = {}      -- every line: { t =, ev =, kv = } (the recipes' checkers)
    for _, line in ipairs(read_lines(R.dir .. "/driver.log")) do
        local t, ev, kv = util.parse_line(line)
        if t then
            R.driver_events[#R.driver_events + 1] = { t = t, ev = ev, kv = kv }
        end
        if ev == "config" then
            R.cfg = kv
        elseif ev == "fault" then
            add_fault(R, kv)
        elseif ev == "stuck" then
            R.stuck[kv.target .. "." .. kv.inc] = t
        elseif ev == "died" then
            R.died[#R.died + 1] = kv.target .. "." .. kv.inc
        elseif ev == "final_nodes" then
            R.final_nodes, R.final_names = num(kv.count), kv.names
        elseif ev == "final_counter" then
            R.final_counter = num(kv.value)
        elseif ev == "driver_error" then
            R.driver_error = kv.msg
        elseif ev == "spawn" then
            R.spawns = R.spawns + 1
        end
    end
    R.st = num(R.cfg.st) or 4
    -- Runs from before --recipes covered the lock, rwlock and counter.
    R.recipes = {}
    for name in (R.cfg.recipes or "lock,rwlock,counter"):gmatch("[^,]+") do
        R.recipes[#R.recipes + 1] = name
        R.recipes[name] = true
    end
end

-- Events of a contender's log that concern one operation `o` (the n= of
-- the line): handler(o, t, kv, P).
local OP_EVENTS = {
    enter = function(o, t, kv, P)
        o.out, o.out_t, o.enter_t, o.token = "enter", t, t, num(kv.token)
        P.last_grant[o.op] = o
    end,
    fail = function(o, t, kv)
        o.out, o.out_t, o.err = "fail", t, kv.err
        o.ambiguous = kv.ambiguous == "1"
    end,
    ack = function(o, t, kv)
        o.out, o.out_t, o.value = "ack", t, num(kv.value)
    end,
    write = function(o, t, kv)
        o.writes[#o.writes + 1] = { t = num(kv.rt) or t, res = kv.res, token = num(kv.token) }
    end,
    heldfalse = function(o, t)
        o.noticed = o.noticed or t
        o.notice = o.notice or "heldfalse"
    end,
    fenced = function(o, t)
        o.fenced = o.fenced or t
    end,
    still_held = function(o, t)
        o.still_held = t
    end,
    leave = function(o, t)
        o.leave_t = t
    end,
    release = function(o, t, kv)
        o.released, o.release_err = true, kv.err
        if kv.err == "lost" then
            o.noticed = o.noticed or t
            o.notice = o.notice or "release:lost"
        end
    end,
}

-- Events of the process as a whole: handler(R, P, t, kv).
local PROC_EVENTS = {
    start = function(_, P, _, kv)
        P.pid = num(kv.pid)
    end,
    try = function(R, P, t, kv)
        local n = num(kv.n)
        local o = { key = P.key, id = P.id, inc = P.inc, n = n, op = kv.op, try_t = t,
                    timeout = num(kv.timeout), writes = {}, kv = kv }
        P.ops[n] = o
        P.order[#P.order + 1] = o
        R.all_ops[#R.all_ops + 1] = o
    end,
    lost = function(_, P, t, kv)
        local g = P.last_grant[kv.op]
        if g and (num(kv.token) == nil or num(kv.token) == g.token) then
            g.noticed = g.noticed or t
            g.notice = g.notice or ("on_lost:" .. tostring(kv.reason))
        end
    end,
    state = function(_, P, t, kv)
        P.states[#P.states + 1] = { t = t, new = kv.new }
    end,
    orphan = function(R, P, t, kv)
        local node = tostring(kv.path) .. "/" .. tostring(kv.node)
        local orph = R.orphans[node]
        if not orph then
            orph = { node = node, key = P.key, sid = kv.sid, first = t, seen = 0 }
            R.orphans[node] = orph
            R.orphan_list[#R.orphan_list + 1] = orph
        end
        orph.seen, orph.last = orph.seen + 1, t
    end,
    orphan_check = function(R)
        R.orphan_checks = R.orphan_checks + 1
    end,
    raise = function(_, P, _, kv)
        P.raises[#P.raises + 1] = kv.msg
    end,
    exit = function(_, P)
        P.exited = true
    end,
}

local function read_contender(R, name, id, inc)
    local key = id .. "." .. inc
    local P = { key = key, id = id, inc = inc, ops = {}, order = {}, states = {},
                raises = {}, exited = false, last_t = 0,
                last_grant = {},      -- op -> op record of the latest grant
                events = {} }         -- every line: { t =, ev =, kv = } (the recipes' checkers)
    R.procs[key] = P
    for _, line in ipairs(read_lines(R.dir .. "/" .. name)) do
        local t, ev, kv = util.parse_line(line)
        if t then
            P.first_t = P.first_t or t
            P.last_t = t
            P.events[#P.events + 1] = { t = t, ev = ev, kv = kv }
            local n = num(kv.n)
            local o = n and P.ops[n]
            if PROC_EVENTS[ev] then
                PROC_EVENTS[ev](R, P, t, kv)
            elseif o and OP_EVENTS[ev] then
                OP_EVENTS[ev](o, t, kv, P)
            end
        end
    end
end

--- DIR/c<ID>.<INC>.log, every one: R.procs ("id.inc" -> process record:
--- ops by n, order, states, raises, exited, last_t, pid), all_ops,
--- orphans / orphan_list, orphan_checks.
function _M.read_contenders(R)
    R.procs, R.all_ops, R.orphans, R.orphan_list, R.orphan_checks = {}, {}, {}, {}, 0
    for _, name in ipairs(list_dir(R.dir)) do
        local id, inc = name:match("^c(%d+)%.(%d+)%.log$")
        if id then
            read_contender(R, name, tonumber(id), tonumber(inc))
        end
    end
end

return _M
