-- chaos.recipe.cohort_lock: the lock /chaos/cohort with cohort = true: an
-- operation spawns 3 coroutines of the contender (local owners sharing one
-- node, handed on without a request) that each acquire, write the pair
-- token czxid, n (as zkcoord.cohort.number) to the fenced resource
-- DIR/cohort.res in the critical section, and release; then runs them to
-- the end. Logged as the lock's operations with op=cohort.
-- chaos/check/cohort_lock.lua: no two live holders, local ones included;
-- the accept log strictly increasing.
local cohort = require "zkcoord.cohort"
local resource = require "chaos.resource"

local _M = {}

_M.paths = { "/chaos/cohort" }
_M.held = { "/chaos/cohort" }      -- the driver lists it at the end until empty
_M.weight = 2
_M.OWNERS = 3

--- What both cohort recipes do: `sides` is a list of { op =, lock = } per
--- local owner; res the fenced resource (a side with write = false does not
--- write). Logs try / enter / leave / release per owner.
function _M.round(ctx, sides, res)
    local c = ctx.c
    for _, side in ipairs(sides) do
        c:spawn(function()
            local n = ctx.next_n()
            local op, l = side.op, side.lock
            local timeout = ctx.rng:pick(ctx.TIMEOUTS)
            ctx.log("try", { op = op, n = n, timeout = timeout, sid = ctx.sid() })
            local ok, err, detail = l:acquire(timeout)
            if not ok then
                return ctx.log("fail", { op = op, n = n, err = err, detail = detail })
            end
            local czxid, k = l:token()
            if not czxid then
                -- lost between acquire's answer and token() (a session loss
                -- taken in meanwhile): held() is false too, nothing to use
                ctx.log("fail", { op = op, n = n, err = "lost", detail = k })
                return l:release()
            end
            local token = cohort.number(czxid, k or 0)
            side.held = token
            ctx.log("enter", { op = op, n = n, token = token, sid = ctx.sid(),
                               node = l:node() and l:node():match("[^/]+$") })
            ctx.critical(op, l, token, side.write ~= false and res or nil, n)
            ctx.log("leave", { op = op, n = n, token = token })
            local rok, rerr = l:release()
            side.held = nil
            ctx.log("release", { op = op, n = n, token = token, ok = rok and 1 or 0, err = rerr })
        end)
    end
    if not c:run(120) then
        ctx.log("cohort_round_unfinished", { owners = #sides })
    end
end

--- on_lost of a local owner's lock object, logged as the lock's.
function _M.watch(ctx, side)
    side.lock:on_lost(function(reason)
        ctx.log("lost", { op = side.op, token = side.held, reason = reason, sid = ctx.sid() })
    end)
end

--- The start, op and stop of a run part whose 3 local owners each hold
--- their own lock object on `path` (made with `lock_opts` plus data), logged
--- as `op`, writing to the fenced resource DIR/`file`: this recipe's, and
--- chaos.recipe.local_lock's (the plain lock).
function _M.owners(part, path, op, file, lock_opts)
    function part.start(ctx)
        local st = { sides = {}, res = assert(resource.open(ctx.dir .. "/" .. file)) }
        for i = 1, _M.OWNERS do
            local o = { data = ctx.me }
            for k, v in pairs(lock_opts) do o[k] = v end
            st.sides[i] = { op = op, lock = ctx.c:lock(path, o) }
            _M.watch(ctx, st.sides[i])
        end
        return st
    end
    function part.op(ctx, st)
        _M.round(ctx, st.sides, st.res)
    end
    function part.stop(_, st)
        st.res:close()
    end
    return part
end

_M.owners(_M, "/chaos/cohort", "cohort", "cohort.res", { cohort = true })

return _M
