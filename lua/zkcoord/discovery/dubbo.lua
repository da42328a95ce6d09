--- zkcoord.discovery.dubbo: Dubbo providers as service instances (internal).
--
-- Dubbo's ZooKeeper registry writes one node per provider under
-- /dubbo/<interface>/providers, named by the provider's URL, URL-encoded
-- (Dubbo's URL.encode(url.toFullString())):
--   dubbo%3A%2F%2F10.0.0.1%3A20880%2Fcom.foo.Bar%3Fanyhost%3Dtrue%26weight%3D100
-- Decoded once, as Dubbo's URL.valueOf(URL.decode(name)) does:
--   protocol://host:port/path?key=value&key=value
-- The instance: id = the node's name, name = the interface, address, port,
-- protocol, payload = the parameters (strings, as Dubbo keeps them),
-- weight (parameter "weight", Dubbo's default 100), enabled (false for
-- enabled=false or disabled=true), registrationTimeUTC (parameter
-- "timestamp"), serviceType "DYNAMIC" (Dubbo's provider nodes are ephemeral
-- by default).
local tonumber, setmetatable = tonumber, setmetatable
local char, gsub, match, gmatch = string.char, string.gsub, string.match, string.gmatch
local floor = math.floor

local _M = {}

--- The node under which `interface`'s providers are (root: "/dubbo").
function _M.providers_path(root, interface)
    return (root == "/" and "" or root) .. "/" .. interface .. "/providers"
end

local function hex_char(h)
    return char(tonumber(h, 16))
end

--- Percent-decoding, "+" as a space (java.net.URLDecoder, which Dubbo uses).
function _M.url_decode(s)
    return (gsub(gsub(s, "+", " "), "%%(%x%x)", hex_char))
end

--- The instance of provider node `name`; nil, "badformat" for a name that
--- is not a URL with a host.
function _M.decode(name, interface, instance_mt)
    local url = _M.url_decode(name)
    local protocol, rest = match(url, "^([%w%.%+%-]+)://(.*)$")
    if not protocol then
        return nil, "badformat"
    end
    local authority, path, query = match(rest, "^([^/?]*)/?([^?]*)%??(.*)$")
    authority = gsub(authority, "^.*@", "")          -- user:password@
    local host, port = match(authority, "^%[([^%]]+)%]:?(%d*)$")   -- [v6]:port
    if not host then
        host, port = match(authority, "^([^:]*):?(%d*)$")
    end
    if not host or host == "" then
        return nil, "badformat"
    end
    local params = {}
    for pair in gmatch(query, "[^&]+") do
        local k, v = match(pair, "^([^=]*)=(.*)$")
        if k and k ~= "" then
            params[k] = v
        elseif not k then
            params[pair] = pair                     -- Dubbo: a bare key maps to itself
        end
    end
    local timestamp = tonumber(params.timestamp)
    return setmetatable({
        id = name,
        name = interface or params.interface or path,
        address = host,
        port = tonumber(port),
        protocol = protocol,
        payload = params,
        weight = tonumber(params.weight) or 100,
        enabled = params.enabled ~= "false" and params.disabled ~= "true",
        registrationTimeUTC = timestamp and floor(timestamp),
        serviceType = "DYNAMIC",
    }, instance_mt)
end

return _M
