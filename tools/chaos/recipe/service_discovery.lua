-- chaos.recipe.service_discovery: every contender registers instances of
-- the service "svc" under /chaos/sd (Curator's layout): contender <ID> has
-- 1 + <ID> % 2 of them, ids "c<ID>-<K>", payload { inc = INC, v = version }
-- (sd_reg, logged before the register). Each instance changes in bursts
-- (0.05-0.5 s apart) and quiet spells (2-20 s: a change that did not reach
-- the node shows then): its payload updated (sd_update), or unregistered
-- and registered again (sd_unreg, sd_reg); in between, every 0.1-0.3 s, the
-- provider picks one (sd_get). Each keeps a view of the service by on_change
-- (sd_view: "id@inc:v" per instance, with its session). Once
-- the driver settles the run (DIR/quiet), it changes nothing more: the
-- membership is stable. The driver probes the instances with their JSON
-- (probe_sd); the service's node is listed at the end until empty (every
-- contender unregistered, the sessions of killed ones expired).
-- chaos/check/service_discovery.lua judges.
local util = require "chaos.util"
local proc = require "helpers.proc"

local _M = {}

local BASE, NAME = "/chaos/sd", "svc"
_M.BASE, _M.NAME = BASE, NAME
_M.paths = { BASE, BASE .. "/" .. NAME }
_M.held = { BASE .. "/" .. NAME }
_M.weight = 1

--- "id@inc:v,..." of a list of instances (sorted by id, as views give them).
function _M.summary(list)
    local out = {}
    for _, inst in ipairs(list or {}) do
        local p = type(inst.payload) == "table" and inst.payload or {}
        out[#out + 1] = ("%s@%s:%s"):format(inst.id, tostring(p.inc), tostring(p.v))
    end
    return table.concat(out, ",")
end

local function payload(ctx, v)
    return { inc = ctx.inc, v = v }
end

local function register(ctx, st, k)
    local id = "c" .. ctx.id .. "-" .. k
    st.v[k] = (st.v[k] or 0) + 1
    ctx.log("sd_reg", { id = id, v = st.v[k] })
    st.regs[k] = st.sd:register { name = NAME, id = id, address = "127.0.0.1",
                                  port = 10000 + ctx.id * 10 + k, payload = payload(ctx, st.v[k]) }
end

-- The view: from on_change (waits for its first load, at most the session
-- timeout: under a fault it may fail, and the next operation tries again).
local function watch(ctx, st)
    local fn, err = st.sd:on_change(NAME, function(list)
        ctx.log("sd_view", { insts = _M.summary(list), sid = ctx.sid() })
    end)
    ctx.log("sd_watch", { ok = fn and 1 or 0, err = err, sid = ctx.sid() })
    if fn then
        st.p = assert(st.sd:provider(NAME))
    end
end

-- When instance k changes next.
local function next_change(ctx, st, k)
    local gap = ctx.rng:float() < 0.5 and ctx.rng:range(0.05, 0.5) or ctx.rng:range(2, 20)
    st.next_change[k] = ctx.now() + gap
end

function _M.start(ctx)
    local st = { sd = ctx.c:service_discovery(BASE), regs = {}, v = {}, next_change = {},
                 next_op = 0 }
    for k = 1, 1 + ctx.id % 2 do
        register(ctx, st, k)
        next_change(ctx, st, k)
    end
    watch(ctx, st)
    return st
end

local function change(ctx, st, k)
    local id = "c" .. ctx.id .. "-" .. k
    if ctx.rng:float() < 0.7 then
        st.v[k] = st.v[k] + 1
        ctx.log("sd_update", { id = id, v = st.v[k] })
        local ok, err = st.regs[k]:update { payload = payload(ctx, st.v[k]) }
        ctx.log("sd_updated", { id = id, ok = ok and 1 or 0, err = err })
    else
        ctx.log("sd_unreg", { id = id })
        local ok, err = st.regs[k]:unregister()
        ctx.log("sd_unregistered", { id = id, ok = ok and 1 or 0, err = err })
        register(ctx, st, k)
    end
end

function _M.op(ctx, st)
    if not st.p then
        return watch(ctx, st)        -- a view first, settling or not
    end
    local t = ctx.now()
    if t < st.next_op or proc.file_exists(ctx.dir .. "/quiet") then
        return
    end
    for k in ipairs(st.regs) do
        if t >= st.next_change[k] then
            next_change(ctx, st, k)
            return change(ctx, st, k)
        end
    end
    st.next_op = t + ctx.rng:range(0.1, 0.3)
    local inst, err = st.p:get()
    ctx.log("sd_get", { id = inst and inst.id, err = err })
end

function _M.stop(ctx, st)
    ctx.log("sd_close", {})
    st.sd:close()
end

-- Every instance node with its data (hex: JSON holds spaces and commas).
function _M.probe(admin, log)
    local path = BASE .. "/" .. NAME
    local ids, err = admin:children(path)
    if not ids then
        return log("probe_sd", { err = err })
    end
    table.sort(ids)
    local parts = {}
    for _, id in ipairs(ids) do
        local data = admin:get(path .. "/" .. id)
        if data then parts[#parts + 1] = id .. "=" .. util.hex(data) end
    end
    log("probe_sd", { nodes = table.concat(parts, ",") })
end

return _M
