--- zkcoord.client.acl: ACLs as the client takes and returns them (internal):
--- names ("open", "creator_all", "read") or arrays of
--- { perms = "rwcda" | number, scheme =, id = }.
--
-- Plain functions on values: none reads a client's fields.
local C = require("zkcoord.core").c
local argerror = require("zkcoord.util.args").argerror
local type, ipairs = type, ipairs
local floor, concat = math.floor, table.concat

local _M = {}

local PERM_BITS = { r = C.PERM_READ, w = C.PERM_WRITE, c = C.PERM_CREATE,
                    d = C.PERM_DELETE, a = C.PERM_ADMIN }
local PERM_ORDER = { "r", "w", "c", "d", "a" }

_M.NAMED = {
    open = { { perms = C.PERM_ALL, scheme = "world", id = "anyone" } },
    creator_all = { { perms = C.PERM_ALL, scheme = "auth", id = "" } },
    read = { { perms = C.PERM_READ, scheme = "world", id = "anyone" } },
}


local function perms_to_string(n)
    local out = {}
    for _, k in ipairs(PERM_ORDER) do
        if floor(n / PERM_BITS[k]) % 2 == 1 then
            out[#out + 1] = k
        end
    end
    return concat(out)
end


local function perms_bits(perms, fname, n)
    local bits, seen = 0, {}
    for ch in perms:gmatch(".") do
        local b = PERM_BITS[ch]
        if not b then
            argerror(n, fname, "unknown permission '" .. ch .. "' (use r w c d a)", 4)
        end
        if not seen[ch] then    -- "rr" is read, not write (bits do not add up twice)
            seen[ch] = true
            bits = bits + b
        end
    end
    return bits
end


--- The C core's form of an ACL argument (nil stays nil); raises on a
--- malformed one, as argument `n` of `fname`.
function _M.normalize(acl, fname, n)
    if type(acl) == "nil" then
        return nil
    end
    if type(acl) == "string" then
        local named = _M.NAMED[acl]
        if not named then
            argerror(n, fname, "unknown ACL name '" .. acl .. "' (open, creator_all, read)", 3)
        end
        return named
    end
    if type(acl) ~= "table" or #acl == 0 then
        argerror(n, fname, "acl must be a name or a non-empty array", 3)
    end
    local out = {}
    for i, e in ipairs(acl) do
        if type(e) ~= "table" or type(e.scheme) ~= "string" or type(e.id) ~= "string" then
            argerror(n, fname, "acl entry " .. i .. " needs string scheme and id", 3)
        end
        local perms = e.perms
        if type(perms) == "string" then
            perms = perms_bits(perms, fname, n)
        elseif type(perms) ~= "number" or perms % 1 ~= 0 or perms < 0 or perms > 31 then
            argerror(n, fname, "acl entry " .. i .. " perms must be a string like 'rwcda'", 3)
        end
        out[i] = { perms = perms, scheme = e.scheme, id = e.id }
    end
    return out
end


--- An ACL the server returned, with perms as letters ("rwcda").
function _M.export(acl)
    for _, e in ipairs(acl) do
        e.perms = perms_to_string(e.perms)
    end
    return acl
end


--- Bytes an ACL adds to a request packet.
function _M.bytes(acl)
    local n = 4
    for _, e in ipairs(acl or {}) do
        n = n + 12 + #e.scheme + #e.id
    end
    return n
end


return _M
