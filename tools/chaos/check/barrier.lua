-- chaos.check.barrier: no one through before the barrier is removed: a
-- wait (op=bar) that returned true on a barrier whose create succeeded
-- (bar_set) is a violation unless its remove was sent (bar_remove) before
-- the wait returned.
local rules = require "chaos.check.rules"

local format = string.format

local _M = {}

function _M.run(R)
    local set, removing = {}, {}
    for _, P in pairs(R.procs) do
        for _, e in ipairs(P.events) do
            if e.ev == "bar_set" then
                set[e.kv.path] = e.t
            elseif e.ev == "bar_remove" then
                removing[e.kv.path] = math.min(removing[e.kv.path] or math.huge, e.t)
            end
        end
    end
    local through = 0
    for _, o in ipairs(R.all_ops) do
        if o.op == "bar" and o.out == "ack" then
            through = through + 1
            local path = o.kv.path
            local rm = removing[path]
            if set[path] and not (rm and rm <= o.out_t) then
                R:violation("barrier: through before the remove",
                            format("%s op %d waited on %s (set at %.3f) and got through at %.3f; "
                                   .. "its remove %s", o.key, o.n, path, set[path], o.out_t,
                                   rm and format("was sent at %.3f", rm) or "was never sent"))
            end
        end
    end
    local s = rules.opstat(R, "bar")
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "barrier: a wait through before its barrier was removed",
        prefix = "barrier: ",
        details = format("waits %d, through %d; barriers set %d", s.tries, through,
                         (function() local k = 0 for _ in pairs(set) do k = k + 1 end return k end)()) }
end

return _M
