-- chaos.recipe.work_queue: contenders put items (data "c<ID>.<INC>:<n>",
-- unique) into /chaos/wq and take, work on and ack (or now and then
-- release) them. Logged: wq_put / wq_put_done (ok or err), wq_take (the
-- item's data; t0: when the take began), wq_settle (an ack or release begins), wq_ack /
-- wq_release (ok or err). After the contenders
-- stopped the driver lists the items left (wq_final). chaos/check/work_queue.lua.
local _M = {}

local PATH = "/chaos/wq"
_M.paths = { PATH }
_M.weight = 3

function _M.start(ctx)
    return { q = ctx.c:work_queue(PATH, { id = ctx.me }) }
end

local function put(ctx, st)
    local n = ctx.next_n()
    local data = ctx.me .. ":" .. n
    ctx.log("wq_put", { n = n, data = data })
    local ok, err = st.q:put(data, { timeout = ctx.rng:pick({ 1, 3, 5 }) })
    ctx.log("wq_put_done", { n = n, data = data, ok = ok and 1 or 0, err = err })
end

local function take(ctx, st)
    local n = ctx.next_n()
    local t0 = ctx.now()     -- the claim was made after this, maybe long before take returned
    local item, err = st.q:take(ctx.rng:pick(ctx.TIMEOUTS))
    if not item then
        return ctx.log("wq_take_fail", { n = n, err = err })
    end
    ctx.log("wq_take", { n = n, data = item.data, sid = ctx.sid(), t0 = t0 })
    -- The work: long enough now and then for a fault to come in between.
    ctx.c:waiter():sleep(ctx.rng:float() < 0.2 and ctx.rng:range(0.3, 1.5)
                         or ctx.rng:range(0.005, 0.05))
    local verb = ctx.rng:float() < 0.1 and "release" or "ack"
    -- a kill between here and the answer's line leaves the outcome unknown
    ctx.log("wq_settle", { n = n, data = item.data, verb = verb })
    local ok, aerr = item[verb](item)
    ctx.log("wq_" .. verb, { n = n, data = item.data, ok = ok and 1 or 0, err = aerr,
                             sid = ctx.sid() })
end

function _M.op(ctx, st)
    if ctx.rng:float() < 0.45 then
        return put(ctx, st)
    end
    return take(ctx, st)
end

function _M.final(admin, log)
    local names, err = admin:children(PATH .. "/entries")
    if not names then
        return log("wq_final_error", { err = err })
    end
    for _, name in ipairs(names) do
        local data = admin:get(PATH .. "/entries/" .. name)
        log("wq_final", { node = name, data = data or "?" })
    end
    log("wq_final_done", { items = #names })
end

return _M
