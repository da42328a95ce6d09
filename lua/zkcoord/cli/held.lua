-- zkcoord.cli.held: `zkcoord lock` and `zkcoord elect`: wait for the lock
-- (or the leadership) of PATH, run CMD while holding it with the fencing
-- token in its environment, forward signals to it, SIGTERM (then SIGKILL
-- after --grace) if the hold is lost, release when CMD ends. The exit status
-- is CMD's, or 71 (lost), 75 (not acquired within --timeout), 128+N (a
-- signal before CMD started). Not a public API.
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"
local sys = require "zkcoord.cli.sys"
local ex = require "zkcoord.cli.exit"
local args_mod = require "zkcoord.cli.args"
local session = require "zkcoord.cli.session"
local show = require "zkcoord.cli.show"

local exit, usage, describe, note = ex.exit, ex.usage, ex.describe, ex.note
local SIG = sys.SIG

local _M = {}

local function default_id()
    return sys.hostname() .. ":" .. sys.getpid()
end


-- Waits (serving the client) until `done()` or a signal; returns the signal.
local function drive_until(c, sigfd, done)
    while not done() do
        c:run(0.05)
        for _, s in ipairs(sys.read_signals(sigfd)) do
            if s.signo ~= SIG.CHLD then
                return s.signo
            end
        end
    end
end


