-- tools/chaos/contender.lua: one contender process of the chaos run.
--
--   luajit tools/chaos/contender.lua ID INC DIR SERVERS SESSION_TIMEOUT SEED HARD_DEADLINE \
--                                    [RECIPES]
--
-- Loops until DIR/stop exists (or the monotonic time HARD_DEADLINE passes),
-- mixing the recipes of RECIPES (chaos/recipes.lua; default all): the lock
-- /chaos/lock (acquire with a timeout, a critical section that writes its
-- fencing token to the resource DIR/lock.res, release); the read or write
-- side of the rwlock /chaos/rw (writers write their token to DIR/rw.res);
-- counter /chaos/counter add(1); the others as their part
-- chaos/recipe/<name>.lua says (it gets the context `ctx` below).
-- Everything goes to DIR/c<ID>.<INC>.log (see tools/chaos/check.lua for the events), with
-- zkcoord.now() (CLOCK_MONOTONIC, comparable across processes).
--
-- The driver talks to us through files: DIR/c<ID>.session is where we
-- publish our session (id, password in hex) for the driver's session expiry;
-- DIR/c<ID>.hold asks for a long hold of the lock, and while we hold it so we
-- say so in DIR/c<ID>.holding (the driver SIGSTOPs a holder then).
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local root = here:match("^(.*)/tools/chaos$") or (here == "tools/chaos" and ".") or here .. "/../.."
package.path = root .. "/spec/?.lua;" .. package.path
require("helpers.tool").paths(root)

local zkcoord = require "zkcoord"
local proc = require "helpers.proc"
local util = require "chaos.util"
local resource = require "chaos.resource"
local recipes = require "chaos.recipes"

local id, inc, dir, servers, st, seed, hard, recipe_list = ...
local enabled = {}
for _, name in ipairs(recipes.parse(recipe_list)) do enabled[name] = true end
id, inc, st = tonumber(id), tonumber(inc), tonumber(st)
hard = tonumber(hard) or (zkcoord.now() + 3600)
assert(id and inc and dir and servers and st, "usage: contender.lua ID INC DIR SERVERS ST SEED HARD")

local now = zkcoord.now
local rng = util.rng((tonumber(seed) or 1) * 7919 + id * 104729 + inc)
local log = util.logger(("%s/c%d.%d.log"):format(dir, id, inc), now)
local me = ("c%d.%d"):format(id, inc)
local stop_file = dir .. "/stop"
local hold_file = ("%s/c%d.hold"):format(dir, id)
local holding_file = ("%s/c%d.holding"):format(dir, id)
local session_file = ("%s/c%d.session"):format(dir, id)

local LOCK, RW, COUNTER = "/chaos/lock", "/chaos/rw", "/chaos/counter"
local TIMEOUTS = { 0, 0.5, 1, 2, 3, 5 }
local MAX_STEPS = 5000
local MAX_HOLD = 40

log("start", { id = id, inc = inc, pid = resource.getpid(), servers = servers, st = st })

local function stopping()
    return proc.file_exists(stop_file) or now() >= hard
end

-- Connect (retry while the driver cuts us off).
local c
while not c and not stopping() do
    local err, detail
    c, err, detail = zkcoord.connect {
        servers = servers, session_timeout = st, connect_timeout = 10,
        logger = function(level, msg) log("zklog", { level = level, msg = msg:sub(1, 200) }) end,
    }
    if not c then
        log("connect_fail", { err = err, detail = detail })
        local t = now() + 1
        while now() < t and not stopping() do resource.sleep(0.1) end
    end
end
if not c then
    log("exit", { why = "stopped before connecting" })
    os.exit(0)
end

local function sid()
    return c:session_id() or "-"
end

local function publish()
    local s, pw = c:session_id(), c:session_password()
    if s and pw then
        proc.write_file_atomic(session_file, ("%s %s %d\n"):format(s, util.hex(pw), inc))
    end
end

log("connected", { sid = sid(), timeout = c:session_timeout() })
publish()
c:on_state(function(new, old)
    log("state", { new = new, old = old, sid = sid() })
    if new == "connected" then
        publish()
    end
end)

local lock_res = assert(resource.open(dir .. "/lock.res"))
local rw_res = assert(resource.open(dir .. "/rw.res"))

local lk = c:lock(LOCK, { data = me })
local rw = c:rwlock(RW, { data = me })
local rl, wl = rw:read_lock(), rw:write_lock()
local cnt = c:counter(COUNTER)

