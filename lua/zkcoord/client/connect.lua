--- zkcoord.client.connect: opening a client and its sessions (client
--- methods).
--
-- Owns `connect` (options, the client's fields, its pump and waiter, the
-- wait for the first connection and its credentials) and `_open_session`
-- (a session of the C core; a new one after each lost one). Every private
-- field of a client is created here.
local core = require "zkcoord.core"
local _M = require "zkcoord.client.class"
local options = require "zkcoord.client.options"
local metrics = require "zkcoord.metrics"
local acl = require "zkcoord.client.acl"
local pump = require "zkcoord.client.pump"
local session = require "zkcoord.client.session"
local tls = require "zkcoord.client.tls"
local sasl = require "zkcoord.client.sasl"

local setmetatable, pairs, ipairs, error, tostring, tonumber =
    setmetatable, pairs, ipairs, error, tostring, tonumber
local now, concat = core.now, table.concat


local function default_logger(level, msg)
    if level == "error" or level == "warn" then
        io.stderr:write("zkcoord [", level, "] ", msg, "\n")
    end
end


-- A client that is not connected yet, with its pump and waiter; or nil,
-- err, detail when the waiter cannot start (nginx: no timer left).
local function new_client(c, q)
    local o = c.opts
    local self = setmetatable({
        _opts = o,
        _hosts = c.hosts,
        _chroot = c.chroot,
        _max_path = o.max_packet_size - options.PACKET_OVERHEAD - #c.chroot,
        _auth = c.auth,
        _tls = c.tls,             -- client/tls.lua's check of the tls option, or nil
        _sasl = c.sasl,           -- client/sasl.lua's check of the sasl option, or nil
        _auth_failed = false,     -- a session ended in AUTH_FAILED (a SASL exchange failed)
        _acl = acl.normalize(o.acl, "connect", 1),
        _retry = c.retry,
        -- the sync reads': at request_timeout, the last try's error
        _read_retry = { max_tries = c.retry.max_tries, base_delay = c.retry.base_delay,
                        max_delay = c.retry.max_delay, last_error = true },
        _request_timeout = o.request_timeout or o.session_timeout,
        _log = o.logger or default_logger,
        _q = q,                   -- the C completion queue, which the pump drains
        _serial = 0,
        _state = "connecting",
        _pending = {},            -- request id -> pending record (future.new_entry)
        _sent = {},               -- operation -> requests submitted (stats().requests)
        _watches = {},            -- request id -> { fn =, path =, kind =, arg = }
        _listeners = {},          -- on_state functions, in order
        _state_events = {},       -- events set on every state change
        _retry_deletes = {},      -- path -> attempt, resent once connected
        _owned = {},              -- path -> { serial =, q = }: nodes recipes created
        _enders = {},             -- serial -> side handle ending a session we left (nodes.lua)
        _ender_serial = 0,        -- the last one's serial (negative)
        _dropped = 0,             -- handshakes the watchdog dropped (src/reconnect.c), logged
        _connections = 0,         -- connections made (client:connection())
        _closed = false,
        _metrics = metrics.new { tracer = o.tracer },  -- zkcoord.metrics: always kept
    }, _M.mt)
    self._pump = pump.new(q, self, session.pump_hooks)
    local w, err, detail = options.load_waiter(o.wait, self, self._pump)
    if not w then
        return nil, err, detail
    end
    self._waiter = w
    if not o.logger and self._waiter.logger then
        self._log = self._waiter.logger     -- nginx: ngx.log, at the matching level
    end
    return self
end


-- Servers that refuse or do not answer yet are tried again until the
-- connect timeout (a cron job during a ZooKeeper restart waits, as kazoo and
-- Curator do): libzookeeper goes on trying every server in turn by itself.
-- PROBE_TIMEOUT before the deadline a plain TCP connect to each server, at
-- most PROBE_TIMEOUT each, tells servers that all refuse from slow ones, for
-- the error: core.probe with the blocking waiter, a cosocket in nginx (which
-- must not block the worker; there a name needs nginx's `resolver`, else it
-- is not probed).
local PROBE_TIMEOUT = options.PROBE_TIMEOUT


local PROBES = {
    blocking = function(e)
        local ok, why = core.probe(e.host, e.port, PROBE_TIMEOUT)
        return not ok and why == "refused"
    end,
    ngx = function(e)
        local sock = ngx.socket.tcp()
        sock:settimeout(PROBE_TIMEOUT * 1000)
        local ok, err = sock:connect(e.host, tonumber(e.port))
        if ok then
            sock:close()
        end
        return not ok and err == "connection refused"
    end,
}


