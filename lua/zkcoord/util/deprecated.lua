--- zkcoord.util.deprecated: an old form keeps working for one release
--- and says so once (internal).
local _M = { _VERSION = require("zkcoord.version") }


-- "old" -> true once warned: per process, whichever client warned first.
local warned = {}


--- Logs through client:log("warn", ...) that `old` is deprecated for `new`,
--- the first time in this process that `old` is used (a form called in a
--- loop must not flood the log). Returns true if it logged now.
---@param client table the client whose logger is told
---@param old string the old form, as users write it ("election:on_revoked")
---@param new string what to write instead ("election:on_lost")
function _M.deprecated(client, old, new)
    if warned[old] then
        return false
    end
    warned[old] = true
    client:log("warn", ("%s is deprecated and goes in the next release: use %s")
                       :format(old, new))
    return true
end


--- Forgets which deprecations were logged (specs: to see one logged once).
function _M.deprecated_reset()
    warned = {}
end

return _M
