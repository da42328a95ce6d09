--- zkcoord.client: a ZooKeeper client over the C core.
--
-- The C core submits asynchronous operations and queues their replies; this
-- module turns request ids into results, keeps the session alive (states,
-- reconnects, a new session after expiry), retries idempotent reads, and
-- runs watch and state callbacks on the caller's thread. How the caller
-- waits is the waiter's business (zkcoord.wait.*): the client only asks it
-- for events, sleeps and deferred calls.
--
-- Every operation exists in two forms:
--   client:get(path)              waits and returns the result
--   client:send("get", path)      returns a future at once; future:wait()
-- Several futures may be in flight: one session runs its requests in order,
-- so `send` several and wait for all is one round trip, not several.
local core = require "zkcoord.core"
local errors = require "zkcoord.errors"

local C = core.c
local now = core.now
local errname = errors.name
local retryable = errors.retryable
local type, error, pairs, ipairs, select, tostring = type, error, pairs, ipairs, select, tostring
local next, getmetatable = next, getmetatable
local compat = require "zkcoord.compat"
local setmetatable, xpcall, unpack = setmetatable, compat.xpcall, compat.unpack
local traceback = debug.traceback
local byte, find, sub, concat = string.byte, string.find, string.sub, table.concat
local random, min, floor = core.random, math.min, math.floor

local REPLY, WATCH, SESSION = C.REPLY, C.WATCH, C.SESSION
-- Bytes a request adds around its path and data: length, xid, type,
-- string lengths, flags (each ACL entry adds more: acl_bytes).
local PACKET_OVERHEAD = 32
local RC_OK, RC_NONODE, RC_CLOSING = 0, -101, -116

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
_M.mt = mt

