-- chaos.recipe.local_lock: the plain lock /chaos/local (no cohort) held by
-- 3 coroutines of the contender at a time: local owners with a node each,
-- in one line with the other contenders'. A release wakes the next local
-- waiter itself (zkcoord.line.walk's released), without waiting for the
-- server's event of its delete: this run puts that handoff under faults.
-- Each writes its token (the node's czxid) to the fenced resource
-- DIR/local.res in the critical section. Logged with op=locallock;
-- chaos/check/local_lock.lua: no two live holders, local ones included;
-- the accept log strictly increasing.
local cohort_lock = require "chaos.recipe.cohort_lock"
local resource = require "chaos.resource"

local _M = {}

_M.paths = { "/chaos/local" }
_M.held = { "/chaos/local" }
_M.weight = 2

function _M.start(ctx)
    local st = { sides = {}, res = assert(resource.open(ctx.dir .. "/local.res")) }
    for i = 1, cohort_lock.OWNERS do
        st.sides[i] = { op = "locallock", lock = ctx.c:lock("/chaos/local", { data = ctx.me }) }
        cohort_lock.watch(ctx, st.sides[i])
    end
    return st
end

function _M.op(ctx, st)
    cohort_lock.round(ctx, st.sides, st.res)
end

function _M.stop(_, st)
    st.res:close()
end

return _M
