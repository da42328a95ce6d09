-- chaos.recipe.semaphore: contenders take a lease of /chaos/sem (2 leases),
-- check held() in the critical section, release. Logged as the lock's
-- operations with op=sem; chaos/check/semaphore.lua counts the live holders.
local _M = {}

local PATH = "/chaos/sem"
_M.MAX = 2
_M.paths = {}
_M.held = { PATH .. "/locks", PATH .. "/leases" }   -- listed at the end until empty
_M.weight = 2

function _M.start(ctx)
    return { sem = ctx.c:semaphore(PATH, _M.MAX, { data = ctx.me }) }
end

function _M.op(ctx, st)
    local n = ctx.next_n()
    local timeout = ctx.rng:pick(ctx.TIMEOUTS)
    ctx.log("try", { op = "sem", n = n, timeout = timeout, sid = ctx.sid() })
    local lease, err, detail = st.sem:acquire(timeout)
    if not lease then
        ctx.log("fail", { op = "sem", n = n, err = err, detail = detail })
        return
    end
    lease:on_lost(function(reason)
        ctx.log("lost", { op = "sem", reason = reason, sid = ctx.sid() })
    end)
    ctx.log("enter", { op = "sem", n = n, node = lease:node() and lease:node():match("[^/]+$"),
                       sid = ctx.sid() })
    ctx.critical("sem", lease, nil)
    ctx.log("leave", { op = "sem", n = n })
    local rok, rerr = lease:release()
    ctx.log("release", { op = "sem", n = n, ok = rok and 1 or 0, err = rerr })
end

return _M
