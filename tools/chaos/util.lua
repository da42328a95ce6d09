-- chaos.util: what the chaos driver, contenders and checker share: a
-- seeded generator, the log line format, hex. (Files: helpers.proc.)
local rng = require "helpers.rng"

local _M = {}

local floor, format, gsub, concat = math.floor, string.format, string.gsub, table.concat
local tostring, tonumber, type, pairs, sort = tostring, tonumber, type, pairs, table.sort

-- The fault schedule depends on --seed only (helpers.rng), 5 draws dropped
-- first.
function _M.rng(seed)
    return rng.new(seed, 5)
end


-- Log lines: "<monotonic time> <event> k=v k=v ...", values without
-- whitespace (spaces become "_", other whitespace "?").
local function clean(v)
    if type(v) == "number" then
        if v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53 then
            return format("%.0f", v)
        end
        return format("%.6f", v)
    end
    v = gsub(tostring(v), " ", "_")
    v = gsub(v, "%s", "?")
    return v
end

function _M.format_line(t, event, kv)
    local parts = { format("%.6f", t), event }
    if kv then
        local keys = {}
        for k in pairs(kv) do keys[#keys + 1] = k end
        sort(keys)
        for _, k in ipairs(keys) do
            if kv[k] ~= nil then
                parts[#parts + 1] = k .. "=" .. clean(kv[k])
            end
        end
    end
    return concat(parts, " ")
end

--- Parses a log line: t, event, kv (values as strings; numbers converted
--- by the caller). nil for a malformed line.
function _M.parse_line(line)
    local t, event, rest = line:match("^(%d+%.%d+) (%S+)(.*)$")
    if not t then
        return nil
    end
    local kv = {}
    for k, v in rest:gmatch(" ([%w_]+)=(%S*)") do
        kv[k] = v
    end
    return tonumber(t), event, kv
end

--- An append-only, line-buffered log: log(event, kv) with the time from now().
function _M.logger(path, now)
    local f = assert(io.open(path, "a"))
    f:setvbuf("line")
    local function log(event, kv)
        f:write(_M.format_line(now(), event, kv), "\n")
    end
    return log, f
end

function _M.hex(s)
    return (gsub(s, ".", function(c) return format("%02x", c:byte()) end))
end

function _M.unhex(h)
    return (gsub(h, "%x%x", function(x) return string.char(tonumber(x, 16)) end))
end

return _M