-- What we hold now (for the on_lost log lines): op -> token.
local held_tokens = {}
local n = 0

lk:on_lost(function(reason)
    log("lost", { op = "lock", token = held_tokens.lock, reason = reason, sid = sid() })
end)
rl:on_lost(function(reason)
    log("lost", { op = "rwread", token = held_tokens.rwread, reason = reason, sid = sid() })
end)
wl:on_lost(function(reason)
    log("lost", { op = "rwwrite", token = held_tokens.rwwrite, reason = reason, sid = sid() })
end)


-- The critical section: write the token to `res` (if any), step a few
-- times (each step checks held(), pumps events while it sleeps, and writes
-- again). A step that finds the clock jumped by more than a second (we were
-- paused) keeps going for 3 more seconds so that a lost session is noticed.
-- `on`: the operation's number (default the last one: spawned coroutines
-- give their own). `long` (the driver asked for it with DIR/c<ID>.hold): hold while that
-- file exists and 3 s after it went (the driver pauses us, expires our
-- session or black-holes our connections meanwhile), at most MAX_HOLD s.
local function critical(op, l, token, res, long, on)
    on = on or n
    local steps = long and 1 or rng:int(1, 3)
    local start = now()
    local last = start
    local linger_until = long and start + 3 or nil
    for step = 1, MAX_STEPS do
        if not l:held() then
            log("heldfalse", { op = op, n = on, token = token, sid = sid() })
            return
        end
        if res then
            local ok, last_acc, t = res:offer(token, me .. ":" .. on)
            log("write", { op = op, n = on, token = token, res = ok and "A" or (ok == false and "R" or "E"),
                           last = last_acc, rt = t })
            if ok == false then
                -- A newer holder wrote: our node is gone, so our session
                -- (or the node) ended. The client must find out: pump
                -- events until held() turns false (bounded).
                log("fenced", { op = op, n = on, token = token, last = last_acc })
                local until_t = now() + 10
                while l:held() and now() < until_t do
                    c:waiter():sleep(0.05)
                end
                if l:held() then
                    log("still_held", { op = op, n = on, token = token, secs = 10 })
                else
                    log("heldfalse", { op = op, n = on, token = token, sid = sid(), after = "fenced" })
                end
                return
            end
        end
        c:waiter():sleep(rng:range(0.005, 0.03))
        local t = now()
        if t - last > 1 then
            log("gap", { op = op, n = on, token = token, secs = t - last })
            linger_until = math.max(linger_until or 0, t + 3)
        end
        last = t
        if long and t - start < MAX_HOLD and proc.file_exists(hold_file) then
            linger_until = math.max(linger_until or 0, t + 3)
        end
        if step >= steps and (not linger_until or t >= linger_until) then
            return
        end
    end
end


-- Between operations (we hold nothing): is any lock or rwlock node owned by
-- our session left? sync() first: it is ordered after our pending deletes.
-- Such a node (a ghost, or a failed cleanup) would block every other
-- contender until our session ends.
local function orphan_check(why)
    local s = c:session_id()
    if not s or c:state() ~= "connected" then
        return
    end
    if not c:sync(LOCK) then
        return
    end
    local found, seen = 0, 0
    for _, path in ipairs({ LOCK, RW }) do
        for _, kid in ipairs(c:children(path) or {}) do
            seen = seen + 1
            local stat = c:exists(path .. "/" .. kid)
            if stat and stat.ephemeral_owner == s and c:session_id() == s then
                found = found + 1
                log("orphan", { path = path, node = kid, sid = s, why = why })
            end
        end
    end
    log("orphan_check", { sid = s, why = why, nodes = seen, orphans = found })
end


local function lock_op(op, l, res, long)
    n = n + 1
    local timeout = long and 20 or rng:pick(TIMEOUTS)
    log("try", { op = op, n = n, timeout = timeout, sid = sid() })
    local t0 = now()
    local ok, err, detail = l:acquire(timeout)
    if not ok then
        log("fail", { op = op, n = n, err = err, detail = detail, took = now() - t0 })
        return
    end
    local token = l:token()
    held_tokens[op] = token
    log("enter", { op = op, n = n, token = token, sid = sid(), took = now() - t0,
                   node = l:node() and l:node():match("[^/]+$") })
    if long then
        proc.write_file_atomic(holding_file, ("%d %.0f\n"):format(inc, token or -1))
    end
    critical(op, l, token, res, long)
    log("leave", { op = op, n = n, token = token })
    if long then
        os.remove(holding_file)
        os.remove(hold_file)
    end
    local rok, rerr = l:release()
    held_tokens[op] = nil
    log("release", { op = op, n = n, token = token, ok = rok and 1 or 0, err = rerr })