-- "a:1, b:2" when every endpoint refuses a TCP connection, else nil
-- (also for a waiter that has no probe).
local function all_refused(waiter, endpoints)
    local probe = PROBES[waiter.name]
    if not probe then
        return nil
    end
    local names = {}
    for i, e in ipairs(endpoints) do
        if not probe(e) then
            return nil
        end
        names[i] = e.name
    end
    return concat(names, ", ")
end


-- Why core.open failed, naming the server: libzookeeper's errno alone
-- says "No such file or directory" for a name that does not resolve.
local function open_failure(endpoints, err, detail)
    for _, e in ipairs(endpoints) do
        local ok, why, text = core.probe(e.host, e.port, 0)
        if not ok and why == "unresolved" then
            return nil, err, ("cannot resolve host '%s' (%s)"):format(e.host, text)
        end
    end
    return nil, err, detail
end


-- libzookeeper takes the first 41 bytes any server sends back for
-- ZooKeeper's answer to its handshake and checks none of them (3.8
-- check_events: length, protocol version, session timeout, session id,
-- password, read-only flag), so an HTTP server's "400 Bad Request" made a
-- "connected" client whose session id was the ASCII of " Bad Req" (issue
-- 28). Two of those fields reach the core: the negotiated timeout (a
-- server's is positive, between its min and max session timeouts: seconds
-- to minutes; any four printable bytes read as at least 0x20202020 ms, 6.2
-- days) and the read-only flag (a server sets it only for a client that
-- asked to accept a read-only server; this one never asks).
local MAX_NEGOTIATED = 6 * 24 * 3600


--- A session event "connected" from a server whose answer ZooKeeper's
--- does not explain: not taken (the state stays). The first connect
--- returns why (await_connected); a live client's new session logs it.
--- True if so.
function _M:_not_zookeeper(state, s, t)
    if t > 0 and t < MAX_NEGOTIATED and state ~= core.c.READONLY_STATE then
        return false
    end
    local server, still = s:server()
    if not still and self._hosts:find(",", 1, true) then
        -- it closed and libzookeeper went on to the next: which one is not known
        server = "one of " .. self._hosts:gsub("/.*", "")
    end
    local detail = server .. " did not answer as a ZooKeeper server"
    self._not_zookeeper_detail = detail
    self._log(_M.live[self] and "error" or "info",
              ("%s (its reply read as a session timeout of %gs%s)"):format(
              detail, t, state == core.c.READONLY_STATE and " and a read-only server" or ""))
    for _, ev in pairs(self._state_events) do
        ev:set()
    end
    return true
end


-- With tls, libzookeeper tries a handshake that fails again until the
-- timeout and says nothing: when no server answered within
-- tls.CHECK_AFTER, a handshake of our own to each says why (client/tls.lua).
-- Nil, or why.
local function tls_failure(self, answered, o, endpoints)
    if not self._tls then
        return nil
    end
    local first = math.min(tls.CHECK_AFTER, o.connect_timeout / 2)
    if self:wait_state(answered, first) then
        return nil
    end
    return tls.failure(self._tls, self._waiter, endpoints,
                       o.connect_timeout - first - PROBE_TIMEOUT)
end


-- Waits for the first connection, then for the credentials: the first
-- create must already carry them (creator_all ACLs).
local function await_connected(self, o, endpoints)
    local deadline = now() + o.connect_timeout
    local function answered(st)
        return st == "connected" or self._not_zookeeper_detail ~= nil or self._auth_failed
    end
    local tls_why = tls_failure(self, answered, o, endpoints)
    if tls_why then
        self:close()
        return nil, "tls", tls_why
    end
    local connected = self:wait_state(answered, deadline - PROBE_TIMEOUT - now())
    local refused
    if not connected and self._state == "connecting" then
        refused = all_refused(self._waiter, endpoints)
    end
    if not connected then
        local left = deadline - now()
        connected = left > 0 and self:wait_state(answered, left)
    end
    if self._auth_failed then
        self:close()
        return sasl.failure(self._sasl, self._hosts)
    end
    local not_zk = self._not_zookeeper_detail
    if not_zk then
        self:close()
        return nil, "connectionloss", not_zk
    end
    if not connected then
        local state = self._state
        self:close()
        if state == "lost" then
            return nil, "sessionexpired", "the session could not be resumed"
        elseif refused then
            return nil, "connectionloss", "connection refused by " .. refused
        end
        return nil, "timeout", ("no ZooKeeper server answered within %gs at %s%s")
                               :format(o.connect_timeout, self._hosts, self._tls
                                       and " over TLS" or "")
    end
    for _, f in ipairs(self._auth_futures or {}) do
        local aok, aerr = f:wait(o.connect_timeout)
        if not aok then
            self:close()
            return nil, aerr, "adding credentials failed"
        end
    end
    self._auth_futures = nil
    return true
