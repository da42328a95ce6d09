-- SHA-1, base64 and ZooKeeper's digest ids in plain LuaJIT (the `bit`
-- library), for the security spec: it computes the ACL id of a user
-- independently of the code under test.
--
--   digest.sha1(s)            -- 20 raw bytes
--   digest.sha1_hex(s)        -- 40 hex digits
--   digest.base64(s)          -- standard alphabet, '=' padding
--   digest.id(user, password) -- "user:" .. base64(sha1("user:password")), the id
--                                ZooKeeper's DigestAuthenticationProvider gives
local bit = require "bit"

local band, bor, bxor, bnot = bit.band, bit.bor, bit.bxor, bit.bnot
local lshift, rshift, rol, tobit = bit.lshift, bit.rshift, bit.rol, bit.tobit
local byte, char, concat, rep, format = string.byte, string.char, table.concat, string.rep,
    string.format

local _M = {}


local function be32(s, i)
    local a, b, c, d = byte(s, i, i + 3)
    return bor(lshift(a, 24), lshift(b, 16), lshift(c, 8), d)
end


local function word_bytes(w)
    return char(band(rshift(w, 24), 255), band(rshift(w, 16), 255),
                band(rshift(w, 8), 255), band(w, 255))
end


--- SHA-1 (FIPS 180-4) of `msg`: 20 raw bytes.
function _M.sha1(msg)
    assert(type(msg) == "string", "sha1: string expected")
    local len = #msg
    -- Padding: 0x80, zeros to 56 mod 64, then the length in bits (64-bit big-endian).
    local bits = len * 8
    local hi = math.floor(bits / 4294967296)
    local lo = bits % 4294967296
    local pad = 64 - ((len + 9) % 64)
    if pad == 64 then pad = 0 end
    msg = msg .. "\128" .. rep("\0", pad) .. word_bytes(tobit(hi)) .. word_bytes(tobit(lo))

    local h0, h1, h2, h3, h4 = tobit(0x67452301), tobit(0xEFCDAB89), tobit(0x98BADCFE),
        tobit(0x10325476), tobit(0xC3D2E1F0)
    local w = {}
    for chunk = 1, #msg, 64 do
        for i = 0, 15 do
            w[i] = be32(msg, chunk + i * 4)
        end
        for i = 16, 79 do
            w[i] = rol(bxor(w[i - 3], w[i - 8], w[i - 14], w[i - 16]), 1)
        end
        local a, b, c, d, e = h0, h1, h2, h3, h4
        for i = 0, 79 do
            local f, k
            if i < 20 then
                f, k = bor(band(b, c), band(bnot(b), d)), 0x5A827999
            elseif i < 40 then
                f, k = bxor(b, c, d), 0x6ED9EBA1
            elseif i < 60 then
                f, k = bor(band(b, c), band(b, d), band(c, d)), 0x8F1BBCDC
            else
                f, k = bxor(b, c, d), 0xCA62C1D6
            end
            local temp = tobit(rol(a, 5) + f + e + k + w[i])
            e, d, c, b, a = d, c, rol(b, 30), a, temp
        end
        h0, h1, h2, h3, h4 = tobit(h0 + a), tobit(h1 + b), tobit(h2 + c), tobit(h3 + d),
            tobit(h4 + e)
    end
    return word_bytes(h0) .. word_bytes(h1) .. word_bytes(h2) .. word_bytes(h3) .. word_bytes(h4)
end


function _M.sha1_hex(msg)
    return (_M.sha1(msg):gsub(".", function(c) return format("%02x", byte(c)) end))
end


local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


--- Base64 (RFC 4648, standard alphabet, with padding).
function _M.base64(s)
    assert(type(s) == "string", "base64: string expected")
    local out = {}
    for i = 1, #s, 3 do
        local a, b, c = byte(s, i, i + 2)
        local n = lshift(a, 16) + lshift(b or 0, 8) + (c or 0)
        local c1 = band(rshift(n, 18), 63) + 1
        local c2 = band(rshift(n, 12), 63) + 1
        local c3 = band(rshift(n, 6), 63) + 1
        local c4 = band(n, 63) + 1
        out[#out + 1] = ALPHABET:sub(c1, c1) .. ALPHABET:sub(c2, c2)
            .. (b and ALPHABET:sub(c3, c3) or "=") .. (c and ALPHABET:sub(c4, c4) or "=")
    end
    return concat(out)
end


--- ZooKeeper's digest ACL id for user:password.
function _M.id(user, password)
    return user .. ":" .. _M.base64(_M.sha1(user .. ":" .. password))
end


return _M
