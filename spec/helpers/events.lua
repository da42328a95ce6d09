-- helpers.events: the event logs that contender processes of the specs
-- write, one line an event: "<what> <time> [extra]".
local proc = require "helpers.proc"

local _M = {}

--- The events of log `file` in order: { what =, t =, extra = } each.
function _M.read(file)
    local out = {}
    for line in (proc.read_file(file) or ""):gmatch("[^\n]+") do
        local what, t, extra = line:match("^(%S+) (%S+) ?(.*)$")
        if what then
            out[#out + 1] = { what = what, t = tonumber(t), extra = extra }
        end
    end
    return out
end

--- The last event of each kind, by its `what`.
function _M.last_by_what(events)
    local out = {}
    for _, e in ipairs(events) do
        out[e.what] = e
    end
    return out
end

--- How many of `events` are a `what`.
function _M.count(events, what)
    local n = 0
    for _, e in ipairs(events) do
        if e.what == what then n = n + 1 end
    end
    return n
end

return _M