end


-- A chroot is a prefix libzookeeper adds to every path: a missing one
-- still connects and every call then fails with "nonode". exists("/")
-- asks the server about the chroot itself. Not created here: which
-- parents and ACLs it should have is the application's choice (Curator
-- creates its namespace lazily; kazoo does not create it).
local function check_chroot(self, chroot)
    if chroot == "" then
        return true
    end
    local stat, err, detail = self:exists("/")
    if stat then
        return true
    end
    self:close()
    if stat == false then
        return nil, "nonode", ("chroot %s does not exist: create it first (a client without "
                               .. "chroot: client:create(%q, nil, { parents = true }))")
                              :format(chroot, chroot)
    end
    return nil, err, "checking that chroot " .. chroot .. " exists: " .. tostring(detail or err)
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
---@field tls table? { ca =, certfile =, keyfile =, keyfile_password =, verify = true }:
---                  TLS with a client certificate (a core built with TLS; README "TLS")
---@field sasl table? { mechanism = "DIGEST-MD5"|"GSSAPI", username =, password =, service =,
---                   host = }: SASL authentication, kazoo's sasl_options (a core built
---                   with SASL; docs/client.md, docs/install.md "SASL")

--- Opens a session and waits (at most connect_timeout) until it is connected.
---@param opts zkcoord.connect_opts
---@return table|nil client, string? err, string? detail
function _M.connect(opts)
    local c = options.check(opts)
    local o = c.opts
    if ngx and ngx.get_phase and ngx.get_phase() == "init" and o.wait ~= "blocking" then
        error("zkcoord.connect: no ZooKeeper session in init_by_lua*: it runs in the master "
              .. "before fork. Connect in init_worker_by_lua* (zkcoord.ngx.init_worker) "
              .. "or on first use", 2)
    end
    core.set_log_level(o.zk_log_level)

    local tok, terr, tdetail = tls.check_files(c.tls)
    if not tok then
        return nil, terr, tdetail
    end
    tok, terr, tdetail = sasl.check_mechanism(c.sasl)
    if not tok then
        return nil, terr, tdetail
    end
    local q, qerr, qdetail = core.completions()
    if not q then
        return nil, qerr, qdetail
    end
    local self, werr, wdetail = new_client(c, q)
    if not self then
        return nil, werr, wdetail
    end
    local ok, err, detail = self:_open_session(o.session_id, o.session_password)
    if not ok then
        return open_failure(c.endpoints, err, detail)
    end
    ok, err, detail = await_connected(self, o, c.endpoints)
    if not ok then
        return nil, err, detail
    end
    ok, err, detail = check_chroot(self, c.chroot)
    if not ok then
        return nil, err, detail
    end
    _M.live[self] = true
    return self
end


-- The handshake watchdog (src/reconnect.c): an attempt unanswered for
-- handshake_timeout is made again, the allowance doubling up to
-- libzookeeper's own (2/3 of the session timeout). 0 or math.huge: off.
-- `s`: another handle of ours (nodes.lua's side handles), default the session's.
function _M:_arm_watchdog(timeout, s)
    local first = self._opts.handshake_timeout
    if first == 0 or first == math.huge then
        return
    end
    (s or self._s):watchdog(self._hosts, first, timeout * 2 / 3)
end


function _M:_open_session(sid, password)
    self._serial = self._serial + 1
    local s, err, detail = core.open(self._q, self._hosts, self._opts.session_timeout,
                                     self._serial, sid, password, self._opts.resolve_interval,
                                     self._tls and self._tls.string, self._sasl)
    if not s then
        return nil, err, detail
    end
    self._s = s
    self._session_id = nil
    self._dropped = 0
    self:_arm_watchdog(self._opts.session_timeout)
    if self._auth then
        local futures = {}
        for i, a in ipairs(self._auth) do
            futures[i] = self:_request(nil, "add_auth", a.scheme, a.credentials)
        end
        self._auth_futures = futures
    end
    return true
end


return _M
