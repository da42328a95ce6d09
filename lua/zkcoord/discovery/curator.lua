--- zkcoord.discovery.curator: service instances in Curator's JSON
--- (curator-x-discovery's JsonInstanceSerializer, Curator 5.4) (internal).
--
-- Fields, in the order Curator writes them: name, id, address, port,
-- sslPort, payload, registrationTimeUTC, serviceType, uriSpec. Curator's
-- default serializer leaves "enabled" out (its "compatible" form, readable
-- by Curator before 4.0); we write it only for a disabled instance, and a
-- missing one reads as true. A table payload carries Jackson's type id
-- "@class" first (Curator's ServiceInstance types it by class name): the
-- payload's own "@class" if it has one, else the discovery's payload_class.
-- A string payload is a bare JSON string, as Curator writes a String.
-- uriSpec is Curator's UriSpec object ({"parts":[{"value":..,"variable":..}]}),
-- a template string ("{scheme}://{address}:{port}/x") on our side.
local json = require "zkcoord.discovery.json"

local type, pairs, ipairs, tostring, tonumber = type, pairs, ipairs, tostring, tonumber
local setmetatable = setmetatable
local concat = table.concat
local floor = math.floor
local tointeger = rawget(math, "tointeger") or function(x) return x end   -- 5.3+: 8080, not 8080.0

local _M = {}

local FIELDS = { "name", "id", "address", "port", "sslPort", "payload",
                 "registrationTimeUTC", "serviceType", "uriSpec" }
_M.FIELDS = FIELDS

--- Milliseconds since the epoch (registrationTimeUTC): nginx's clock in
--- nginx, the system's through LuaJIT's ffi where it works, else whole
--- seconds (the FFI is never required).
local function seconds_ms()
    return os.time() * 1000
end

local function ffi_ms()
    local ok, ffi = pcall(require, "ffi")
    if not ok then
        return nil
    end
    pcall(ffi.cdef, "struct zkcoord_timeval { long tv_sec; long tv_usec; };")
    pcall(ffi.cdef, "int gettimeofday(struct zkcoord_timeval *tv, void *tz);")
    local made, tv = pcall(ffi.new, "struct zkcoord_timeval")
    local function ms()
        ffi.C.gettimeofday(tv, nil)
        return tonumber(tv.tv_sec) * 1000 + floor(tonumber(tv.tv_usec) / 1000)
    end
    -- another module may have declared gettimeofday otherwise: then not ours
    if made and pcall(ms) then
        return ms
    end
end

local wall_ms
local ngx = rawget(_G, "ngx")
if ngx and ngx.now then
    wall_ms = function() return floor(ngx.now() * 1000) end
else
    wall_ms = ffi_ms() or seconds_ms
end
_M.wall_ms = wall_ms


--- Curator's UriSpec parts of a template: text outside braces is literal,
--- a {name} a variable; empty literals are left out (as Curator does).
function _M.uri_parts(template)
    local parts = {}
    local pos = 1
    while true do
        local open = template:find("{", pos, true)
        local close = open and template:find("}", open + 1, true)
        if not close then
            break
        end
        if open > pos then
            parts[#parts + 1] = { value = template:sub(pos, open - 1), variable = false }
        end
        parts[#parts + 1] = { value = template:sub(open + 1, close - 1), variable = true }
        pos = close + 1
    end
    if pos <= #template then
        parts[#parts + 1] = { value = template:sub(pos), variable = false }
    end
    return parts
end

local function uri_template(spec)
    if type(spec) ~= "table" or type(spec.parts) ~= "table" then
        return nil
    end
    local out = {}
    for i, p in ipairs(spec.parts) do
        local v = type(p) == "table" and tostring(p.value) or ""
        out[i] = (type(p) == "table" and p.variable == true) and "{" .. v .. "}" or v
    end
    return concat(out)
end

local function uri_json(template)
    local parts = {}
    for i, p in ipairs(_M.uri_parts(template)) do
        parts[i] = assert(json.object(p, { "value", "variable" }))
    end
    return '{"parts":[' .. concat(parts, ",") .. "]}"
end


--- The JSON of instance `inst` (our field names, as instances() gives
--- them); `payload_class` types a table payload without "@class".
---@return string|nil text, string? err what JSON cannot hold
function _M.encode(inst, payload_class)
    local payload = inst.payload
    if type(payload) == "table" and payload["@class"] == nil then
        local typed = { ["@class"] = payload_class }
        for k, v in pairs(payload) do typed[k] = v end
        payload = typed
    end
    local body = {
        name = inst.name, id = inst.id, address = inst.address, port = inst.port,
        sslPort = inst.sslPort, payload = payload,
        registrationTimeUTC = inst.registrationTimeUTC, serviceType = inst.serviceType,
    }
    local text, err = json.object(body, { "name", "id", "address", "port", "sslPort",
                                          "payload", "registrationTimeUTC", "serviceType" })
    if not text then
        return nil, err
    end
    -- uriSpec and enabled are not plain values: appended in their place.
    text = text:sub(1, -2) .. ',"uriSpec":'
           .. (inst.uriSpec and uri_json(inst.uriSpec) or "null")
    if inst.enabled == false then
        text = text .. ',"enabled":false'
    end
    return text .. "}"
end


local function field(v)
    if v == json.null then
        return nil
    end
    if type(v) == "number" then
        return tointeger(v) or v
    end
    return v
end

-- lua-cjson reads every number as a float: on 5.3+ the integral ones in a
-- payload become integers again (what Jackson wrote as 3 reads as 3, not
-- 3.0; a 3.0 reads as 3 too: JSON does not tell them apart for us).
local function integers(v, depth)
    if type(v) == "number" then
        return tointeger(v) or v
    end
    if type(v) == "table" and depth < 100 then
        for k, x in pairs(v) do
            v[k] = integers(x, depth + 1)
        end
    end
    return v
end

local instance_mt = { __name = "zkcoord.service_instance" }
_M.instance_mt = instance_mt

--- The instance in `text` (a node's data); nil, "badformat" when it is
--- not an object with a string name and id.
function _M.decode(text)
    local v = text and json.decode(text)
    if type(v) ~= "table" or type(v.id) ~= "string" or type(v.name) ~= "string" then
        return nil, "badformat"
    end
    local inst = {}
    for _, k in ipairs(FIELDS) do
        inst[k] = field(v[k])
    end
    if rawget(math, "tointeger") then
        inst.payload = integers(inst.payload, 0)
    end
    inst.uriSpec = uri_template(v.uriSpec)
    inst.enabled = v.enabled ~= false
    return setmetatable(inst, instance_mt)
end

return _M
