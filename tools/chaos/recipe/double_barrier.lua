-- chaos.recipe.double_barrier: rounds of 3 participants. The round's path
-- (/chaos/dbar/r<k>) is in DIR/dbar; a contender enters it (op=dbenter,
-- with a timeout), moves the file on to round k+1 (also after an enter
-- that failed, so that a round broken by a fault does not hold everyone
-- up; a round's path is not used again once it is through), works a
-- moment and leaves (op=dbleave). Logged as try / ack /
-- fail with the path. chaos/check/double_barrier.lua.
local proc = require "helpers.proc"

local _M = {}

local BASE = "/chaos/dbar"
_M.N = 3
_M.paths = { BASE }
_M.weight = 2

function _M.start(ctx)
    return { file = ctx.dir .. "/dbar" }
end

local function step(ctx, op, path, fn, timeout)
    local n = ctx.next_n()
    ctx.log("try", { op = op, n = n, timeout = timeout, path = path, sid = ctx.sid() })
    local ok, err, detail = fn(timeout)
    if ok then
        ctx.log("ack", { op = op, n = n, path = path })
    else
        ctx.log("fail", { op = op, n = n, err = err, detail = detail })
    end
    return ok
end

function _M.op(ctx, st)
    local k = tonumber((proc.read_file(st.file) or ""):match("^(%d+)")) or 1
    local path = BASE .. "/r" .. k
    local db = ctx.c:double_barrier(path, _M.N, { id = ctx.me })
    local ok = step(ctx, "dbenter", path, function(t) return db:enter(t) end,
                    ctx.rng:pick({ 1, 2, 3, 5 }))
    -- A round must be over before its path is used again: whoever comes
    -- next goes to the next round.
    local now_k = tonumber((proc.read_file(st.file) or ""):match("^(%d+)")) or 1
    if now_k == k then
        proc.write_file_atomic(st.file, (k + 1) .. "\n")
    end
    if ok then
        ctx.c:waiter():sleep(ctx.rng:range(0.005, 0.2))
        step(ctx, "dbleave", path, function(t) return db:leave(t) end, 5)
    end
end

return _M
