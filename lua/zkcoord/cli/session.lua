-- zkcoord.cli.session: the command's ZooKeeper client: connect from the
-- global options (--servers, --session-timeout, --connect-timeout,
-- --chroot, --auth, --tls-*, --sasl-*), a failure to reach the servers ending the command with
-- status 69; every client made is closed by close_all() when the command
-- ends, whatever happens. Not a public API.
local zkcoord = require "zkcoord"
local blocking = require "zkcoord.wait.blocking"
local sys = require "zkcoord.cli.sys"
local ex = require "zkcoord.cli.exit"

local exit, usage, describe, note = ex.exit, ex.usage, ex.describe, ex.note

local _M = {}

local clients = {}     -- closed by close_all() whatever happens

-- A blocking waiter whose sleeps, while `watch.on`, also end on a signal
-- read from `watch.sigfd` (not CHLD) or at `watch.deadline` (monotonic, or
-- nil): they raise { signo = N } or { timeout = true }, which ends
-- zkcoord.connect at once instead of after the connect timeout.
local function interruptible(watch)
    return { new = function(client, pump)
        local proxy = setmetatable({}, { __index = function(_, k)
            local v = pump[k]
            if type(v) ~= "function" then return v end
            return function(_, ...) return v(pump, ...) end
        end })
        function proxy.wait(_, seconds)
            if not watch.on then
                return pump:wait(seconds)
            end
            local t = pump:timer_cap(seconds)
            if watch.deadline then
                t = math.min(t, watch.deadline - sys.now())
            end
            -- the queue's bell: rung when records arrive (drained by the caller)
            local ready = t > 0 and sys.poll(t, watch.sigfd, pump:fd()) > 0
            for _, sg in ipairs(sys.read_signals(watch.sigfd)) do
                if sg.signo ~= sys.SIG.CHLD then
                    error({ signo = sg.signo }, 0)
                end
            end
            if watch.deadline and sys.now() >= watch.deadline then
                error({ timeout = true }, 0)
            end
            if ready then
                pump:clear_fd()
            end
            return ready
        end
        watch.client = client
        return blocking.new(client, proxy)
    end }
end

-- connect's tls option: --tls-ca, --tls-cert, --tls-key, else
-- $ZKCOORD_TLS_CA, $ZKCOORD_TLS_CERT, $ZKCOORD_TLS_KEY; the key's password
-- only from $ZKCOORD_TLS_KEY_PASSWORD (an argument shows in ps). Nil
-- when none is given.
local function tls_option(g)
    local function pick(v, env)
        v = v or os.getenv(env)
        return v ~= "" and v or nil
    end
    local ca, cert = pick(g.tls_ca, "ZKCOORD_TLS_CA"), pick(g.tls_cert, "ZKCOORD_TLS_CERT")
    local key = pick(g.tls_key, "ZKCOORD_TLS_KEY")
    if not (ca or cert or key) then
        return nil
    end
    if not (ca and cert and key) then
        usage(nil, "zkcoord: TLS needs --tls-ca, --tls-cert and --tls-key "
                   .. "(or $ZKCOORD_TLS_CA, $ZKCOORD_TLS_CERT, $ZKCOORD_TLS_KEY)")
    end
    return { ca = ca, certfile = cert, keyfile = key,
             keyfile_password = pick(nil, "ZKCOORD_TLS_KEY_PASSWORD") }
end


-- connect's sasl option: --sasl-mechanism (default DIGEST-MD5),
-- --sasl-user, --sasl-password-file (its first line), else
-- $ZKCOORD_SASL_MECHANISM, $ZKCOORD_SASL_USER, $ZKCOORD_SASL_PASSWORD_FILE
-- or $ZKCOORD_SASL_PASSWORD: never a password on the command line (ps
-- shows it). Nil when none is given.
local function sasl_option(g)
    local function pick(v, env)
        v = v or os.getenv(env)
        return v ~= "" and v or nil
    end
    local mech = pick(g.sasl_mechanism, "ZKCOORD_SASL_MECHANISM")
    local user = pick(g.sasl_user, "ZKCOORD_SASL_USER")
    local file = pick(g.sasl_password_file, "ZKCOORD_SASL_PASSWORD_FILE")
    local password = not file and pick(nil, "ZKCOORD_SASL_PASSWORD") or nil
    if not (mech or user or file or password) then
        return nil
    end
    mech = mech or "DIGEST-MD5"
    if file then
        local f, err = io.open(file, "rb")
        local line = f and f:read("*l")
        if f then f:close() end
        if not line then
            exit(ex.FAIL, "zkcoord: cannot read the SASL password file: "
                          .. (err or file .. " is empty"))
        end
        password = line:gsub("\r$", "")
    end
    if mech == "DIGEST-MD5" and not (user and password) then
        usage(nil, "zkcoord: SASL (DIGEST-MD5) needs --sasl-user and --sasl-password-file "
                   .. "(or $ZKCOORD_SASL_USER, and $ZKCOORD_SASL_PASSWORD_FILE or "
                   .. "$ZKCOORD_SASL_PASSWORD)")
    end
    return { mechanism = mech, username = user, password = password }
end


-- held: for lock and elect. libzookeeper notices a silent connection after
-- 2/3 of the session timeout; counting the session lost 1/4 of it later
-- (the library's lost_after; by default a whole timeout later) sends CMD its
-- SIGTERM a little before the server can expire the session and grant the
-- lock to someone else. With `sigfd`, a signal (not CHLD) ends the connect
-- at once: returns nil, signo; and with `deadline` too (monotonic), so
-- does that time: returns nil, "timeout".
function _M.connect(g, held, sigfd, deadline)
    local opts = {
        servers = g.servers,
        session_timeout = g.session_timeout or 10,
        connect_timeout = g.connect_timeout or 5,
        chroot = g.chroot,
        lost_after = held and (g.session_timeout or 10) / 4 or nil,
        logger = function(level, msg)
            if level == "error" then note(msg) end
        end,
    }
    if g.auth then
        if not g.auth:find(":", 1, true) then
            usage(nil, "zkcoord: --auth needs user:secret")
        end
        opts.auth = { scheme = "digest", credentials = g.auth }
    end
    opts.tls = tls_option(g)
    opts.sasl = sasl_option(g)
    if opts.session_timeout <= 0 or opts.connect_timeout <= 0 then
        usage(nil, "zkcoord: --session-timeout and --connect-timeout must be > 0")
    end
    local watch
    if sigfd then
        watch = { on = true, sigfd = sigfd, deadline = deadline }
        opts.wait = interruptible(watch)
    end
    local ok, c, err, detail = pcall(zkcoord.connect, opts)
    if watch then
        watch.on = false       -- from now on, the caller reads the signals
    end
    if not ok and type(c) == "table" then
        watch.client:close()
        return nil, c.signo or "timeout"
    end
    if not ok then
        usage(nil, "zkcoord: " .. tostring(c):gsub("^.-: ", ""))
    end
    if not c then
        -- systemerror: libzookeeper could not resolve or open any address
        if err == "timeout" or err == "connectionloss" or err == "systemerror" then
            exit(ex.UNAVAILABLE, "cannot reach ZooKeeper at " .. g.servers .. ": "
                                 .. describe(err, detail))
        end
        exit(ex.FAIL, "connecting to " .. g.servers .. ": " .. describe(err, detail))
    end
    clients[#clients + 1] = c
    return c
end

-- Closes every client connect() made.
function _M.close_all()
    for k, c in ipairs(clients) do
        c:close()
        clients[k] = nil
    end
end

return _M
