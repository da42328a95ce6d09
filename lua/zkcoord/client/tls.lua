--- zkcoord.client.tls: connect's `tls` option (internal): TLS with a
--- client certificate, kazoo's names (ca, certfile, keyfile,
--- keyfile_password, verify).
--
-- libzookeeper 3.8's zookeeper_init_ssl takes one string "ca,cert,key,
-- passwd" that it cuts at commas (strtok: no comma in a path, no empty
-- field), always verifies the server's chain against the CA file and the
-- system's CAs (not its host name), and needs a client certificate and a
-- PEM key. It says nothing when a file does not load or a handshake fails:
-- it tries every server again until the connect timeout. So connect loads
-- the files first (core.tls_check, as libzookeeper loads them), and when no
-- server has answered after CHECK_AFTER, makes a handshake of its own to
-- each server to tell a TLS failure ("tls", why) from a slow server.
-- Only a core built with scripts/build.sh --tls has core.tls_check.
local core = require "zkcoord.core"

local type, pairs, ipairs, tostring, find, min = type, pairs, ipairs, tostring, string.find, math.min

local _M = {}

local KEYS = { ca = true, certfile = true, keyfile = true, keyfile_password = true,
               verify = true }

-- Seconds a TLS connect may take before connect asks the servers why.
_M.CHECK_AFTER = 1
-- Seconds one server's handshake may take in that check.
local HANDSHAKE_TIMEOUT = 1

local NO_TLS = "tls needs a core built with TLS: the system's libzookeeper_mt has no "
    .. "OpenSSL (Debian's). Build one: scripts/build.sh --tls, then use "
    .. "ZKCOORD_CPATH=build-tls/lib/?.so or install build-tls/lib/zkcoord/core.so "
    .. "(README, \"TLS\")"


local function path(t, k, bad, optional)
    local v = t[k]
    if v == nil and optional then
        return nil
    end
    if type(v) ~= "string" or v == "" then
        bad("tls." .. k .. " must be a non-empty string"
            .. ((k == "certfile" or k == "keyfile")
                and " (libzookeeper's TLS always sends a client certificate)" or ""))
    end
    if find(v, ",", 1, true) or find(v, "%c") then
        bad("tls." .. k .. " must not contain ',' or control characters "
            .. "(libzookeeper cuts its TLS string at commas)")
    end
    return v
end


--- Checks connect's `tls` table (raising with `bad`, options.lua's) and
--- returns { ca =, certfile =, keyfile =, keyfile_password =, string = }
--- (string: zookeeper_init_ssl's), or nil without tls.
function _M.check(t, bad)
    if t == nil then
        return nil
    end
    for k in pairs(t) do
        if not KEYS[k] then
            bad("unknown tls option '" .. tostring(k)
                .. "' (ca, certfile, keyfile, keyfile_password, verify)")
        end
    end
    if t.verify ~= nil and t.verify ~= true then
        bad("tls.verify must be true: libzookeeper always verifies the server's certificate "
            .. "chain (against tls.ca and the system's CAs; not its host name)")
    end
    local c = {
        ca = path(t, "ca", bad),
        certfile = path(t, "certfile", bad),
        keyfile = path(t, "keyfile", bad),
        keyfile_password = path(t, "keyfile_password", bad, true),
    }
    if not core.tls_check then
        bad(NO_TLS)
    end
    c.string = c.ca .. "," .. c.certfile .. "," .. c.keyfile
        .. (c.keyfile_password and "," .. c.keyfile_password or "")
    return c
end


--- The files loaded as libzookeeper will load them: true, or nil, "tls",
--- which file and OpenSSL's reason.
function _M.check_files(c)
    if not c then
        return true
    end
    local ok, _, detail = core.tls_check(c.ca, c.certfile, c.keyfile, c.keyfile_password)
    if not ok then
        return nil, "tls", detail
    end
    return true
end


--- Why no server answered a TLS connect: nil unless every server that
--- could be reached failed its handshake (then "the first one's reason").
--- Blocks up to HANDSHAKE_TIMEOUT per server, `left` seconds in all: only
--- for the blocking waiter (nginx workers must not block; they get the
--- connect timeout's error).
function _M.failure(c, waiter, endpoints, left)
    if not c or waiter.name ~= "blocking" then
        return nil
    end
    local first
    for _, e in ipairs(endpoints) do
        if left <= 0 then
            return nil
        end
        local t0 = core.now()
        local ok, why, detail = core.tls_check(c.ca, c.certfile, c.keyfile, c.keyfile_password,
                                               e.host, e.port, min(HANDSHAKE_TIMEOUT, left))
        left = left - (core.now() - t0)
        if ok then
            return nil       -- this one is fine: libzookeeper will get there
        elseif why ~= "unreachable" then
            first = first or detail
        end
    end
    return first
end


return _M
