-- chaos.recipe.multi_lock: contenders take two of three locks at once
-- (client:multi_lock over a pair of /chaos/ml/{a,b,c}), check held()
-- in the critical section, release. Logged as the lock's operations (try /
-- enter / heldfalse / leave / release / lost) with op=ml and the pair;
-- chaos/check/multi_lock.lua checks mutual exclusion per lock.
local _M = {}

local BASE = "/chaos/ml"
_M.paths = { BASE }
_M.held = { BASE .. "/a", BASE .. "/b", BASE .. "/c" }   -- listed at the end until empty
_M.weight = 2

local PAIRS = { { "a", "b" }, { "b", "c" }, { "a", "c" } }

function _M.start(ctx)
    local st = { locks = {} }
    for i, pair in ipairs(PAIRS) do
        local ml = ctx.c:multi_lock({ BASE .. "/" .. pair[1], BASE .. "/" .. pair[2] },
                                    { data = ctx.me })
        ml:on_lost(function(reason, path)
            if st.holding == i then
                ctx.log("lost", { op = "ml", reason = reason, path = path, sid = ctx.sid() })
            end
        end)
        st.locks[i] = ml
    end
    return st
end

function _M.op(ctx, st)
    local i = ctx.rng:int(1, #PAIRS)
    local ml = st.locks[i]
    local n = ctx.next_n()
    local pair = PAIRS[i][1] .. "+" .. PAIRS[i][2]
    local timeout = ctx.rng:pick(ctx.TIMEOUTS)
    ctx.log("try", { op = "ml", n = n, timeout = timeout, locks = pair, sid = ctx.sid() })
    local ok, err, detail = ml:acquire(timeout)
    if not ok then
        ctx.log("fail", { op = "ml", n = n, err = err, detail = detail })
        return
    end
    st.holding = i
    ctx.log("enter", { op = "ml", n = n, locks = pair, sid = ctx.sid() })
    ctx.critical("ml", ml, nil)
    ctx.log("leave", { op = "ml", n = n })
    local rok, rerr = ml:release()
    st.holding = nil
    ctx.log("release", { op = "ml", n = n, ok = rok and 1 or 0, err = rerr })
end

return _M
