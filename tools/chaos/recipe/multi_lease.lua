-- chaos.recipe.multi_lease: as chaos/recipe/lease.lua, on the multi-lease
-- /chaos/mlease (2 slots, 2 s terms); ack also logs the slot taken.
-- chaos/check/multi_lease.lua: no two holders believe they hold one slot
-- at the same second.
local lease = require "chaos.recipe.lease"

local _M = {}

local PATH = "/chaos/mlease"
_M.COUNT = 2
_M.paths = { PATH }
_M.weight = 1

function _M.start(ctx)
    return { l = ctx.c:multi_lease(PATH, _M.COUNT, lease.DURATION,
                                   { identifier = "c" .. ctx.id, timeout = lease.DURATION }),
             next_t = 0 }
end

function _M.op(ctx, st)
    if ctx.now() < st.next_t then
        return
    end
    st.next_t = ctx.now() + ctx.rng:range(0.2, 1)
    lease.try(ctx, st.l, "mlease")
end

return _M
