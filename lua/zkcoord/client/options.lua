--- zkcoord.client.options: the connect options, checked and completed
--- (internal), and the waiter they name.
--
-- Plain functions on the options table: each raises
-- "bad argument #1 to 'connect' (...)" before anything reaches the C core.
local checks = require "zkcoord.client.checks"

local argerror = require("zkcoord.util").argerror
local array_length, check_path = checks.array_length, checks.check_path
local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local find, concat = string.find, table.concat

local _M = {}

local DEFAULTS = {
    session_timeout = 10,
    connect_timeout = 5,
    reconnect = true,
    -- ZooKeeper's jute.maxbuffer (0xfffff): the server drops the connection
    -- on a request packet larger than this, so refuse it here instead.
    max_packet_size = 1048575,
    zk_log_level = 0,
}

local OPTION_KEYS = {
    servers = "string|table", session_timeout = "number", connect_timeout = "number",
    request_timeout = "number", chroot = "string", auth = "table", acl = "string|table",
    retry = "table", wait = "string|table", reconnect = "boolean",
    max_packet_size = "number", logger = "function", zk_log_level = "number",
    session_id = "string", session_password = "string", resolve_interval = "number",
    lost_after = "number",
}

-- Bytes a request adds around its path and data: length, xid, type,
-- string lengths, flags (each ACL entry adds more: acl.bytes).
_M.PACKET_OVERHEAD = 32

local RETRY_KEYS = { max_tries = true, base_delay = true, max_delay = true }

local WAITER_METHODS = { "event", "sleep", "defer" }

-- Every check here runs from connect (level 4: bad <- check_* <- check <- connect).
local function bad(msg)
    argerror(1, "connect", msg, 5)
end


local function hosts_string(servers)
    if type(servers) == "string" then
        if servers == "" then
            bad("servers must not be empty")
        end
        return servers
    end
    local n = type(servers) == "table" and array_length(servers)
    if not n or n == 0 then
        bad("servers must be a string or a non-empty array without holes")
    end
    for i = 1, n do
        local s = servers[i]
        if type(s) ~= "string" or s == "" then
            bad("servers[" .. i .. "] must be a non-empty string")
        end
    end
    return concat(servers, ",")
end


-- Raises unless `w` has the methods the client calls on every waiter.
local function check_waiter(w, what)
    if type(w) ~= "table" then
        bad(what .. " must be a table, got " .. type(w))
    end
    for _, m in ipairs(WAITER_METHODS) do
        if type(w[m]) ~= "function" then
            bad(what .. " has no method '" .. m .. "' (a waiter needs event, sleep and defer)")
        end
    end
end


-- Returns the auth entries: an array or nil.
local function check_auth(auth)
    if auth == nil then
        return nil
    end
    if auth.scheme ~= nil or auth.credentials ~= nil then
        auth = { auth }
    end
    local n = array_length(auth)
    if not n then
        bad("auth must be { scheme =, credentials = } or an array of them, without holes")
    end
    for i = 1, n do
        local a = auth[i]
        if type(a) ~= "table" or type(a.scheme) ~= "string" or a.scheme == ""
                or type(a.credentials) ~= "string" then
            bad("auth[" .. i .. "] must be a table with a non-empty string scheme "
                .. "and a string credentials")
        end
    end
    return auth
end


-- Returns the retry policy of idempotent reads.
local function check_retry(retry)
    retry = retry or {}
    for k in pairs(retry) do
        if not RETRY_KEYS[k] then
            bad("unknown retry option '" .. tostring(k) .. "' (max_tries, base_delay, max_delay)")
        end
    end
    local rp = {
        max_tries = retry.max_tries or 5,
        base_delay = retry.base_delay or 0.05,
        max_delay = retry.max_delay or 1,
    }
    local t = rp.max_tries
    if type(t) ~= "number" or not (t >= 1) or t % 1 ~= 0 then  -- luacheck: ignore 581 (NaN)
        bad("retry.max_tries must be an integer >= 1")
    end
    for _, k in ipairs({ "base_delay", "max_delay" }) do
        local v = rp[k]
        if type(v) ~= "number" or not (v >= 0 and v < math.huge) then
            bad("retry." .. k .. " must be a finite number of seconds >= 0")
        end
    end
    return rp
end


