--- zkcoord.lease.format: the lease record as kazoo stores it (internal).
--
-- kazoo's NonBlockingLease keeps `<path>/lease_holder` as the bytes of
-- Python's json.dumps({"version": 1, "holder": ..., "end": ...}): keys in
-- that order, ", " and ": " between them, every character outside
-- printable ASCII escaped (ensure_ascii: \" \\ \b \f \n \r \t, else \uXXXX
-- in lowercase hex, a surrogate pair above U+FFFF), and `end` a UTC time
-- written "%Y-%m-%dT%H:%M:%S" (whole seconds). `encode` writes exactly
-- those bytes, so a kazoo process reads our records and ours compare
-- byte for byte with its own. `decode` reads that record's shape only: a
-- flat JSON object whose values are strings or numbers, any key order and
-- whitespace (json.loads' freedom); anything else is refused, never
-- guessed. Neither raises: a caller's argument is checked with `utf8_ok`.
local type, tonumber = type, tonumber
local byte, char, sub, find, match, format = string.byte, string.char, string.sub,
                                              string.find, string.match, string.format
local concat, floor = table.concat, math.floor
local osdate = os.date

local _M = {}

--- The storage format's version kazoo writes (NonBlockingLease._version).
_M.VERSION = 1

local SHORT = { [34] = '\\"', [92] = "\\\\", [8] = "\\b", [12] = "\\f", [10] = "\\n",
                [13] = "\\r", [9] = "\\t" }


-- The code point of the UTF-8 sequence at s[i], and the index after it;
-- nil for bytes that are not UTF-8 (overlong forms, surrogates, > U+10FFFF,
-- a cut sequence), as Python's strict decoder refuses them.
local function utf8_at(s, i)
    local b = byte(s, i)
    if b < 0x80 then
        return b, i + 1
    end
    local n, cp, min
    if b >= 0xC2 and b <= 0xDF then
        n, cp, min = 1, b - 0xC0, 0x80
    elseif b >= 0xE0 and b <= 0xEF then
        n, cp, min = 2, b - 0xE0, 0x800
    elseif b >= 0xF0 and b <= 0xF4 then
        n, cp, min = 3, b - 0xF0, 0x10000
    else
        return nil
    end
    for k = i + 1, i + n do
        local c = byte(s, k)
        if not c or c < 0x80 or c > 0xBF then
            return nil
        end
        cp = cp * 64 + (c - 0x80)
    end
    if cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then
        return nil
    end
    return cp, i + n + 1
end


--- Is `s` valid UTF-8 (what kazoo can decode)?
function _M.utf8_ok(s)
    local i, n = 1, #s
    while i <= n do
        local _, nxt = utf8_at(s, i)
        if not nxt then
            return false
        end
        i = nxt
    end
    return true
end


-- A UTF-8 string as json.dumps writes it, quotes included; nil for bytes
-- that are not UTF-8.
local function encode_string(s)
    local out, i, n = { '"' }, 1, #s
    while i <= n do
        local cp, nxt = utf8_at(s, i)
        if not cp then
            return nil
        end
        if SHORT[cp] then
            out[#out + 1] = SHORT[cp]
        elseif cp >= 0x20 and cp <= 0x7E then
            out[#out + 1] = char(cp)
        elseif cp < 0x10000 then
            out[#out + 1] = format("\\u%04x", cp)
        else
            local v = cp - 0x10000
            out[#out + 1] = format("\\u%04x\\u%04x", 0xD800 + floor(v / 1024), 0xDC00 + v % 1024)
        end
        i = nxt
    end
    out[#out + 1] = '"'
    return concat(out)
end


--- `t` (UTC seconds since the epoch) as kazoo writes a lease's end.
function _M.format_time(t)
    return osdate("!%Y-%m-%dT%H:%M:%S", floor(t))
end


-- Days from 1970-01-01 to the civil date y-m-d (proleptic Gregorian).
local function days_from_civil(y, m, d)
    if m <= 2 then
        y = y - 1
    end
    local era = floor(y / 400)
    local yoe = y - era * 400
    local mp = m > 2 and m - 3 or m + 9
    local doy = floor((153 * mp + 2) / 5) + d - 1
    local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
    return era * 146097 + doe - 719468
end


local MONTH_DAYS = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }

--- A lease's end as kazoo writes it, in UTC seconds since the epoch; nil
--- for any other text.
function _M.parse_time(s)
    local y, mo, d, h, mi, sec = match(s, "^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)$")
    if not y then
        return nil
    end
    y, mo, d, h, mi, sec = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi),
                           tonumber(sec)
    if mo < 1 or mo > 12 or d < 1 or d > MONTH_DAYS[mo] or h > 23 or mi > 59 or sec > 59 then
        return nil
    end
    return days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec
end


--- The record's bytes, exactly as kazoo's json.dumps writes them; nil when
--- `holder` is not UTF-8.
function _M.encode(version, holder, ends)
    local h = encode_string(holder)
    if not h then
        return nil
    end
    return format('{"version": %d, "holder": %s, "end": "%s"}', version, h, _M.format_time(ends))
end


-- ---------------------------------------------------------------------------
-- Decoding: a flat JSON object of strings and numbers.

local WS = "^[ \t\n\r]*()"
local UNESCAPE = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n",
                   r = "\r", t = "\t" }

-- A JSON string starting at s[i] (the quote): its UTF-8 value and the
-- index after it, or nil.
local function decode_string(s, i)
    local out, k = {}, i + 1
    while true do
        local c = byte(s, k)
        if not c or c < 0x20 then
            return nil
        elseif c == 34 then
            return concat(out), k + 1
        elseif c == 92 then
            local e = sub(s, k + 1, k + 1)
            local short = UNESCAPE[e]
            if short then
                out[#out + 1] = short
                k = k + 2
            elseif e == "u" then
                local cp = match(s, "^%x%x%x%x", k + 2)
                if not cp then
                    return nil
                end
                cp, k = tonumber(cp, 16), k + 6
                if cp >= 0xD800 and cp <= 0xDBFF then
                    local lo = match(s, "^\\u(%x%x%x%x)", k)
                    lo = lo and tonumber(lo, 16)
                    if not lo or lo < 0xDC00 or lo > 0xDFFF then
                        return nil      -- a lone surrogate is no character
                    end
                    cp, k = 0x10000 + (cp - 0xD800) * 1024 + (lo - 0xDC00), k + 6
                elseif cp >= 0xDC00 and cp <= 0xDFFF then
                    return nil
                end
                if cp < 0x80 then
                    out[#out + 1] = char(cp)
                elseif cp < 0x800 then
                    out[#out + 1] = char(0xC0 + floor(cp / 64), 0x80 + cp % 64)
                elseif cp < 0x10000 then
                    out[#out + 1] = char(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64,
                                         0x80 + cp % 64)
                else
                    out[#out + 1] = char(0xF0 + floor(cp / 262144), 0x80 + floor(cp / 4096) % 64,
                                         0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
                end
            else
                return nil
            end
        else
            -- a run of plain bytes, kept as they are once checked as UTF-8
            local stop = find(s, '["\\%c]', k) or #s + 1
            local run = sub(s, k, stop - 1)
            if not _M.utf8_ok(run) then
                return nil
            end
            out[#out + 1] = run
            k = stop
        end
    end
end


-- A JSON number at s[i] (-?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?) and the index
-- after it, or nil.
local function decode_number(s, i)
    local k = byte(s, i) == 45 and i + 1 or i
    local int = match(s, "^%d+", k)
    if not int or (#int > 1 and byte(int) == 48) then
        return nil
    end
    k = k + #int
    local frac = match(s, "^%.%d+", k)
    k = k + (frac and #frac or 0)
    local exp = match(s, "^[eE][%+%-]?%d+", k)
    k = k + (exp and #exp or 0)
    return tonumber(sub(s, i, k - 1)), k
end


--- The fields of a record (a table of string keys to strings and
--- numbers), or nil and why. A key given twice keeps its last value, as
--- json.loads does.
function _M.decode_object(s)
    if type(s) ~= "string" then
        return nil, "no data"
    end
    local i = match(s, WS, 1)
    if byte(s, i) ~= 123 then
        return nil, "not a JSON object"
    end
    local fields = {}
    i = match(s, WS, i + 1)
    if byte(s, i) == 125 then
        i = i + 1
    else
        while true do
            if byte(s, i) ~= 34 then
                return nil, "a key is not a string"
            end
            local key
            key, i = decode_string(s, i)
            if not key then
                return nil, "a key is not a valid JSON string"
            end
            i = match(s, WS, i)
            if byte(s, i) ~= 58 then
                return nil, "no ':' after a key"
            end
            i = match(s, WS, i + 1)
            local v
            if byte(s, i) == 34 then
                v, i = decode_string(s, i)
            else
                v, i = decode_number(s, i)
            end
            if v == nil then
                return nil, "the value of '" .. key .. "' is not a string or a number"
            end
            fields[key] = v
            i = match(s, WS, i)
            local c = byte(s, i)
            if c == 125 then
                i = i + 1
                break
            elseif c ~= 44 then
                return nil, "no ',' or '}' after a value"
            end
            i = match(s, WS, i + 1)
        end
    end
    if match(s, WS, i) ~= #s + 1 then
        return nil, "text after the object"
    end
    return fields
end


--- A lease record: { version =, holder =, ends = } (ends in UTC seconds
--- since the epoch), or nil and why. `version` is whatever number was
--- stored (the caller judges it); a record of another version may have
--- other fields, so only `version` is required of it. Fields beyond the
--- three are ignored, as kazoo ignores them.
function _M.decode(s)
    local fields, why = _M.decode_object(s)
    if not fields then
        return nil, why
    end
    local version = fields.version
    if type(version) ~= "number" then
        return nil, "no version number"
    end
    if version ~= _M.VERSION then
        return { version = version, holder = fields.holder, ends = nil }
    end
    if type(fields.holder) ~= "string" or type(fields["end"]) ~= "string" then
        return nil, "no holder or end string"
    end
    local ends = _M.parse_time(fields["end"])
    if not ends then
        return nil, "end is not a %Y-%m-%dT%H:%M:%S time"
    end
    return { version = version, holder = fields.holder, ends = ends }
end


return _M
