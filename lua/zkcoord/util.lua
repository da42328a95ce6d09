--- zkcoord.util: what every recipe needs besides the client (internal).
--
-- An index of the modules of zkcoord/util/, one concern each; new code
-- requires the one it uses:
--   args        argument checks that raise in one wording and blame the
--               caller (raise, argerror, check_opts, check_timeout ...)
--   deadline    deadlines, and waiting for the connection until one
--   reads       reads every recipe makes the same way (children, present_data)
--   retry       the one retry helper and its policies
--   callbacks   protected user callbacks (call, call_all), watch wakers
--   deprecated  an old form's warning, once per process
--   held        scoped holds: run_held, acquire_run, running
--   ids         default ids (default_id)
--
-- Rules the recipes follow through them:
-- * A recipe never imports another recipe for a helper: shared helpers
--   live here.
-- * User callbacks (on_lost, on_change ...) always run protected: one that
--   raises is logged through client:log("error", ...) and the others still
--   run, and so does the recipe.
-- * A retry goes through retry() (errors.lua says which errors are worth
--   one): no recipe has a loop of its own with its own bound.
local pairs, ipairs = pairs, ipairs

local _M = { _VERSION = require("zkcoord.version") }

for _, name in ipairs { "args", "deadline", "reads", "retry", "callbacks", "deprecated",
                       "held", "ids" } do
    for k, v in pairs(require("zkcoord.util." .. name)) do
        if k ~= "_VERSION" then
            _M[k] = v
        end
    end
end

return _M