end


local function counter_op()
    n = n + 1
    log("try", { op = "counter", n = n, sid = sid() })
    local t0 = now()
    local v, err, detail = cnt:add(1)
    if v then
        log("ack", { op = "counter", n = n, value = v, took = now() - t0 })
    else
        local ambiguous = type(detail) == "string" and detail:find("may or may not", 1, true) and 1 or 0
        log("fail", { op = "counter", n = n, err = err, detail = detail, ambiguous = ambiguous,
                      took = now() - t0 })
    end
end


-- What the recipes' parts (chaos/recipe/<name>.lua) may use.
local ctx = {
    c = c, log = log, rng = rng, me = me, id = id, inc = inc, dir = dir, st = st, sid = sid,
    now = now, TIMEOUTS = TIMEOUTS,
}
--- The next operation number (the n= of its log lines).
function ctx.next_n()
    n = n + 1
    return n
end
--- The critical section of operation `on` (ctx.next_n()) holding `l`
--- (held()), writing `token` to `res` (a chaos.resource, or nil).
function ctx.critical(op, l, token, res, on)
    return critical(op, l, token, res, false, on)
end

-- The operations to draw from: { weight, fn }.
local menu, total_weight = {}, 0
local function offer(weight, fn)
    if weight > 0 then
        menu[#menu + 1] = { weight, fn }
        total_weight = total_weight + weight
    end
end
if enabled.lock then
    offer(4, function() lock_op("lock", lk, lock_res, false) end)
end
if enabled.rwlock then
    offer(2, function()
        if rng:float() < 0.35 then
            lock_op("rwwrite", wl, rw_res, false)
        else
            lock_op("rwread", rl, nil, false)
        end
    end)
end
if enabled.counter then
    offer(2, counter_op)
end
local parts = {}
for _, name in ipairs(recipes.ALL) do
    local part = enabled[name] and recipes.part(name)
    if part then
        local state = part.start(ctx)
        parts[#parts + 1] = { part = part, state = state }
        offer(part.weight or 0, function() part.op(ctx, state) end)
    end
end
-- The driver's settle counts its quiet time from here (a late start joins
-- and registers during it).
proc.write_file_atomic(("%s/c%d.started"):format(dir, id), inc .. "\n")

local function one_op()
    if enabled.lock and proc.file_exists(hold_file) then
        return lock_op("lock", lk, lock_res, true)
    end
    if total_weight == 0 then
        return c:waiter():sleep(0.1)
    end
    local r = rng:float() * total_weight
    for _, m in ipairs(menu) do
        r = r - m[1]
        if r < 0 then
            return m[2]()
        end
    end
    return menu[#menu][2]()
end


local ops = 0
local next_orphan_check = now() + 5
while not stopping() do
    ops = ops + 1
    local ok, err = xpcall(one_op, debug.traceback)
    if ok and now() >= next_orphan_check then
        next_orphan_check = now() + 5
        ok, err = xpcall(orphan_check, debug.traceback, "periodic")
    end
    if not ok then
        log("raise", { n = n, msg = tostring(err):sub(1, 400) })
        -- Whatever we held: let go (bounded: release never waits).
        for op, l in pairs({ lock = lk, rwread = rl, rwwrite = wl }) do
            if held_tokens[op] then
                pcall(l.release, l)
                held_tokens[op] = nil
            end
        end
    end
    c:waiter():sleep(rng:range(0.005, 0.04))
end

log("stopping", { ops = ops, sid = sid() })
local ok, err = xpcall(orphan_check, debug.traceback, "stop")
if not ok then
    log("raise", { n = n, msg = tostring(err):sub(1, 400) })
end
for _, p in ipairs(parts) do
    if p.part.stop then
        ok, err = xpcall(p.part.stop, debug.traceback, ctx, p.state)
        if not ok then
            log("raise", { n = n, msg = tostring(err):sub(1, 400) })
        end
    end
end
c:close()
lock_res:close()
rw_res:close()
log("closed", {})
log("exit", { why = proc.file_exists(stop_file) and "stop" or "deadline" })
os.exit(0)
