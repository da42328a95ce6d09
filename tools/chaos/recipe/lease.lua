-- chaos.recipe.lease: every contender tries, now and then, to obtain the
-- lease /chaos/lease (a 2 s term, its lock waited for at most 2 s) as
-- holder "c<ID>" (a restarted contender renews its predecessor's term).
-- Logged as try / ack (obtained: the term's end, and the wall second at
-- the return, os.time() as the lease's clock) / fail (err "held": another
-- holder's term runs) with op=lease. chaos/check/lease.lua: no two holders
-- believe they hold at the same second.
local _M = {}

local PATH = "/chaos/lease"
_M.DURATION = 2
_M.paths = { PATH }
_M.weight = 1

--- One try of `l` (a lease or a multi-lease) logged as operation `op`.
function _M.try(ctx, l, op)
    local n = ctx.next_n()
    ctx.log("try", { op = op, n = n, timeout = _M.DURATION, w0 = os.time(), sid = ctx.sid() })
    local ok, res, detail = l:obtain()
    local w1 = os.time()
    if ok then
        ctx.log("ack", { op = op, n = n, ends = l:ends(), w1 = w1, slot = l.slot and l:slot() })
    elseif ok == false then
        ctx.log("fail", { op = op, n = n, err = "held", w1 = w1,
                          holder = type(res) == "table" and res.holder or nil })
    else
        ctx.log("fail", { op = op, n = n, err = res, detail = detail, w1 = w1 })
    end
end

function _M.start(ctx)
    return { l = ctx.c:lease(PATH, _M.DURATION, { identifier = "c" .. ctx.id,
                                                  timeout = _M.DURATION }),
             next_t = 0 }
end

-- A try every 0.2-1 s (each takes kazoo's lock and writes: not in a loop).
function _M.op(ctx, st)
    if ctx.now() < st.next_t then
        return
    end
    st.next_t = ctx.now() + ctx.rng:range(0.2, 1)
    _M.try(ctx, st.l, "lease")
end

return _M
