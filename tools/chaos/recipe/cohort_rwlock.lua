-- chaos.recipe.cohort_rwlock: the rwlock /chaos/cohortrw with cohort =
-- true (a client's readers share one read node; writers are not cohorted):
-- an operation spawns 3 local owners, each a reader or (one in three) a
-- writer; writers write their token to DIR/cohortrw.res. Logged as the
-- lock's operations with op=crread / crwrite (chaos/recipe/cohort_lock.lua's
-- round). chaos/check/cohort_rwlock.lua: no writer overlaps another live
-- holder, local ones included.
local resource = require "chaos.resource"
local cohort_lock = require "chaos.recipe.cohort_lock"

local _M = {}

_M.paths = { "/chaos/cohortrw" }
_M.held = { "/chaos/cohortrw" }      -- the driver lists it at the end until empty
_M.weight = 2

function _M.start(ctx)
    local st = { readers = {}, writers = {},
                 res = assert(resource.open(ctx.dir .. "/cohortrw.res")) }
    for i = 1, cohort_lock.OWNERS do
        local rw = ctx.c:rwlock("/chaos/cohortrw", { cohort = true, data = ctx.me })
        st.readers[i] = { op = "crread", lock = rw:read_lock(), write = false }
        st.writers[i] = { op = "crwrite", lock = rw:write_lock() }
        cohort_lock.watch(ctx, st.readers[i])
        cohort_lock.watch(ctx, st.writers[i])
    end
    return st
end

function _M.op(ctx, st)
    local sides = {}
    for i = 1, cohort_lock.OWNERS do
        sides[i] = ctx.rng:float() < 0.33 and st.writers[i] or st.readers[i]
    end
    cohort_lock.round(ctx, sides, st.res)
end

function _M.stop(_, st)
    st.res:close()
end

return _M