-- The lock's line: one line (zkcoord.line) of ephemeral-sequential nodes
-- for both sides. The exclusive side is client:lock()'s node
-- (_c_<uuid>-lock-<seq>, Curator's InterProcessMutex), through when first
-- in line; the shared side is the read-write lock's read node
-- (_c_<uuid>-__READ__<seq>, Curator's InterProcessReadWriteLock), through
-- when no exclusive node (lock- or __WRIT__) is below it (rwlock's read
-- rule, with both exclusive markers). So `lock` and `lock --shared` on one
-- PATH exclude each other, and each also honours the library's (and
-- Curator's) lock or rwlock nodes on that PATH.
local LINE_MARKERS = { "downgrade-__READ__", "__READ__", "__WRIT__", "lock-" }
local EXCLUSIVE = line.driver { marker = "lock-", markers = LINE_MARKERS, rule = rules.first }
local SHARED = line.driver { marker = "__READ__", markers = LINE_MARKERS,
                             rule = rules.none_below("__WRIT__", "lock-") }
local LATCH = line.driver { marker = "latch-", rule = rules.first }


local function line_position(c, path, shared, data)
    return line.new(c, path, shared and SHARED or EXCLUSIVE, data)
end


-- Election: our node is the first latch node, owned by our session.
local function leader_node(c, path)
    local q = line.new(c, path, LATCH)
    local entries, err = q:entries()
    if not entries then
        return nil, err
    end
    local first = entries[1]
    if not first then
        return nil, "nonode"
    end
    local st, serr = c:exists(first.path)
    if not st then
        return nil, serr or "nonode"
    end
    if st.ephemeral_owner ~= c:session_id() then
        return nil, "lost"
    end
    return first.path, st.czxid
end


-- Connects and starts waiting for the hold (in a task of the client), with
-- signals blocked first: the client's threads inherit the mask. Returns the
-- hold record h: c, sigfd, user_fds, lk (lock) or e (election), what (for
-- messages), and h.lost once the hold is lost; h.done, h.ok, h.err,
-- h.detail when the wait ends.
local function start(g, verb, o, path)
    local sigfd, serr = sys.block_signals()
    if not sigfd then
        exit(ex.OSERR, serr)
    end
    local h = { sigfd = sigfd, user_fds = sys.open_fds(), done = false }
    h.c = session.connect(g, true)
    local c = h.c
    if verb == "lock" then
        h.lk = line_position(c, path, o.shared, o.data or default_id())
        h.lk:on_lost(function(reason) h.lost = h.lost or reason end)
        c:spawn(function()
            h.ok, h.err, h.detail = h.lk:enter(o.timeout)
            h.done = true
        end)
    else
        h.e = c:election(path, { id = o.id or default_id() })
        h.e:on_revoked(function(reason)
            if reason ~= "resigned" then h.lost = h.lost or reason end
        end)
        c:spawn(function()
            h.ok, h.err, h.detail = h.e:campaign(o.timeout)
            h.done = true
        end)
    end
    h.what = verb == "lock" and ((o.shared and "read lock " or "lock ") .. path)
             or ("leadership of " .. path)
    return h
end

-- After the wait: the node and its token, or the exit status when the hold
-- was not acquired, was lost already, or a signal came (before or with the
-- grant).
local function granted(h, verb, o, path)
    local c, what = h.c, h.what
    local sig = drive_until(c, h.sigfd, function() return h.done end)
    if sig then
        c:close()     -- our node, if any, goes with the session at once
        note(("%s while waiting for the %s"):format(sys.SIGNAME[sig] or ("signal " .. sig), what))
        return nil, 128 + sig
    end
    if not h.ok then
        c:close()
        if h.err == "timeout" then
            note(("%s not acquired within %gs"):format(what, o.timeout or 0))
            return nil, ex.TEMPFAIL
        end
        exit(ex.FAIL, verb .. " " .. path .. ": " .. describe(h.err, h.detail))
    end
    local node, token
    if h.lk then
        node, token = h.lk:node(), h.lk:is_through() and h.lk:stat() and h.lk:stat().czxid
    else
        node, token = leader_node(c, path)
    end
    if h.lost or not node or not token then
        c:close()
        note(("%s lost (%s) before the command started"):format(what, h.lost or tostring(token)))
        return nil, ex.OSERR
    end
    -- A signal that came with the grant: stop here rather than start CMD.
    for _, s in ipairs(sys.read_signals(h.sigfd)) do
        if s.signo ~= SIG.CHLD then
            c:close()
            note(("%s just after the %s was granted: the command was not started")
                 :format(sys.SIGNAME[s.signo] or ("signal " .. s.signo), what))
            return nil, 128 + s.signo
        end
    end
    return node, token
end

local function release(h)
    if h.lk then
        h.lk:leave()
    else
        h.e:resign()
    end
end

-- Serves the client while CMD (pid) runs: forwards signals to it, and once
-- the hold is lost sends SIGTERM, then SIGKILL `grace` seconds later.
-- Returns CMD's status.
local function supervise(h, pid, grace)
    local c = h.c
    local fd = c:fd()
    local term_at, killed
    while true do
        local status = sys.reap(pid)
        if status then
            return status
        end
        if h.lost and not term_at then
            note(("%s lost (%s) while the command ran: SIGTERM to %d"):format(h.what, h.lost, pid))
            sys.kill(pid, SIG.TERM)
            term_at = sys.now()
        end
        if term_at and not killed and sys.now() - term_at >= grace then
            note(("command %d still running %gs after SIGTERM: SIGKILL"):format(pid, grace))
            sys.kill(pid, SIG.KILL)
            killed = true
        end
        sys.poll(h.sigfd, fd, 0.1)
        c:process()
        for _, s in ipairs(sys.read_signals(h.sigfd)) do
            -- A terminal's Ctrl-C reached the whole foreground process group,
            -- CMD included: do not send it twice.
            if s.signo ~= SIG.CHLD and not (s.signo == SIG.INT and s.kernel) then
                sys.kill(pid, s.signo)
            end
        end
    end
end

local function run_held(g, verb, o, path, cmd)
    local h = start(g, verb, o, path)
    local node, token = granted(h, verb, o, path)
    if not node then
        return token     -- the exit status
    end
    sys.cloexec_all_but(h.user_fds)
    io.stdout:flush()
    io.stderr:flush()
    local pid, perr, pstatus = sys.spawn(cmd, { ZKCOORD_FENCING_TOKEN = show.fmt_number(token),
                                                ZKCOORD_LOCK_NODE = node })
    if not pid then
        release(h)
        h.c:close()
        note(perr)
        return pstatus
    end
    local status = supervise(h, pid, o.grace or 10)
    release(h)
    h.c:close()
    if h.lost then
        return ex.OSERR
    end
    return status
end

-- `lock` and `elect`: their options, PATH, -- CMD [ARGS...].
function _M.verb(g, verb, args, i)
    local spec = verb == "lock"
        and { ["--timeout"] = "number", ["--shared"] = "flag", ["--data"] = "string",
              ["--grace"] = "number" }
        or { ["--id"] = "string", ["--timeout"] = "number", ["--grace"] = "number" }
    local o
    o, i = args_mod.parse_opts(verb, args, i, spec)
    local path = args_mod.check_path(verb, args[i])
    i = i + 1
    if args[i] == "--" then
        i = i + 1
    elseif args[i] and args[i]:sub(1, 1) == "-" then
        usage(verb, "zkcoord: " .. verb .. ": options go before PATH (got '" .. args[i]
                    .. "' after it; a command starting with '-' goes after '--')")
    end
    if not args[i] then
        usage(verb, "zkcoord: " .. verb .. ": no command given (PATH -- CMD [ARGS...])")
    end
    local cmd = {}
    for k = i, #args do cmd[#cmd + 1] = args[k] end
    return run_held(g, verb, o, path, cmd)
end

return _M