local function check_wait(w)
    if type(w) == "table" then
        if w.new ~= nil then
            if type(w.new) ~= "function" then
                bad("wait.new must be a function (client) -> waiter")
            end
        else
            check_waiter(w, "wait")
        end
    elseif w ~= nil and w ~= "auto" and w ~= "blocking" and w ~= "ngx" then
        bad("wait must be 'auto', 'blocking', 'ngx' or a waiter table")
    elseif w == "ngx" and not (type(ngx) == "table" and ngx.get_phase) then
        bad("wait = 'ngx' needs OpenResty (there is no ngx API here): use 'blocking' or 'auto'")
    end
end


local function check_timeouts(o)
    for _, k in ipairs({ "session_timeout", "connect_timeout", "request_timeout" }) do
        local v = o[k]
        if v ~= nil and not (v > 0 and v < 1e6) then
            bad("option '" .. k .. "' must be a positive number of seconds")
        end
    end
end


local function check_limits(o)
    local level = o.zk_log_level
    if level % 1 ~= 0 or not (level >= 0 and level <= 4) then  -- luacheck: ignore 581 (NaN)
        bad("zk_log_level must be an integer from 0 (off) to 4 (debug)")
    end
    local size = o.max_packet_size
    if size % 1 ~= 0 or not (size >= 1) then  -- luacheck: ignore 581 (NaN)
        bad("max_packet_size must be a positive integer (bytes)")
    end
    local la = o.lost_after
    if la ~= nil and not (la > 0 and la < 1e9) then  -- luacheck: ignore 581
        bad("lost_after must be a positive number of seconds")
    end
    local ri = o.resolve_interval
    if ri ~= nil and ri ~= -1 and not (ri >= 0 and ri <= 2147483) then  -- luacheck: ignore 581
        bad("resolve_interval must be -1 or a number of seconds from 0 to 2147483")
    end
end


-- A session to resume: both its id and its password, or neither.
local function check_resume(sid, pw)
    if sid ~= nil then
        if #sid ~= 16 or find(sid, "%X") then
            bad("session_id must be 16 hex digits, as client:session_id() returns")
        end
        if pw == nil then
            bad("session_id needs session_password (client:session_password())")
        end
    end
    if pw ~= nil then
        if sid == nil then
            bad("session_password needs session_id")
        end
        if #pw ~= 16 then
            bad("session_password must be 16 bytes, as client:session_password() returns")
        end
    end
end


-- The options merged over the defaults, each key of a known type.
local function merge(opts)
    if type(opts) == "string" then
        opts = { servers = opts }
    end
    if type(opts) ~= "table" then
        bad("options table expected, got " .. type(opts))
    end
    for k, v in pairs(opts) do
        local want = OPTION_KEYS[k]
        if not want then
            bad("unknown option '" .. tostring(k) .. "'")
        end
        if not find(want, type(v), 1, true) then
            bad("option '" .. k .. "' must be a " .. want)
        end
    end
    local o = {}
    for k, v in pairs(DEFAULTS) do o[k] = v end
    for k, v in pairs(opts) do o[k] = v end
    if not o.servers then
        bad("option 'servers' is required")
    end
    return o
end


--- Checks connect's argument (a servers string or an options table) and
--- returns what the client needs: { opts =, hosts =, chroot =, auth =, retry = }.
function _M.check(opts)
    local o = merge(opts)
    check_timeouts(o)
    local hosts = hosts_string(o.servers)
    local chroot = ""
    if o.chroot and o.chroot ~= "/" then
        chroot = o.chroot
        check_path(o.chroot, "connect", 1)
        hosts = hosts .. o.chroot
    end
    local auth = check_auth(o.auth)
    local retry = check_retry(o.retry)
    check_wait(o.wait)
    check_limits(o)
    check_resume(o.session_id, o.session_password)
    return { opts = o, hosts = hosts, chroot = chroot, auth = auth, retry = retry }
end


--- The waiter option `spec` made into a waiter for `client`, which it
--- drives through `pump`.
function _M.load_waiter(spec, client, pump)
    if type(spec) == "table" then
        if spec.new == nil then
            return spec          -- checked by check()
        end
        local w = spec.new(client, pump)
        check_waiter(w, "the waiter that wait.new(client) returned")
        return w
    end
    if spec == nil or spec == "auto" then
        spec = (ngx and ngx.get_phase) and "ngx" or "blocking"
    end
    return require("zkcoord.wait." .. spec).new(client, pump)
end


return _M
