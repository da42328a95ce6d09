--- zkcoord.counter.format: how a counter's value is stored in its node.
--
-- Owns the three encodings and the integer range every counter value keeps:
--   "text"  a decimal integer string ("42", "-7"): kazoo's Counter default;
--           -(2^53-1) .. 2^53-1
--   "int32" 4 bytes, big-endian two's complement: Curator's SharedCount;
--           -2^31 .. 2^31-1
--   "int64" 8 bytes, big-endian two's complement: Curator's
--           DistributedAtomicLong; only -(2^53-1) .. 2^53-1 (exact in a Lua
--           number): a stored long beyond that does not decode
-- Rule: a value is an integer a Lua number holds exactly (|v| <= 2^53-1),
-- so the arithmetic here is exact in doubles: byte arithmetic with
-- string.byte/char, as Java's ByteBuffer writes ints and longs. Each
-- format is { lo =, hi =, range =, encode(v) -> data, decode(data) -> v |
-- nil, detail }; decode never raises on bad data.
local type, tonumber = type, tonumber
local format, match, byte, char = string.format, string.match, string.byte, string.char
local floor = math.floor

-- Lua 5.3+: values as integers (math.tointeger is not in every VM).
local tointeger = rawget(math, "tointeger") or function(v) return v end

local _M = {}

local MAX = 2 ^ 53 - 1
local TWO32 = 2 ^ 32

_M.MAX = MAX
_M.tointeger = tointeger


--- Is `v` an integer in -(2^53-1) .. 2^53-1?
function _M.is_int(v)
    return type(v) == "number" and v == v and v % 1 == 0 and v >= -MAX and v <= MAX
end
local is_int = _M.is_int


local function decode_text(data)
    local v = match(data, "^%s*(%-?%d+)%s*$") and tonumber(data)
    if not is_int(v) then
        return nil, "holds no integer in -(2^53-1)..2^53-1: " .. format("%q", data:sub(1, 40))
    end
    return v
end


local function encode_int32(v)
    if v < 0 then
        v = v + TWO32
    end
    return char(floor(v / 16777216) % 256, floor(v / 65536) % 256, floor(v / 256) % 256, v % 256)
end


local function decode_int32(data)
    if #data ~= 4 then
        return nil, ("holds %d bytes, not a 4-byte int (format int32)"):format(#data)
    end
    local b1, b2, b3, b4 = byte(data, 1, 4)
    local v = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
    if b1 >= 128 then
        v = v - TWO32
    end
    return tointeger(v)
end


local function encode_int64(v)
    local hi = floor(v / TWO32)            -- -2^21 .. 2^21-1
    local lo = v - hi * TWO32              -- 0 .. 2^32-1
    if hi < 0 then
        hi = hi + TWO32
    end
    return encode_int32(hi) .. encode_int32(lo)
end


local function decode_int64(data)
    if #data ~= 8 then
        return nil, ("holds %d bytes, not an 8-byte long (format int64)"):format(#data)
    end
    local b1, b2, b3, b4, b5, b6, b7, b8 = byte(data, 1, 8)
    local hi = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
    local lo = ((b5 * 256 + b6) * 256 + b7) * 256 + b8
    if b1 >= 128 then
        hi = hi - TWO32
    end
    -- |hi| < 2^21 keeps hi * 2^32 + lo exact; the range check does the rest.
    local v = (hi >= -2097152 and hi < 2097152) and hi * TWO32 + lo
    if not (v and v >= -MAX and v <= MAX) then
        return nil, ("holds a long beyond what a Lua number represents exactly, "
                     .. "+-(2^53-1): 0x%02x%02x%02x%02x%02x%02x%02x%02x")
                    :format(b1, b2, b3, b4, b5, b6, b7, b8)
    end
    return tointeger(v)
end


--- The formats by name.
_M.formats = {
    text = { lo = -MAX, hi = MAX, range = "-(2^53-1)..2^53-1",
             encode = function(v) return format("%d", v) end, decode = decode_text },
    int32 = { lo = -2 ^ 31, hi = 2 ^ 31 - 1, range = "-2^31..2^31-1",
              encode = encode_int32, decode = decode_int32 },
    int64 = { lo = -MAX, hi = MAX, range = "-(2^53-1)..2^53-1",
              encode = encode_int64, decode = decode_int64 },
}

return _M
