-- helpers.luadata: a value as a Lua literal (`return { ... }`), for the
-- reports the tools write and the specs read back with loadfile.
-- Numbers, strings, booleans and tables of them; keys sorted; NaN and the
-- infinities are written as 0/0 (a report only needs to load).
local format, concat, sort, tostring, type = string.format, table.concat, table.sort, tostring, type
local huge = math.huge

local _M = {}

function _M.serialize(v, indent)
    indent = indent or ""
    local t = type(v)
    if t == "table" then
        local keys = {}
        for k in pairs(v) do keys[#keys + 1] = k end
        sort(keys, function(a, b) return tostring(a) < tostring(b) end)
        local out = { "{\n" }
        for _, k in ipairs(keys) do
            out[#out + 1] = ("%s  [%s] = %s,\n"):format(indent,
                type(k) == "number" and tostring(k) or format("%q", tostring(k)),
                _M.serialize(v[k], indent .. "  "))
        end
        out[#out + 1] = indent .. "}"
        return concat(out)
    elseif t == "number" then
        if v ~= v or v == huge or v == -huge then return "0/0" end
        return format("%.17g", v)
    elseif t == "string" then
        return format("%q", v)
    end
    return tostring(v)
end

--- Writes `return <value>` to `path` (raises when it cannot).
function _M.write(path, v)
    local f = assert(io.open(path, "w"))
    f:write("return ", _M.serialize(v), "\n")
    f:close()
end

return _M
