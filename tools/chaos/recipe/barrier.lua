-- chaos.recipe.barrier: a contender sets a barrier of its own
-- (/chaos/bar/c<ID>.<INC>-<k>), publishes its path in DIR/barrier, and
-- removes it 1-4 s later; the others wait on the published one with a
-- timeout. Logged: bar_set (after the create succeeded), bar_remove (before
-- the delete is sent) and bar_removed, and each wait as try / ack or fail
-- with op=bar and the path. chaos/check/barrier.lua: no wait returns true
-- before the remove of its barrier was sent.
local proc = require "helpers.proc"

local _M = {}

local BASE = "/chaos/bar"
_M.paths = { BASE }
_M.weight = 1

function _M.start(ctx)
    return { k = 0, file = ctx.dir .. "/barrier" }
end

local function set(ctx, st)
    st.k = st.k + 1
    local path = ("%s/c%d.%d-%d"):format(BASE, ctx.id, ctx.inc, st.k)
    local b = ctx.c:barrier(path)
    local ok, err = b:create()
    if not ok then
        ctx.log("bar_set_fail", { path = path, err = err })
        return
    end
    ctx.log("bar_set", { path = path })
    proc.write_file_atomic(st.file, path .. "\n")
    st.mine, st.mine_b, st.remove_at = path, b, ctx.now() + ctx.rng:range(1, 4)
end

local function remove(ctx, st)
    ctx.log("bar_remove", { path = st.mine })
    local ok, err = st.mine_b:remove()
    ctx.log("bar_removed", { path = st.mine, ok = ok and 1 or 0, err = err })
    if ok then
        st.mine, st.mine_b = nil, nil
    end
end

function _M.op(ctx, st)
    if st.mine and ctx.now() >= st.remove_at then
        return remove(ctx, st)
    end
    if not st.mine and ctx.rng:float() < 0.2 then
        return set(ctx, st)
    end
    local path = (proc.read_file(st.file) or ""):match("^(%S+)")
    if not path then
        return
    end
    local n = ctx.next_n()
    local timeout = ctx.rng:pick(ctx.TIMEOUTS)
    ctx.log("try", { op = "bar", n = n, timeout = timeout, path = path, sid = ctx.sid() })
    local ok, err, detail = ctx.c:barrier(path):wait(timeout)
    if ok then
        ctx.log("ack", { op = "bar", n = n, path = path })
    else
        ctx.log("fail", { op = "bar", n = n, err = err, detail = detail })
    end
end

function _M.stop(ctx, st)
    if st.mine then
        remove(ctx, st)
    end
end

return _M
