--- zkcoord.client.options: the connect options, checked and completed
--- (internal), and the waiter they name.
--
-- Plain functions on the options table: each raises
-- "bad argument #1 to 'connect' (...)" before anything reaches the C core.
local checks = require "zkcoord.client.checks"
local tls = require "zkcoord.client.tls"
local sasl = require "zkcoord.client.sasl"

local util = require "zkcoord.util"
local argerror, check_seconds = util.argerror, util.check_seconds
local array_length, check_path = checks.array_length, checks.check_path
local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local find, match, gmatch, concat = string.find, string.match, string.gmatch, table.concat

local _M = {}

local DEFAULTS = {
    session_timeout = 10,
    connect_timeout = 5,
    -- An attempt whose handshake stays unanswered this long is made again
    -- (ZOOKEEPER-5051: libzookeeper alone waits 2/3 of the session timeout).
    handshake_timeout = 0.5,
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
    lost_after = "number", handshake_timeout = "number", tracer = "function",
    tls = "table", sasl = "table",
}

-- Bytes a request adds around its path and data: length, xid, type,
-- string lengths, flags (each ACL entry adds more: acl.bytes).
_M.PACKET_OVERHEAD = 32

-- The TCP check of a server a failing connect makes (connect.lua), at most
-- this long each; zkcoord.ngx's bound on a connect counts it too.
_M.PROBE_TIMEOUT = 0.25

local RETRY_KEYS = { max_tries = true, base_delay = true, max_delay = true }

local WAITER_METHODS = { "event", "sleep", "defer" }

-- Every check here runs from connect (level 4: bad <- check_* <- check <- connect).
local function bad(msg)
    argerror(1, "connect", msg, 5)
end


-- kazoo's and ZooKeeper's port, for a server given without one.
_M.DEFAULT_PORT = 2181


-- One server entry: its "host:port" text (the default port added) and
-- its host and port apart, for connect's diagnosis of a failed connect.
local function endpoint(s, where)
    if find(s, "%c") then
        -- libzookeeper would connect to what precedes a NUL
        bad(where .. " must not contain NUL or control characters")
    end
    local host, port = match(s, "^(.*):(%d+)$")
    if not host then
        -- "host" or "[v6]": no port (kazoo defaults it); anything else
        -- with a ":" ("host:", "host:x", a bare IPv6 address) is a mistake
        if find(s, ":", 1, true) and not find(s, "^%[.*%]$") then
            bad(where .. " must be host:port or host (port " .. _M.DEFAULT_PORT
                .. "), got '" .. s .. "'")
        end
        host, port = s, tostring(_M.DEFAULT_PORT)
        s = s .. ":" .. port
    end
    if host == "" then
        bad(where .. " has no host: '" .. s .. "'")
    end
    return s, { host = match(host, "^%[(.*)%]$") or host, port = port, name = s }
end


-- The hosts string libzookeeper takes ("h:p,h:p", ports added) and the
-- endpoints in it.
local function hosts_string(servers)
    local list, where = {}, "servers"
    if type(servers) == "string" then
        if servers == "" then
            bad("servers must not be empty")
        end
        for s in gmatch(servers, "[^,]+") do
            list[#list + 1] = s
        end
        if #list == 0 then
            bad("servers has no server: '" .. servers .. "'")
        end
    else
        local n = type(servers) == "table" and array_length(servers)
        if not n or n == 0 then
            bad("servers must be a string or a non-empty array without holes")
        end
        for i = 1, n do
            local s = servers[i]
            if type(s) ~= "string" or s == "" then
                bad("servers[" .. i .. "] must be a non-empty string")
            end
            list[i] = s
        end
        where = nil
    end
    local endpoints = {}
    for i, s in ipairs(list) do
        list[i], endpoints[i] = endpoint(s, where or ("servers[" .. i .. "]"))
    end
    return concat(list, ","), endpoints
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
    check_seconds(rp.base_delay, "retry.base_delay", "connect", 1, true)
    check_seconds(rp.max_delay, "retry.max_delay", "connect", 1, true)
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


-- Durations in seconds; above util.MAX_SECONDS they are milliseconds
-- (Curator's unit) by mistake. Waits may be math.huge (no limit).
local function check_timeouts(o)
    check_seconds(o.session_timeout, "session_timeout", "connect", 1)
    check_seconds(o.connect_timeout, "connect_timeout", "connect", 1, false, true)
    if o.request_timeout ~= nil then
        check_seconds(o.request_timeout, "request_timeout", "connect", 1, false, true)
    end
    if o.lost_after ~= nil then
        check_seconds(o.lost_after, "lost_after", "connect", 1)
    end
    check_seconds(o.handshake_timeout, "handshake_timeout", "connect", 1, true, true)
    local ri = o.resolve_interval
    if ri ~= nil and ri ~= -1 then
        if not (ri >= 0) then  -- luacheck: ignore 581 (NaN)
            bad("resolve_interval must be -1 (only on connection loss) or a number of seconds >= 0")
        end
        check_seconds(ri, "resolve_interval", "connect", 1, true)
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
        -- a callable table or userdata passes for a function (logger, tracer)
        local kind = want == "function" and util.is_callable(v) and "function" or type(v)
        if not find(want, kind, 1, true) then
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
--- returns what the client needs: { opts =, hosts =, endpoints =, chroot =,
--- auth =, retry =, tls = (client/tls.lua's check), sasl = (client/sasl.lua's) }.
function _M.check(opts)
    local o = merge(opts)
    check_timeouts(o)
    if type(o.servers) == "string" then
        -- kazoo's and libzookeeper's "host:port/chroot": the chroot option
        local body, root = match(o.servers, "^([^/]*)(/.*)$")
        if body then
            if o.chroot then
                bad("chroot given twice: in servers ('" .. root .. "') and as option chroot")
            end
            o.servers, o.chroot = body, root
        end
    end
    local hosts, endpoints = hosts_string(o.servers)
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
    if o.tls ~= nil and o.sasl ~= nil then
        bad("tls and sasl together: libzookeeper 3.8 has no session with both "
            .. "(zookeeper_init_ssl or zookeeper_init_sasl)")
    end
    return { opts = o, hosts = hosts, endpoints = endpoints, chroot = chroot, auth = auth,
             retry = retry, tls = tls.check(o.tls, bad), sasl = sasl.check(o.sasl, bad) }
end


--- The waiter option `spec` made into a waiter for `client`, which it
--- drives through `pump`; nil, err, detail when it cannot start.
function _M.load_waiter(spec, client, pump)
    if type(spec) == "table" then
        if spec.new == nil then
            return spec          -- checked by check()
        end
        local w, err, detail = spec.new(client, pump)
        if w == nil and err ~= nil then
            return nil, err, detail     -- it could not start (nginx: no timer left)
        end
        check_waiter(w, "the waiter that wait.new(client) returned")
        return w
    end
    if spec == nil or spec == "auto" then
        spec = (ngx and ngx.get_phase) and "ngx" or "blocking"
    end
    return require("zkcoord.wait." .. spec).new(client, pump)
end


return _M