-- Live clients, weakly held, so tests can find leaks (luv's LUV_HANDLES).
_M.live = setmetatable({}, { __mode = "k" })

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

local EVENT_NAMES = {
    [C.CREATED_EVENT] = "created", [C.DELETED_EVENT] = "deleted",
    [C.CHANGED_EVENT] = "changed", [C.CHILD_EVENT] = "child",
    [C.NOTWATCHING_EVENT] = "notwatching",
}


-- ---------------------------------------------------------------------------
-- Argument checks: misuse raises, at the caller's level.

-- Is `source` (debug.getinfo's) a file of this library (zkcoord/*.lua,
-- zkcoord/wait/*.lua)? By name, not by the exact directory: one process may
-- load modules through several package.path entries.
local function our_source(source)
    return find(source, "zkcoord[/\\][%w_]+%.lua$") ~= nil
        or find(source, "zkcoord[/\\]wait[/\\][%w_]+%.lua$") ~= nil
end

-- The error blames the first caller outside this library: the same check
-- runs from client:create, client:send("create"), recipe constructors and
-- internal paths at different depths, and `level` alone would point inside
-- zkcoord from some of them.
local function raise(msg, level)
    local k = (level or 2) + 1
    while true do
        local info = debug.getinfo(k, "S")
        -- C frames (pcall around a user's rule) are passed over too
        if not info or (info.what ~= "C" and not our_source(info.source)) then
            break
        end
        k = k + 1
    end
    error(msg, k)
end
_M.raise = raise

local function argerror(n, fname, msg, level)
    raise(("bad argument #%d to '%s' (%s)"):format(n, fname, msg), (level or 2) + 1)
end
_M.argerror = argerror


local function check_self(self, fname)
    if getmetatable(self) ~= mt then
        error(("'%s' must be called on a zkcoord client (use client:%s(...))")
              :format(fname, fname), 3)
    end
end


--- Raises unless `path` is an absolute ZooKeeper path. A trailing "/" is
--- allowed only where ZooKeeper appends a sequence number.
local function check_path(path, fname, n, sequential)
    if type(path) ~= "string" then
        argerror(n or 1, fname, "path must be a string, got " .. type(path), 2)
    end
    if byte(path, 1) ~= 47 then
        argerror(n or 1, fname, "path must start with '/': " .. path, 2)
    end
    local len = #path
    if len > 1 and byte(path, len) == 47 and not sequential then
        argerror(n or 1, fname, "path must not end with '/': " .. path, 2)
    end
    if find(path, "%c") then
        -- ZooKeeper refuses control characters; libzookeeper's multi even
        -- frees memory it never allocated on one (a crash, found by fuzzing).
        argerror(n or 1, fname, "path must not contain NUL or control characters", 2)
    end
    if sequential and path == "/" then
        -- Under a chroot libzookeeper would create <chroot><seq> beside the
        -- namespace, outside it (found by fuzzing).
        argerror(n or 1, fname, "a sequential node needs a name prefix, not '/'", 2)
    end
    if find(path, "//", 1, true) then
        argerror(n or 1, fname, "path must not contain empty segments: " .. path, 2)
    end
    local p = path .. "/"
    if find(p, "/./", 1, true) or find(p, "/../", 1, true) then
        argerror(n or 1, fname, "path must not contain '.' or '..' segments: " .. path, 2)
    end
    return path
end
_M.check_path = check_path


local function check_version(v, fname, n)
    if type(v) == "nil" then   -- not `== nil`: a NULL cdata equals nil
        return -1
    end
    if type(v) ~= "number" or v ~= v or v % 1 ~= 0 or v < -1 or v > 2147483647 then
        argerror(n, fname, "version must be an integer >= -1", 2)
    end
    return v
end


local function check_timeout(t, fname, n)
    if t ~= nil and (type(t) ~= "number" or t ~= t or t < 0) then
        argerror(n, fname, "timeout must be a non-negative number of seconds or nil", 2)
    end
    return t
end
_M.check_timeout = check_timeout


local function check_fn(fn, fname, n)
    if fn ~= nil and type(fn) ~= "function" then
        argerror(n, fname, "watch must be a function or nil", 2)
    end
    return fn
end


--- The length of `t` as an array, counted up to its largest integer key
--- (not `#` or ipairs, which stop at or skip a hole): nil, why when a key
--- is not a positive integer or an index below the largest is missing.
local function array_length(t)
    local n, count = 0, 0
    for k in pairs(t) do
        if type(k) ~= "number" or k < 1 or k % 1 ~= 0 then
            return nil, "a key is not a positive integer: " .. tostring(k)
        end
        count = count + 1
        if k > n then
            n = k
        end
    end
    if count ~= n then
        return nil, "holes"
    end
    return n
end
_M.array_length = array_length


-- ---------------------------------------------------------------------------
-- ACLs: names or arrays of { perms = "rwcda" | number, scheme =, id = }.

local PERM_BITS = { r = C.PERM_READ, w = C.PERM_WRITE, c = C.PERM_CREATE,
                    d = C.PERM_DELETE, a = C.PERM_ADMIN }
local PERM_ORDER = { "r", "w", "c", "d", "a" }

local NAMED_ACLS = {
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


local function normalize_acl(acl, fname, n)
    if type(acl) == "nil" then
        return nil
    end
    if type(acl) == "string" then
        local named = NAMED_ACLS[acl]
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
            local bits, seen = 0, {}
            for ch in perms:gmatch(".") do
                local b = PERM_BITS[ch]
                if not b then
                    argerror(n, fname, "unknown permission '" .. ch .. "' (use r w c d a)", 3)
                end
                if not seen[ch] then    -- "rr" is read, not write (bits do not add up twice)
                    seen[ch] = true
                    bits = bits + b
                end
            end
            perms = bits
        elseif type(perms) ~= "number" or perms % 1 ~= 0 or perms < 0 or perms > 31 then
            argerror(n, fname, "acl entry " .. i .. " perms must be a string like 'rwcda'", 3)
        end
        out[i] = { perms = perms, scheme = e.scheme, id = e.id }
    end
    return out
end


local function export_acl(acl)
    for _, e in ipairs(acl) do
        e.perms = perms_to_string(e.perms)
    end
    return acl
end


-- ---------------------------------------------------------------------------
-- Futures: one per request. wait() returns what the synchronous method does.

local Future = {}
local future_mt = { __index = Future }


local function not_a_future(fname)
    error(("'%s' must be called on a future (use future:%s(...))"):format(fname, fname), 3)
end


-- The code of a failed entry; a request of a session that ended reports
-- why it ended rather than our own close of that session.
local function entry_err(p)
    local e = errname(p.rc)
    if e == "runtimeinconsistency" then
        -- libzookeeper fails every pending request with this code when it
        -- drops a connection on an out-of-order reply (Java's client says
        -- CONNECTIONLOSS there): the outcome is unknown, as after a loss.
        -- (A failed multi's own code is its failing op's, never this one.)
        e = "connectionloss"
    end
    if p.lost and (e == "closed" or e == "connectionloss") then
        return p.lost
    end
    return e
end


local function pack(...)
    return { n = select("#", ...), ... }
end


-- A future is a plain table, no closure (LuaJIT does not compile closure
-- creation, and futures are made per request): `entry` (the pending
-- request) with a static `finish` converter; or `err`, `detail` (failed
-- before it was sent); or `compose(fut, timeout)` for operations made of
-- several requests.

--- Waits for the result (at most `timeout` seconds, default the client's
--- request_timeout) and returns it as the synchronous method would.
function Future:wait(timeout)
    -- A hot path: one metatable test, one type test and one comparison
    -- (written `not (t >= 0)` so that NaN fails it).
    if getmetatable(self) ~= future_mt then
        not_a_future("wait")
    end
    if timeout ~= nil and (type(timeout) ~= "number" or not (timeout >= 0)) then  -- luacheck: ignore 581
        argerror(1, "wait", "timeout must be a non-negative number of seconds or nil")
    end
    local r = self.results
    if r then
        return unpack(r, 1, r.n)
    end
    local p = self.entry
    if self.compose then
        r = pack(self.compose(self, timeout))
    elseif not p then
        r = { n = 3, nil, self.err, self.detail }
    else
        local client = self.client
        local ok, err = client:_await(p, timeout or client._request_timeout)
        if not ok then
            r = { n = 2, nil, err }
        elseif self.finish then
            r = pack(self.finish(p))
        elseif p.rc ~= RC_OK then
            r = { n = 2, nil, entry_err(p) }
        else
            r = { n = 1, true }
        end
    end
    self.results = r
    return unpack(r, 1, r.n)
end


--- Calls fn(results...) once the reply is there, without waiting for it
--- (from the callback runner, never from inside the drain). Waiting on the
--- future afterwards is still allowed and returns the same results.
function Future:on_done(fn)
    if getmetatable(self) ~= future_mt then
        not_a_future("on_done")
    end
    if type(fn) ~= "function" then
        argerror(1, "on_done", "function expected, got " .. type(fn))
    end
    local p = self.entry
    if p and not p.done then
        p.late = function()
            fn(self:wait(0))
        end
    else
        -- Not submitted (no session) or already complete: deliver deferred.
        self.client._waiter:defer(function()
            fn(self:wait(0))
        end)
    end
    return self
end


local function failed_future(client, err, detail)
    return setmetatable({ client = client, err = err, detail = detail }, future_mt)
end


local function composite_future(client, compose)
    return setmetatable({ client = client, compose = compose }, future_mt)
end


-- ---------------------------------------------------------------------------
-- Connecting.

local function hosts_string(servers)
    if type(servers) == "string" then
        if servers == "" then
            argerror(1, "connect", "servers must not be empty", 3)
        end
        return servers
    end
    local n = type(servers) == "table" and array_length(servers)
    if not n or n == 0 then
        argerror(1, "connect", "servers must be a string or a non-empty array without holes", 3)
    end
    for i = 1, n do
        local s = servers[i]
        if type(s) ~= "string" or s == "" then
            argerror(1, "connect", "servers[" .. i .. "] must be a non-empty string", 3)
        end
    end
    return concat(servers, ",")
end


local function default_logger(level, msg)
    if level == "error" or level == "warn" then
        io.stderr:write("zkcoord [", level, "] ", msg, "\n")
    end
end


local WAITER_METHODS = { "event", "sleep", "defer" }

-- Raises unless `w` has the methods the client calls on every waiter.
-- `level`: argerror's, from here (4: our caller is called by connect).
local function check_waiter(w, what, level)
    if type(w) ~= "table" then
        argerror(1, "connect", what .. " must be a table, got " .. type(w), level)
    end
    for _, m in ipairs(WAITER_METHODS) do
        if type(w[m]) ~= "function" then
            argerror(1, "connect", what .. " has no method '" .. m
                     .. "' (a waiter needs event, sleep and defer)", level)
        end
    end
end


local function load_waiter(spec, client)
    if type(spec) == "table" then
        if spec.new == nil then
            return spec          -- checked by connect
        end
        local w = spec.new(client)
        check_waiter(w, "the waiter that wait.new(client) returned", 4)
        return w
    end
    if spec == nil or spec == "auto" then
        spec = (ngx and ngx.get_phase) and "ngx" or "blocking"
    end

    if spec ~= "blocking" and spec ~= "ngx" then
        argerror(1, "connect", "wait must be 'auto', 'blocking', 'ngx' or a waiter table", 4)
    end
    return require("zkcoord.wait." .. spec).new(client)
end


local RETRY_KEYS = { max_tries = true, base_delay = true, max_delay = true }

-- Contents of the connect options whose type is already checked: each
-- raises "bad argument #1 to 'connect' (...)" before anything reaches the
-- C core. Returns the auth entries (an array or nil) and the retry policy.
local function check_connect_opts(o)
    local function bad(msg)
        argerror(1, "connect", msg, 4)      -- bad <- check_connect_opts <- connect <- caller
    end

    local auth = o.auth
    if auth ~= nil then
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
    end

    local retry = o.retry or {}
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

    local w = o.wait
    if type(w) == "table" then
        if w.new ~= nil then
            if type(w.new) ~= "function" then
                bad("wait.new must be a function (client) -> waiter")
            end
        else
            check_waiter(w, "wait", 4)
        end
    elseif w ~= nil and w ~= "auto" and w ~= "blocking" and w ~= "ngx" then
        bad("wait must be 'auto', 'blocking', 'ngx' or a waiter table")
    elseif w == "ngx" and not (type(ngx) == "table" and ngx.get_phase) then
        bad("wait = 'ngx' needs OpenResty (there is no ngx API here): use 'blocking' or 'auto'")
    end

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

    local sid, pw = o.session_id, o.session_password
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
    return auth, rp
end


---@class zkcoord.connect_opts
---@field servers string|string[]  "host:port,host:port" or an array
---@field session_timeout number? seconds (default 10)
---@field connect_timeout number? seconds to wait for the first connection (default 5)
---@field request_timeout number? seconds one request may take (default session_timeout)
---@field chroot string? namespace prefixed to every path
---@field auth table? { scheme =, credentials = } or an array of them
---@field acl string|table? default ACL of created nodes ("open", "creator_all", "read" or entries)
---@field retry table? { max_tries = 5, base_delay = 0.05, max_delay = 1 } for idempotent reads
---@field wait string|table? "auto" | "blocking" | "ngx" | a waiter
---@field reconnect boolean? open a new session by itself after expiry (default true)
---@field lost_after number? seconds "suspended" before the session counts as lost
---                          (default and at most: the session timeout)

--- Opens a session and waits (at most connect_timeout) until it is connected.
---@param opts zkcoord.connect_opts
---@return table|nil client, string? err, string? detail
function _M.connect(opts)
    if type(opts) == "string" then
        opts = { servers = opts }
    end
    if type(opts) ~= "table" then
        argerror(1, "connect", "options table expected, got " .. type(opts))
    end
    for k, v in pairs(opts) do
        local want = OPTION_KEYS[k]
        if not want then
            argerror(1, "connect", "unknown option '" .. tostring(k) .. "'")
        end
        if not find(want, type(v), 1, true) then
            argerror(1, "connect", "option '" .. k .. "' must be a " .. want)
        end
    end
    local o = {}
    for k, v in pairs(DEFAULTS) do o[k] = v end
    for k, v in pairs(opts) do o[k] = v end
    if not o.servers then
        argerror(1, "connect", "option 'servers' is required")
    end
    for _, k in ipairs({ "session_timeout", "connect_timeout", "request_timeout" }) do
        local v = o[k]
        if v ~= nil and not (v > 0 and v < 1e6) then
            argerror(1, "connect", "option '" .. k .. "' must be a positive number of seconds")
        end
    end
    local hosts = hosts_string(o.servers)
    local chroot = ""
    if o.chroot then
        chroot = o.chroot ~= "/" and o.chroot or ""
        if o.chroot ~= "/" then
            check_path(o.chroot, "connect", 1)
            hosts = hosts .. o.chroot
        end
    end
    local auth, rp = check_connect_opts(o)
    if ngx and ngx.get_phase and ngx.get_phase() == "init" and o.wait ~= "blocking" then
        error("zkcoord.connect: no ZooKeeper session in init_by_lua*: it runs in the master "
              .. "before fork. Connect in init_worker_by_lua* (zkcoord.ngx.init_worker) "
              .. "or on first use", 2)
    end
    core.set_log_level(o.zk_log_level)

    local q, qerr, qdetail = core.queue()
    if not q then
        return nil, qerr, qdetail
    end
    local self = setmetatable({
        _opts = o,
        _hosts = hosts,
        _chroot = chroot,
        _max_path = o.max_packet_size - PACKET_OVERHEAD - #chroot,
        _auth = auth,
        _acl = normalize_acl(o.acl, "connect", 1),
        _retry = rp,
        _request_timeout = o.request_timeout or o.session_timeout,
        _log = o.logger or default_logger,
        _q = q,
        _serial = 0,
        _state = "connecting",
        _pending = {},            -- request id -> pending entry
        _watches = {},            -- request id -> { fn =, path =, kind = }
        _listeners = {},          -- on_state functions, in order
        _state_events = {},       -- events set on every state change
        _callbacks = { head = 1, tail = 0 },
        _retry_deletes = {},      -- path -> attempt, resent once connected
        _owned = {},              -- path -> { serial =, q = }: nodes recipes created
        _closed = false,
    }, mt)
    self._waiter = load_waiter(o.wait, self)
    if not o.logger and self._waiter.logger then
        self._log = self._waiter.logger     -- nginx: ngx.log, at the matching level
    end

    local ok, err, detail = self:_open_session(o.session_id, o.session_password)
    if not ok then
        return nil, err, detail
    end
    local connected = self:wait_state(function(st) return st == "connected" end,
                                       o.connect_timeout)
    if not connected then
        local state = self._state
        self:close()
        if state == "lost" then
            return nil, "sessionexpired", "the session could not be resumed"
        end
        return nil, "timeout", ("no ZooKeeper server answered within %gs at %s")
                               :format(o.connect_timeout, o.servers and hosts)
    end
    -- Credentials go with the session; wait so that the first create already
    -- carries them (creator_all ACLs).
    for _, f in ipairs(self._auth_futures or {}) do
        local aok, aerr = f:wait(o.connect_timeout)
        if not aok then
            self:close()
            return nil, aerr, "adding credentials failed"
        end
    end
    self._auth_futures = nil
    _M.live[self] = true
    return self
end


function _M:_open_session(sid, password)
    self._serial = self._serial + 1
    local s, err, detail = core.open(self._q, self._hosts, self._opts.session_timeout,
                                     self._serial, sid, password, self._opts.resolve_interval)
    if not s then
        return nil, err, detail
    end
    self._s = s
    self._session_id = nil
    if self._auth then
        local futures = {}
        for i, a in ipairs(self._auth) do
            futures[i] = self:_request(nil, "add_auth", a.scheme, a.credentials)
        end
        self._auth_futures = futures
    end
    return true
end


-- ---------------------------------------------------------------------------
-- The pump: drain the queue, keep timers, run callbacks. Waiters call it.

local function complete(self, p, rc, value, stat, extra)
    p.done = true
    p.rc, p.value, p.stat, p.extra = rc, value, stat, extra
    if p.ev then
        p.ev:set()
    elseif p.late then
        self._waiter:defer(p.late, p)
    end
end


function _M:_drain()
    local q, pending = self._q, self._pending
    while true do
        local kind, id, a, b, c, d = q:next()
        if not kind then
            return
        end
        if kind == REPLY then
            local p = pending[id]
            if p then
                pending[id] = nil
                if p.watch and a ~= RC_OK and not (p.watch == "exists" and a == RC_NONODE) then
                    -- ZooKeeper set no watch: forget it.
                    self._watches[id] = nil
                end
                complete(self, p, a, b, c, d)
            end
        elseif kind == WATCH then
            local w = self._watches[id]
            if w then
                self._watches[id] = nil
                self._waiter:defer(w.fn, { type = EVENT_NAMES[a] or tostring(a),
                                           path = w.path, state = self._state }, w.arg)
            end
        elseif kind == SESSION then
            if id == self._serial then
                self:_session_event(a)
            end
        end
    end
end


function _M:_run_callbacks()
    local cbs = self._callbacks
    while cbs.head <= cbs.tail do
        local h = cbs.head
        local item = cbs[h]
        cbs[h] = nil
        cbs.head = h + 1
        local ok, err = xpcall(item[1], traceback, unpack(item, 3, 2 + item[2]))
        if not ok then
            self._log("error", "callback failed: " .. tostring(err))
        end
    end
    cbs.head, cbs.tail = 1, 0
end


function _M:_enqueue_callback(fn, ...)
    local cbs = self._callbacks
    cbs.tail = cbs.tail + 1
    cbs[cbs.tail] = { fn, select("#", ...), ... }
end


--- Drains the queue and keeps the session timers. Callbacks run here only
--- for waiters that run them inline (blocking); the nginx pump must never
--- block, so its waiter runs them in a timer of their own.
function _M:_pump()
    self:_drain()
    self:_check_timers()
    if self._waiter.inline_callbacks then
        self:_run_callbacks()
    end
end


--- How long a waiter may sleep: at most `left`, and no longer than the next
--- session timer (the simulated loss of a suspended session).
function _M:_timer_cap(left)
    if self._state == "suspended" and self._suspended_at then
        local due = self._suspended_at + self:_lost_after() - now()
        return due < left and (due > 0.001 and due or 0.001) or left
    end
    return left
end


function _M:_lost_after()
    local t = self._negotiated_timeout or self._opts.session_timeout
    local la = self._opts.lost_after
    return la and la < t and la or t
end


function _M:_check_timers()
    -- Curator's lesson (TN12): a client cut off from every server never hears
    -- that its session expired. Once it has been suspended for the whole
    -- session timeout the server has expired it: act as if we were told.
    if self._state == "suspended" and self._suspended_at
            and now() - self._suspended_at >= self:_lost_after() then
        self:_session_lost("sessionexpired", self._opts.lost_after
                           and "suspended for longer than lost_after"
                           or "suspended for longer than the session timeout")
    end
end


-- ---------------------------------------------------------------------------
-- Session states.

function _M:_set_state(new)
    local old = self._state
    if old == new then
        return
    end
    self._state = new
    for _, ev in pairs(self._state_events) do
        ev:set()
    end
    for _, fn in ipairs(self._listeners) do
        self._waiter:defer(fn, new, old)
    end
end


function _M:_session_event(state)
    if self._closed or not self._s then
        return
    end
    if state == C.CONNECTED_STATE or state == C.READONLY_STATE then
        local s = self._s
        self._negotiated_timeout = s:timeout()
        self._session_id = s:client_id()
        self._suspended_at = nil
        self:_set_state("connected")
        self:_resend_deletes()
        self:_delete_lost_nodes()
    elseif state == C.CONNECTING_STATE or state == C.ASSOCIATING_STATE then
        if self._state == "connected" then
            self._suspended_at = now()
            self:_set_state("suspended")
        end
    elseif state == C.EXPIRED_SESSION_STATE then
        self:_session_lost("sessionexpired")
    elseif state == C.AUTH_FAILED_STATE then
        self._log("error", "authentication failed: the session is closed")
        self:_session_lost("authfailed", nil, true)
    end
end


--- The session is gone: every watch it held is gone with it. Tell their
--- owners, report "lost", and open a new session unless told not to.
function _M:_session_lost(reason, detail, no_reconnect)
    local old = self._s
    local old_serial = self._serial
    self._s = nil
    self._session_id = nil
    self._suspended_at = nil
    local watches = self._watches
    self._watches = {}
    -- Requests of the old session fail with the reason, not "closed".
    for _, p in pairs(self._pending) do
        if p.serial == old_serial then
            p.lost = reason
        end
    end
    if old then
        old:close()      -- fails what was in flight (ZCLOSING), fast: not connected
    end
    self._log("warn", "session lost (" .. reason .. (detail and ": " .. detail or "") .. ")")
    self:_set_state("lost")
    for _, w in pairs(watches) do
        self._waiter:defer(w.fn, { type = "session", state = "lost", path = w.path }, w.arg)
    end
    if self._opts.reconnect and not no_reconnect and not self._closed then
        local ok, err, why = self:_open_session()
        if not ok then
            self._log("error", "could not open a new session: " .. tostring(err)
                               .. " " .. tostring(why))
        end
    end
end


--- Waits (bounded) until pred(state) is true. Returns true if it is.
function _M:wait_state(pred, timeout)
    local deadline = now() + (timeout or self._request_timeout)
    while not pred(self._state) do
        if self._closed then
            return pred(self._state)
        end
        local left = deadline - now()
        if left <= 0 then
            return false
        end
        local ev = self._waiter:event()
        self._state_events[ev] = ev
        ev:wait(left)
        self._state_events[ev] = nil
    end
    return true
end


-- ---------------------------------------------------------------------------
-- Requests.

--- Submits core method `method` and returns a future for its raw reply
--- entry, or a future that yields nil, err if submission failed. `finish`
--- converts a completed entry into results.
function _M:_request(finish, method, path, ...)
    local s = self._s
    local id, rc
    if self._closed then
        rc = "closed"
    elseif not s then
        rc = "connectionloss"
    elseif type(path) == "string" and #path > self._max_path then
        -- The server would drop the connection on such a packet, and every
        -- request in flight with it.
        return failed_future(self, "toolarge", ("a path of %d bytes exceeds ZooKeeper's "
                             .. "request limit of %d bytes (jute.maxbuffer)")
                             :format(#path, self._opts.max_packet_size))
    else
        id, rc = s[method](s, path, ...)
        if not id then
            rc = errname(rc)
        end
    end
    if not id then
        return failed_future(self, rc)
    end
    local p = { serial = self._serial, id = id }
    self._pending[id] = p
    return setmetatable({ client = self, entry = p, finish = finish }, future_mt)
end


--- Waits for a pending entry. A wait that gives up leaves the entry to its
--- `late` handler (if any), so a reply that still arrives is not lost.
function _M:_await(p, timeout)
    if not p.done then
        local ev = self._waiter:event()
        p.ev = ev
        ev:wait(timeout)
        p.ev = nil
        if not p.done then
            if self._closed then
                self._pending[p.id] = nil
                return nil, "closed"
            end
            return nil, "timeout"
        end
    end
    return true
end


local function connected_or_closed(st)
    return st == "connected" or st == "closed"
end


--- Runs `send_op(self, ...)` (which returns a future) again on retryable
--- errors, with jittered exponential backoff, while the client is open.
--- With a `deadline` (core.now() time) every wait ends by then, and a read
--- that has not succeeded by then returns nil, "timeout": a recipe's
--- acquire(t) must not overrun t by the whole retry policy.
--- Fixed arity (a read takes at most path, watch, arg; it returns at most
--- value, stat or nil, err, detail): varargs here would keep LuaJIT from
--- compiling the read path (NYI: VARG).
--- `last_err`: at the deadline, report the last try's error, if any,
--- rather than "timeout" (a sync read bounded by request_timeout).
function _M:_retrying_until(deadline, send_op, a, b, c, last_err)
    local rp = self._retry
    local delay = rp.base_delay
    local tries = 0
    local err
    while true do
        tries = tries + 1
        local left = deadline and deadline - now()
        if left and left <= 0 then
            return nil, last_err and err or "timeout"
        end
        local r1, r3
        r1, err, r3 = send_op(self, a, b, c):wait(left)
        if r1 ~= nil or not retryable[err] or tries >= rp.max_tries or self._closed then
            return r1, err, r3
        end
        local pause = delay * (0.5 + random())
        if deadline then
            pause = min(pause, deadline - now())
        end
        if pause > 0 then
            self._waiter:sleep(pause)
        end
        delay = min(delay * 2, rp.max_delay)
        self:wait_state(connected_or_closed, deadline and deadline - now())
    end
end


local function acl_bytes(acl)
    local n = 4
    for _, e in ipairs(acl or {}) do
        n = n + 12 + #e.scheme + #e.id
    end
    return n
end


local function data_arg(self, data, fname, n, path, acl)
    -- type(), not `== nil`: a NULL cdata compares equal to nil in LuaJIT.
    if type(data) == "nil" then
        return nil
    end
    if type(data) ~= "string" then
        argerror(n, fname, "data must be a string or nil, got " .. type(data), 3)
    end
    local size = PACKET_OVERHEAD + #self._chroot + #path + #data + acl_bytes(acl)
    if size > self._opts.max_packet_size then
        return nil, "toolarge", ("%d bytes of data at %s exceed ZooKeeper's request limit "
                                 .. "of %d bytes (jute.maxbuffer)")
                                :format(#data, path, self._opts.max_packet_size)
    end
    return data
end


-- `arg` (internal, for recipes) is passed to fn after the event, so a
-- recipe can use one static function instead of a closure per watch.
local function register_watch(self, fut, fn, path, kind, arg)
    if fn and fut.entry then
        local id = fut.entry.id
        fut.entry.watch = kind
        self._watches[id] = { fn = fn, path = path, kind = kind, arg = arg }
    end
end


-- ---------------------------------------------------------------------------
-- The operations. Each `send_<op>` checks its arguments and returns a future.

local send = {}

local CREATE_KEYS = { ephemeral = true, sequential = true, container = true, ttl = true,
                      parents = true, acl = true }


local MAX_TTL = (2 ^ 40 - 1) / 1000

local function create_mode(opts)
    local mode
    if opts.container then
        if opts.ephemeral or opts.sequential or opts.ttl then
            argerror(3, "create", "container nodes cannot be ephemeral, sequential or TTL", 4)
        end
        mode = C.CONTAINER
    elseif opts.ttl then
        if opts.ephemeral then
            argerror(3, "create", "TTL nodes cannot be ephemeral", 4)
        end
        -- ZooKeeper keeps a TTL in 40 bits of milliseconds (EphemeralType.MAX_TTL).
        local ttl = opts.ttl
        if type(ttl) ~= "number" or not (ttl > 0 and ttl <= MAX_TTL) then  -- luacheck: ignore 581
            argerror(3, "create", "ttl must be a positive number of seconds, at most "
                     .. MAX_TTL .. " (about 34 years)", 4)
        end
        mode = opts.sequential and C.PERSISTENT_SEQUENTIAL_WITH_TTL or C.PERSISTENT_WITH_TTL
    else
        mode = (opts.ephemeral and C.EPHEMERAL or 0) + (opts.sequential and 2 or 0)
    end
    return mode
end


local function finish_create(p)
    if p.rc ~= RC_OK then
        return nil, entry_err(p)
    end
    return p.value, p.stat
end


function send.create(self, path, data, opts)
    opts = opts or {}
    if type(opts) ~= "table" then
        argerror(3, "create", "opts must be a table")
    end
    for k in pairs(opts) do
        if not CREATE_KEYS[k] then
            argerror(3, "create", "unknown option '" .. tostring(k) .. "'")
        end
    end
    check_path(path, "create", 1, opts.sequential)
    local mode = create_mode(opts)
    local acl = opts.acl and normalize_acl(opts.acl, "create", 3) or self._acl
    local d, derr, detail = data_arg(self, data, "create", 2, path, acl or NAMED_ACLS.open)
    if derr then
        return failed_future(self, derr, detail)
    end
    local ttl = opts.ttl and floor(opts.ttl * 1000 + 0.5)
    local fut = self:_request(finish_create, "create", path, d, acl, mode, ttl)
    if not opts.parents or path == "/" then
        return fut
    end
    -- Curator's creatingParentsIfNeeded: try once; on "nonode" create the
    -- ancestors and the node again, all pipelined (one round trip).
    local parent_mode = opts.parents == "container" and C.CONTAINER or 0
    return composite_future(self, function(_, timeout)
        local r = pack(fut:wait(timeout))
        if r[1] ~= nil or r[2] ~= "nonode" then
            return unpack(r, 1, r.n)
        end
        local pos, parents = 1, {}
        while true do
            local s = find(path, "/", pos + 1, true)
            if not s or s == #path then
                break
            end
            parents[#parents + 1] = self:_request(nil, "create", sub(path, 1, s - 1), nil,
                                                  acl, parent_mode)
            pos = s
        end
        local again = self:_request(finish_create, "create", path, d, acl, mode, ttl)
        for _, f in ipairs(parents) do
            f:wait()
        end
        return again:wait()
    end)
end


function send.delete(self, path, version)
    check_path(path, "delete", 1)
    return self:_request(nil, "delete", path, check_version(version, "delete", 2))
end


local function finish_exists(p)
    if p.rc == RC_OK then
        return p.stat
    elseif p.rc == RC_NONODE then
        return false
    end
    return nil, entry_err(p)
end


function send.exists(self, path, watch, arg)
    check_path(path, "exists", 1)
    check_fn(watch, "exists", 2)
    local fut = self:_request(finish_exists, "exists", path, watch ~= nil)
    register_watch(self, fut, watch, path, "exists", arg)
    return fut
end


local function finish_get(p)
    if p.rc ~= RC_OK then
        return nil, entry_err(p)
    end
    return p.value or "", p.stat
end


function send.get(self, path, watch)
    check_path(path, "get", 1)
    check_fn(watch, "get", 2)
    local fut = self:_request(finish_get, "get", path, watch ~= nil)
    register_watch(self, fut, watch, path, "get")
    return fut
end


local function finish_set(p)
    if p.rc ~= RC_OK then
        return nil, entry_err(p)
    end
    return p.stat
end


function send.set(self, path, data, version)
    check_path(path, "set", 1)
    if data == nil then
        argerror(2, "set", "data must be a string")
    end
    local d, derr, detail = data_arg(self, data, "set", 2, path)
    if derr then
        return failed_future(self, derr, detail)
    end
    return self:_request(finish_set, "set", path, d, check_version(version, "set", 3))
end


local function finish_children(p)
    if p.rc ~= RC_OK then
        return nil, entry_err(p)
    end
    return p.extra or {}, p.stat
end


function send.children(self, path, watch)
    check_path(path, "children", 1)
    check_fn(watch, "children", 2)
    local fut = self:_request(finish_children, "children", path, watch ~= nil)
    register_watch(self, fut, watch, path, "children")
    return fut
end


function send.sync(self, path)
    check_path(path, "sync", 1)
    return self:_request(nil, "sync", path)
end


local function finish_get_acl(p)
    if p.rc ~= RC_OK then
        return nil, entry_err(p)
    end
    return export_acl(p.extra or {}), p.stat
end


function send.get_acl(self, path)
    check_path(path, "get_acl", 1)
    return self:_request(finish_get_acl, "get_acl", path)
end


function send.set_acl(self, path, acl, version)
    check_path(path, "set_acl", 1)
    if acl == nil then
        argerror(2, "set_acl", "acl is required")
    end
    return self:_request(nil, "set_acl", path, normalize_acl(acl, "set_acl", 2),
                         check_version(version, "set_acl", 3))
end


local MULTI_OPS = { create = C.OP_CREATE, delete = C.OP_DELETE, set = C.OP_SET,
                    check = C.OP_CHECK }


local function finish_multi(p)
    local results = {}
    local first_err
    for i, r in ipairs(p.extra or {}) do
        local e = r.rc ~= RC_OK and errname(r.rc) or nil
        results[i] = { path = r.path, stat = r.stat, err = e }
        -- The op that failed has its own code; the others report
        -- "runtimeinconsistency" (rolled back).
        if e and e ~= "runtimeinconsistency" and not first_err then
            first_err = e
        end
    end
    if p.rc ~= RC_OK then
        return nil, first_err or entry_err(p), results
    end
    return results
end


function send.multi(self, ops)
    local n, why
    if type(ops) == "table" then
        n, why = array_length(ops)     -- not #ops / ipairs: { nil, op, op } is refused
    end
    if why == "holes" then
        argerror(1, "multi", "ops must be an array without holes")
    elseif not n or n == 0 then
        argerror(1, "multi", "ops must be a non-empty array" .. (why and " (" .. why .. ")" or ""))
    end
    local core_ops, size = {}, 0
    for i = 1, n do
        local op = ops[i]
        if type(op) ~= "table" then
            argerror(1, "multi", "op " .. i .. " must be a table")
        end
        local kind = MULTI_OPS[op.op or op[1]]
        if not kind then
            argerror(1, "multi", "op " .. i .. ": op must be create, delete, set or check")
        end
        local path = op.path or op[2]
        check_path(path, "multi", 1, kind == C.OP_CREATE and op.sequential)
        local data = op.data
        if type(data) ~= "nil" then
            local d, derr, detail = data_arg(self, data, "multi", 1, path)
            if derr then
                return failed_future(self, derr, detail)
            end
            data = d
        end
        local e = { type = kind, path = path, data = data,
                    version = check_version(op.version, "multi", 1) }
        if kind == C.OP_CREATE then
            e.mode = create_mode(op)
            if op.ttl then
                argerror(1, "multi", "TTL nodes cannot be created in a multi")
            end
            e.acl = op.acl and normalize_acl(op.acl, "multi", 1) or self._acl
        end
        core_ops[i] = e
        size = size + PACKET_OVERHEAD + #self._chroot + #path + #(data or "")
               + (e.acl and acl_bytes(e.acl) or 0)
    end
    if size > self._opts.max_packet_size then
        return failed_future(self, "toolarge", ("a multi of %d bytes exceeds ZooKeeper's "
                             .. "request limit of %d bytes (jute.maxbuffer)")
                             :format(size, self._opts.max_packet_size))
    end
    return self:_request(finish_multi, "multi", core_ops)
end


--- client:send(op, ...) -> future: the asynchronous form of every operation.
function _M:send(op, ...)
    check_self(self, "send")
    local fn = send[op]
    if not fn then
        argerror(1, "send", "unknown operation '" .. tostring(op) .. "'")
    end
    return fn(self, ...)
end


-- Synchronous forms. Reads retry on connection loss (they are idempotent);
-- writes never retry blindly: a lost reply may hide a write that happened.
local READS = { exists = true, get = true, children = true, get_acl = true, sync = true }

--- Contract, for recipes: read `op` (a READS name) as the sync method does,
--- but give up with "timeout" at `deadline` (nil: the retry policy only).
function _M:read_until(deadline, op, a, b, c)
    return self:_retrying_until(deadline, send[op], a, b, c)
end

for name, fn in pairs(send) do
    if READS[name] then
        _M[name] = function(self, a, b, c)
            check_self(self, name)
            return self:_retrying_until(now() + self._request_timeout, fn, a, b, c, true)
        end
    else
        _M[name] = function(self, ...)
            check_self(self, name)
            return fn(self, ...):wait()
        end
    end
end


--- Deletes `path` without waiting for the reply. On connection loss the
--- delete is sent again once connected, until it succeeds or the node is
--- gone; for an ephemeral node (the default) it stops when the session that
--- owned the node ends, since the node went with it. The delete is ordered
--- before every later request of this session.
---@param path string
---@param version integer? expected version (-1 or nil: any)
---@param persistent boolean? true: keep trying in later sessions too
local delete_attempt

-- Late handler of a guaranteed delete (static: its context is on the entry).
local function delete_done(p)
    local self = p.client
    local e = errname(p.rc)
    if p.rc ~= RC_OK and e ~= "nonode" and e ~= "closed" then
        if retryable[e] or e == "sessionexpired" then
            self._retry_deletes[p.path] = { p.version, p.persistent, p.dserial }
            if self._state == "connected" then self:_resend_deletes() end  -- reconnect handled before us
        else
            self._log("error", "delete of " .. p.path .. " failed: " .. e)
        end
    end
end


delete_attempt = function(self, path, version, persistent, serial)
    if self._closed or (not persistent and self._serial ~= serial) then
        return
    end
    local fut = send.delete(self, path, version)
    local p = fut.entry
    if fut.err == "toolarge" then
        self._log("error", "delete of a path of " .. #path .. " bytes failed: " .. fut.detail)
        return
    elseif not p then
        self._retry_deletes[path] = { version, persistent, serial }  -- no session: once connected
        return
    end
    p.late, p.client, p.path, p.version, p.persistent, p.dserial =
        delete_done, self, path, version, persistent, serial
end


function _M:delete_guaranteed(path, version, persistent)
    check_self(self, "delete_guaranteed")
    check_path(path, "delete_guaranteed", 1)
    version = check_version(version, "delete_guaranteed", 2)
    delete_attempt(self, path, version, persistent, self._serial)
    return true
end


function _M:_resend_deletes()
    local retry = self._retry_deletes
    if next(retry) == nil then
        return
    end
    self._retry_deletes = {}
    for path, a in pairs(retry) do
        delete_attempt(self, path, a[1], a[2], a[3])
    end
end


-- ---------------------------------------------------------------------------
-- Nodes recipes created (queue positions), by session: when a new session
-- replaces a lost one, the lost one's nodes are deleted at once instead of
-- blocking every other contender until the server expires that session.

--- Contract, for recipes: `path` was created by this session for `q`.
function _M:own_node(path, q)
    local e = { serial = self._serial, q = q }
    self._owned[path] = e
    local w = self._waiter
    if w.track then
        w:track(e, path)    -- nginx: tied to the request, released when it ends
    end
end


--- Contract, for recipes: `path` was deleted or is being deleted. A node
--- of an earlier session stays listed until the new session deletes it.
function _M:disown_node(path)
    local e = self._owned[path]
    if e and e.serial == self._serial then
        self._owned[path] = nil
        if e.scope then
            e.scope.nodes[path] = nil
        end
    end
end


function _M:_delete_lost_nodes()
    local n = 0
    for path, e in pairs(self._owned) do
        if e.serial ~= self._serial then
            self._owned[path] = nil
            if e.scope then
                e.scope.nodes[path] = nil
            end
            delete_attempt(self, path, -1, false, self._serial)
            n = n + 1
        end
    end
    if n > 0 then
        self._log("info", ("deleting %d node(s) of the lost session"):format(n))
    end
end


-- Blocks (at most `timeout` seconds) until no request waits for a reply.
-- For close(), which blocks anyway, and exit paths that cannot yield.
function _M:_quiesce(timeout)
    local deadline = now() + timeout
    while next(self._pending) ~= nil do
        local left = deadline - now()
        if left <= 0 then
            return false
        end
        self._q:wait(min(left, 0.05))
        self:_drain()
    end
    return true
end


--- Removes the watches `fn` set on `path` (all kinds), here and on the server.
--- A nil path with a function: every watch `fn` set, on any path.
---@return integer removed
function _M:remove_watches(path, fn)
    check_self(self, "remove_watches")
    if path ~= nil or type(fn) ~= "function" then
        check_path(path, "remove_watches", 1)
    end
    local n = 0
    for id, w in pairs(self._watches) do
        if (path == nil or w.path == path) and (fn == nil or w.fn == fn) then
            self._watches[id] = nil
            n = n + 1
            if self._s then
                local kind = w.kind == "children" and C.WATCH_CHILDREN or C.WATCH_DATA
                -- Fire and forget: a reply is not needed, the local entry is gone.
                self:_request(nil, "remove_watch", w.path, kind, id,
                              self._state ~= "connected")
            end
        end
    end
    return n
end


-- ---------------------------------------------------------------------------
-- Session, state, events.

--- Waits until the client is connected, at most `timeout` seconds
--- (default the request timeout).
---@return true|nil ok, string? err "timeout" | "closed"
function _M:wait_connected(timeout)
    check_self(self, "wait_connected")
    check_timeout(timeout, "wait_connected", 1)
    if self:wait_state(function(st) return st == "connected" or st == "closed" end, timeout)
            and self._state == "connected" then
        return true
    end
    return nil, self._closed and "closed" or "timeout"
end


--- Writes through the client's logger ("error", "warn", "info", "debug").
local LOG_LEVELS = { error = true, warn = true, info = true, debug = true }

function _M:log(level, msg)
    check_self(self, "log")
    if not LOG_LEVELS[level] then
        argerror(1, "log", "level must be 'error', 'warn', 'info' or 'debug'")
    end
    if type(msg) ~= "string" then
        argerror(2, "log", "message must be a string, got " .. type(msg))
    end
    self._log(level, msg)
end


---@return string state "connecting" | "connected" | "suspended" | "lost" | "closed"
function _M:state()
    check_self(self, "state")
    return self._state
end


--- Calls fn(new_state, old_state) on every transition. Returns fn, which
--- `remove_listener` takes.
function _M:on_state(fn)
    check_self(self, "on_state")
    if type(fn) ~= "function" then
        argerror(1, "on_state", "function expected")
    end
    local l = self._listeners
    l[#l + 1] = fn
    return fn
end


function _M:remove_listener(fn)
    check_self(self, "remove_listener")
    if type(fn) ~= "function" then
        argerror(1, "remove_listener", "function expected, got " .. type(fn))
    end
    for i, f in ipairs(self._listeners) do
        if f == fn then
            table.remove(self._listeners, i)
            return true
        end
    end
    return false
end


--- Waits up to `timeout` seconds for events and runs their callbacks.
--- Returns true if the client is still open.
function _M:dispatch(timeout)
    check_self(self, "dispatch")
    check_timeout(timeout, "dispatch", 1)
    if self._closed then
        return nil, "closed"
    end
    self._waiter:sleep(timeout or 0)
    self:_pump()
    return true
end


--- Starts fn(...) in a coroutine of its own: a wait inside it (any client
--- call or recipe) lets the other spawned coroutines run instead of blocking
--- the thread. Drive them with client:run(). In nginx: ngx.thread.spawn.
function _M:spawn(fn, ...)
    check_self(self, "spawn")
    if type(fn) ~= "function" then
        argerror(1, "spawn", "function expected, got " .. type(fn))
    end
    local w = self._waiter
    if not w.spawn then
        error("this client's waiter cannot spawn coroutines", 2)
    end
    return w:spawn(fn, ...)
end


--- Runs the spawned coroutines until all finished, at most `timeout`
--- seconds. Returns true when all finished, false on timeout.
function _M:run(timeout)
    check_self(self, "run")
    check_timeout(timeout, "run", 1)
    return self._waiter:run(timeout)
end


--- For custom event loops: the fd that turns readable when events arrive
--- (an eventfd). Call client:process() when it does.
function _M:fd()
    check_self(self, "fd")
    return self._q:fd()
end


--- Handles whatever has arrived, without waiting.
function _M:process()
    check_self(self, "process")
    self._q:clear_fd()
    self:_pump()
end


---@return string|nil session id (16 hex digits) of the current session
function _M:session_id()
    check_self(self, "session_id")
    return self._session_id
end


--- The password of the current session (binary, 16 bytes): with
--- session_id it lets another handle resume the session (tests use it to
--- expire sessions).
function _M:session_password()
    check_self(self, "session_password")
    if self._s and self._session_id then
        local _, pw = self._s:client_id()
        return pw
    end
    return nil
end


--- The session timeout the server granted, in seconds.
function _M:session_timeout()
    check_self(self, "session_timeout")
    return self._negotiated_timeout or self._opts.session_timeout
end


function _M:waiter()
    check_self(self, "waiter")
    return self._waiter
end


-- ---------------------------------------------------------------------------
-- The contract with what builds on the client (recipes, the waiting-line
-- engine, waiters), beyond the operations: these and `read_until`,
-- `wait_state`, `own_node`, `disown_node`. Nothing outside this module
-- reads or writes a client's `_` fields.

--- Serial number of the current session: it grows by one each time a new
--- session replaces a lost one, so a recipe can tell whether a node it
--- created belongs to the session that is live now.
---@return integer
function _M:serial()
    return self._serial
end


--- True once `close()` was called.
---@return boolean
function _M:is_closed()
    return self._closed
end


--- The bound in seconds of one synchronous operation (`request_timeout`).
---@return number
function _M:request_timeout()
    return self._request_timeout
end


function _M:stats()
    check_self(self, "stats")
    local np, nw = 0, 0
    for _ in pairs(self._pending) do np = np + 1 end
    for _ in pairs(self._watches) do nw = nw + 1 end
    return { pending = np, watches = nw, listeners = #self._listeners,
             callbacks = self._callbacks.tail - self._callbacks.head + 1,
             serial = self._serial, state = self._state }
end


--- Closes the session (its ephemeral nodes go at once). Idempotent.
function _M:close()
    check_self(self, "close")
    if self._closed then
        return true
    end
    self._closed = true
    local s = self._s
    self._s = nil
    if s then
        if self._state == "connected" then
            -- libzookeeper sends no close request while its IO thread is
            -- handling replies: the session (and its ephemeral nodes) would
            -- outlive us by the session timeout. Let the replies in first.
            self:_quiesce(min(self._request_timeout, 2))
        end
        s:close()    -- blocks until the close request is sent; fails what is in flight
    end
    self:_drain()
    for id, p in pairs(self._pending) do
        self._pending[id] = nil
        if not p.done then
            complete(self, p, RC_CLOSING)
        end
    end
    self._watches = {}
    self:_set_state("closed")
    self._q:close_doorbell()
    if self._waiter.on_close then
        self._waiter:on_close()
    end
    if self._waiter.inline_callbacks then
        self:_run_callbacks()
    end
    _M.live[self] = nil
    return true
end
mt.__close = _M.close


return _M
