--- zkcoord.client.sasl: connect's `sasl` option (internal): SASL
--- authentication of the session, kazoo's names (its `sasl_options`:
--- mechanism, username, password, service, host).
--
-- libzookeeper 3.8 runs the SASL exchange itself after each handshake
-- (zookeeper_init_sasl, Cyrus SASL's client plugins); a failed exchange
-- ends the handle in ZOO_AUTH_FAILED_STATE, which connect reports as
-- "sasl". Only a core built with scripts/build.sh --secure has
-- core.sasl_mechanisms.
local core = require "zkcoord.core"

local type, pairs, tostring, find = type, pairs, tostring, string.find

local _M = {}

local KEYS = { mechanism = true, username = true, password = true, service = true, host = true }

-- DIGEST-MD5: ZooKeeper's DigestLoginModule users (JAAS user_<name>="...");
-- GSSAPI: Kerberos, the principal from the credential cache (kinit).
local MECHANISMS = { ["DIGEST-MD5"] = true, GSSAPI = true }

-- The Cyrus SASL client plugin of each mechanism, in Debian's packages.
local PLUGIN_PACKAGE = { ["DIGEST-MD5"] = "libsasl2-modules",
                         GSSAPI = "libsasl2-modules-gssapi-mit" }

local NO_SASL = "sasl needs a core built with SASL: the system's libzookeeper_mt has no "
    .. "Cyrus SASL (Debian's). Build one: scripts/build.sh --secure, then use "
    .. "ZKCOORD_CPATH=build-tls/lib/?.so or install build-tls/lib/zkcoord/core.so "
    .. "(docs/install.md, \"SASL\")"


local function text(t, k, bad, optional)
    local v = t[k]
    if v == nil and optional then
        return nil
    end
    if type(v) ~= "string" or v == "" then
        bad("sasl." .. k .. " must be a non-empty string")
    end
    if find(v, "%z") then
        bad("sasl." .. k .. " must not contain a NUL byte")
    end
    return v
end


--- Checks connect's `sasl` table (raising with `bad`, options.lua's) and
--- returns { mechanism =, username =, password =, service =, host = }
--- with kazoo's defaults (service "zookeeper"; host "zk-sasl-md5",
--- ZooKeeper's DIGEST-MD5 server name, or for GSSAPI the server's host
--- name), or nil without sasl.
function _M.check(t, bad)
    if t == nil then
        return nil
    end
    for k in pairs(t) do
        if not KEYS[k] then
            bad("unknown sasl option '" .. tostring(k)
                .. "' (mechanism, username, password, service, host)")
        end
    end
    local mech = t.mechanism
    if not MECHANISMS[mech] then
        bad("sasl.mechanism must be \"DIGEST-MD5\" or \"GSSAPI\"")
    end
    local digest = mech == "DIGEST-MD5"
    local c = {
        mechanism = mech,
        username = text(t, "username", bad, not digest),
        password = text(t, "password", bad, not digest),
        service = text(t, "service", bad, true) or "zookeeper",
        host = text(t, "host", bad, true) or (digest and "zk-sasl-md5" or nil),
    }
    if not core.sasl_mechanisms then
        bad(NO_SASL)
    end
    return c
end


--- Whether this machine's Cyrus SASL has the mechanism's client plugin:
--- true, or nil, "sasl", what to install.
function _M.check_mechanism(c)
    if not c then
        return true
    end
    local list, err = core.sasl_mechanisms()
    if not list then
        return nil, "sasl", err
    end
    for m in list:gmatch("%S+") do
        if m == c.mechanism then
            return true
        end
    end
    return nil, "sasl", ("Cyrus SASL has no %s client plugin here (install %s)")
                        :format(c.mechanism, PLUGIN_PACKAGE[c.mechanism])
end


--- connect's error when the session ended in AUTH_FAILED: nil, "sasl",
--- detail with a SASL option (else ZooKeeper's "authfailed").
function _M.failure(c, hosts)
    if not c then
        return nil, "authfailed", "authentication failed at " .. hosts
    end
    return nil, "sasl", ("SASL authentication (%s%s) failed at %s: a wrong user name or "
                         .. "password, or a mechanism the server does not take")
                        :format(c.mechanism, c.username and ", user " .. c.username or "", hosts)
end


return _M
