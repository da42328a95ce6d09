--- zkcoord.discovery.json: JSON as Curator's Jackson writes it (internal).
--
-- Decoding is lua-cjson's (its own instance: a user's cjson settings do
-- not reach us). Encoding is ours: cjson escapes "/" as "\/", formats
-- numbers with %.14g and orders keys by the hash table, and Curator's
-- service instances are to be byte-identical both ways. Jackson's rules,
-- as JsonInstanceSerializer (Curator 5.4, Jackson 2.14) writes them:
-- * strings: '"' and '\' escaped, \b \t \n \f \r short, every other
--   control character \u00XX (upper-case hex); "/", DEL and non-ASCII raw;
-- * integers as digits; other numbers as Java's Double.toString ("0.1",
--   "1234567.5", "1.0E-4", "1.0E10": plain from 10^-3 up to 10^7);
-- * objects in a given key order (an instance's fields), a payload's keys
--   "@class" first then sorted (Lua tables have no order; Jackson keeps
--   the order it read, so what we write comes back from Curator as is).
local cjson = require("cjson.safe").new()

local type, pairs, ipairs, tostring, tonumber, next = type, pairs, ipairs, tostring, tonumber, next
local byte, format, gsub = string.byte, string.format, string.gsub
local sort, concat, insert = table.sort, table.concat, table.insert
local floor, huge = math.floor, math.huge

local _M = {}

--- JSON's null as decoded (a lightuserdata): kept in payloads, written back.
_M.null = cjson.null
local null = cjson.null

cjson.decode_invalid_numbers(false)   -- NaN and Infinity are not JSON

--- Decodes `text`; nil, err for text that is not JSON.
function _M.decode(text)
    return cjson.decode(text)
end


local SHORT = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\t"] = "\\t",
                ["\n"] = "\\n", ["\f"] = "\\f", ["\r"] = "\\r" }

local function escape_char(c)
    return SHORT[c] or format("\\u%04X", byte(c))
end

local function string_json(s)
    return '"' .. gsub(s, '[%z\1-\31"\\]', escape_char) .. '"'
end

-- The fewest significant digits that read back as x.
local function shortest(x, conv)
    for digits = 1, 17 do
        local s = format("%." .. digits .. conv, x)
        if tonumber(s) == x then
            return s
        end
    end
    return format("%.17" .. conv, x)
end

local function number_json(x)
    if x ~= x or x == huge or x == -huge then
        return nil, "NaN and infinities are not JSON"
    end
    if x == floor(x) and x > -2^63 and x < 2^63 then
        return format("%d", x)
    end
    local a = x < 0 and -x or x
    if a >= 1e-3 and a < 1e7 then
        return shortest(x, "g")
    end
    -- Java: at least one digit after the point, "E", the exponent bare.
    local mant, exp = shortest(x, "e"):match("^(.-)e([-+]%d+)$")
    if not mant:find(".", 1, true) then
        mant = mant .. ".0"
    end
    return mant .. "E" .. tostring(tonumber(exp))
end

local encode

-- An array: a table whose keys are exactly 1..n (n > 0).
local function array_length(t)
    local n = 0
    for k in pairs(t) do
        if type(k) ~= "number" or k < 1 or k ~= floor(k) then
            return nil
        end
        if k > n then n = k end
    end
    return n > 0 and n or nil
end

local function sorted_keys(t)
    local keys = {}
    for k in pairs(t) do
        if type(k) ~= "string" then
            return nil, "object keys must be strings, got " .. type(k)
        end
        if k ~= "@class" then
            keys[#keys + 1] = k
        end
    end
    sort(keys)
    if t["@class"] ~= nil then
        insert(keys, 1, "@class")
    end
    return keys
end

--- An object with its keys in the order of the array `keys`; a key whose
--- value is nil is written as null.
function _M.object(t, keys, depth)
    local parts = {}
    for i, k in ipairs(keys) do
        local v = t[k]
        local s, err
        if v == nil then
            s = "null"
        else
            s, err = encode(v, (depth or 0) + 1)
            if not s then return nil, err end
        end
        parts[i] = string_json(k) .. ":" .. s
    end
    return "{" .. concat(parts, ",") .. "}"
end

function encode(v, depth)
    if depth > 100 then
        return nil, "nested too deep (a cycle?)"
    end
    local t = type(v)
    if t == "string" then
        return string_json(v)
    elseif t == "number" then
        return number_json(v)
    elseif t == "boolean" then
        return tostring(v)
    elseif v == null then
        return "null"
    elseif t == "table" then
        if next(v) == nil then
            return "{}"
        end
        local n = array_length(v)
        if n then
            local parts = {}
            for i = 1, n do
                local s = "null"
                if v[i] ~= nil then
                    local err
                    s, err = encode(v[i], depth + 1)
                    if not s then return nil, err end
                end
                parts[i] = s
            end
            return "[" .. concat(parts, ",") .. "]"
        end
        local keys, err = sorted_keys(v)
        if not keys then return nil, err end
        return _M.object(v, keys, depth)
    end
    return nil, "cannot write a " .. t .. " as JSON"
end

--- `v` as Jackson writes it; nil, err for what JSON cannot hold.
function _M.encode(v)
    return encode(v, 0)
end

return _M
