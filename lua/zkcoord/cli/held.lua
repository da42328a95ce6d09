-- zkcoord.cli.held: `zkcoord lock`, `zkcoord elect` and `zkcoord once`:
-- wait for the lock (or the leadership) of PATH, run CMD while holding it
-- with the fencing token in its environment, forward signals to it,
-- SIGTERM (then SIGKILL after --grace) if the hold is lost, release when
-- CMD ends. The exit status is CMD's, or 71 (lost), 75 (not acquired
-- within --timeout: silent, as flock, unless --verbose), 128+N (a signal
-- before CMD started). `once` takes the lock without waiting and runs CMD
-- only if this period's run is not done (once.lua). Not a public API.
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"
local sys = require "zkcoord.cli.sys"
local ex = require "zkcoord.cli.exit"
local args_mod = require "zkcoord.cli.args"
local session = require "zkcoord.cli.session"
local show = require "zkcoord.cli.show"
local locks = require "zkcoord.cli.locks"
local once = require "zkcoord.cli.once"
local supervise = require("zkcoord.cli.supervise").supervise

local exit, usage, describe, note = ex.exit, ex.usage, ex.describe, ex.note
local MAX_SECONDS = require("zkcoord.util.args").MAX_SECONDS
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


local function line_position(c, path, shared, data)
    return line.new(c, path, shared and SHARED or EXCLUSIVE, data)
end


-- Connects and starts waiting for the hold (in a task of the client), with
-- signals blocked first: the client's threads inherit the mask; and the
-- guard started before any connection or thread exists, so it holds none.
-- Returns the hold record h: c, sigfd, user_fds, guard, lk (lock) or e
-- (election), what (for messages), and h.lost once the hold is lost;
-- h.done, h.ok, h.err, h.detail when the wait ends. Or h (without c) and
-- what ended the connect: a signal number or "timeout".
local function start(g, verb, o, path)
    local sigfd, serr = sys.block_signals()
    if not sigfd then
        exit(ex.OSERR, serr)
    end
    local h = { sigfd = sigfd, user_fds = sys.open_fds(), done = false, path = path }
    h.what = verb == "elect" and ("leadership of " .. path)
             or ((o.shared and "read lock " or "lock ") .. path)
    local guard, gerr = sys.guard()
    if not guard then
        exit(ex.OSERR, gerr)
    end
    h.guard = guard
    -- -w/--timeout counts from now, the connect included (-n, 0: one try
    -- once connected); a signal or that deadline ends the connect at once
    local t0 = sys.now()
    h.t0 = t0
    o.wait_for = o.timeout
    local c, why = session.connect(g, true, sigfd, (o.timeout or 0) > 0 and t0 + o.timeout or nil)
    if not c then
        h.why = "no session yet"
        return h, why
    end
    if (o.timeout or 0) > 0 then
        o.timeout = math.max(0, o.timeout - (sys.now() - t0))
    end
    -- flock's -w 3600: above the API's bound (util.MAX_SECONDS: a timeout of
    -- the API is seconds, not milliseconds) the wait has no timeout and
    -- granted() ends it at the deadline instead.
    if o.timeout and o.timeout > MAX_SECONDS then
        h.deadline, o.timeout = sys.now() + o.timeout, math.huge
    end
    h.c = c
    if verb ~= "elect" then
        h.lk = line_position(c, path, o.shared, o.data or default_id())
        h.lk:on_lost(function(reason) h.lost = h.lost or reason end)
        c:spawn(function()
            h.ok, h.err, h.detail = h.lk:enter(o.timeout)
            h.done = true
        end)
    else
        h.e = c:election(path, { id = o.id or default_id(), rejoin = false })  -- a loss ends the command
        h.e:on_lost(function(reason)
            if reason ~= "resigned" then h.lost = h.lost or reason end
        end)
        c:spawn(function()
            h.ok, h.err, h.detail = h.e:campaign(o.timeout)
            h.done = true
        end)
    end
    return h
end

-- After the wait: the node and its token, or the exit status when the hold
-- was not acquired, was lost already, or a signal came (before or with the
-- grant).
-- Silent (as flock): a conflict is the expected end of a run that lost;
-- --verbose says who holds it and how long we waited. `once` ends with 0:
-- this period's run is running elsewhere.
local function not_acquired(h, o)
    if o.period then
        if o.verbose then
            note(("once %s: a run is under way elsewhere (waited %.3fs): %s")
                 :format(h.path, sys.now() - h.t0, h.why or "held"))
        end
        return nil, ex.OK
    end
    if o.verbose then
        note(("%s not acquired within %gs (waited %.3fs): %s"):format(h.what, o.wait_for or 0,
             sys.now() - h.t0, h.why or "held"))
    end
    return nil, o.conflict_exit_code or ex.TEMPFAIL
end

-- "held by NODE (DATA), ..." for --verbose: the holders of the lock at
-- `path` now (this lock's line only: no walk below it).
local function holders(c, path)
    local ok, rows = pcall(locks.at, c, path)
    local out = {}
    for _, r in ipairs(ok and rows or {}) do
        if r.state == "holder" then
            out[#out + 1] = ("%s (%s)"):format(r.node, show.printable(r.data))
        end
    end
    return #out > 0 and "held by " .. table.concat(out, ", ") or "held (holder gone since)"
end

local function interrupted(h, sig, where)
    note(("%s while %s the %s"):format(sys.SIGNAME[sig] or ("signal " .. sig), where, h.what))
    return nil, 128 + sig
end

local function granted(h, verb, o, path)
    local c, what = h.c, h.what
    local sig = drive_until(c, h.sigfd, function()
        return h.done or (h.deadline ~= nil and sys.now() >= h.deadline)
    end)
    if sig then
        c:close()     -- our node, if any, goes with the session at once
        return interrupted(h, sig, "waiting for")
    end
    if not h.done then
        c:close()     -- past a long -w: our node goes with the session
        return not_acquired(h, o)
    end
    if not h.ok then
        if h.err == "timeout" then
            h.why = o.verbose and holders(c, path)
            c:close()
            return not_acquired(h, o)
        end
        c:close()
        exit(ex.FAIL, verb .. " " .. path .. ": " .. describe(h.err, h.detail))
    end
    local node, token
    if h.lk then
        node, token = h.lk:node(), h.lk:is_through() and h.lk:stat() and h.lk:stat().czxid
    else
        node, token = h.e:node(), h.e:token()
    end
    if h.lost or not node or not token then
        c:close()
        note(("%s lost (%s) before the command started"):format(what, h.lost or tostring(token)))
        return nil, ex.OSERR
    end
    if o.verbose then
        note(("got the %s after %.3fs (node %s)"):format(what, sys.now() - h.t0, node))
    end
    if o.period then
        local done, about, detail = once.done(c, path, h.lk:stat().ctime, o.period)
        if done == nil then
            c:close()
            exit(ex.FAIL, "once " .. path .. ": " .. describe(about, detail))
        end
        if done then
            c:close()     -- the lock goes with the session at once
            if o.verbose then note("once " .. path .. ": done already: " .. about) end
            return nil, ex.OK
        end
        if o.verbose then note("once " .. path .. ": running " .. about) end
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

local function run_held(g, verb, o, path, cmd)
    local h, why = start(g, verb, o, path)
    local node, token
    if why == "timeout" then
        node, token = not_acquired(h, o)
    elseif why then
        node, token = interrupted(h, why, "connecting for")
    else
        node, token = granted(h, verb, o, path)
    end
    if not node then
        h.guard:stop()
        return token     -- the exit status
    end
    sys.cloexec_all_but(h.user_fds)
    io.stdout:flush()
    io.stderr:flush()
    local ok, serr = sys.subreaper()
    local pid, perr, pstatus
    if ok then
        pid, perr, pstatus = sys.spawn(cmd, { ZKCOORD_FENCING_TOKEN = show.fmt_number(token),
                                              ZKCOORD_LOCK_NODE = node }, true)
    else
        perr, pstatus = serr, ex.OSERR
    end
    if not pid then
        h.guard:stop()
        release(h)
        h.c:close()
        note(perr)
        return pstatus
    end
    h.guard:arm(pid)
    -- On a terminal (stdin, stdout or stderr, in that order), the
    -- command's group takes it over while it runs
    -- (reading it, getting its Ctrl-C), as a shell's job would; SIGCONT in
    -- case it read the terminal before it had it (SIGTTIN stopped it).
    for fd = 0, 2 do
        h.tty = sys.foreground(fd, pid) or nil
        if h.tty then
            h.tty_fd = fd
            sys.kill(-pid, SIG.CONT)
            break
        end
    end
    local status = supervise(h, pid, o.grace or 10)
    if h.tty then
        sys.foreground(h.tty_fd, h.tty)
    end
    h.guard:stop()
    if o.period and status == ex.OK and not h.lost then
        -- while the lock is held: the next host must find it done
        local rec, err, detail = once.record(h.c, path, h.lk:stat().ctime, o.data or default_id())
        if not rec then
            note("once " .. path .. ": the run succeeded but was not recorded (another may run it): "
                 .. describe(err, detail))
            status = ex.FAIL
        elseif o.verbose then
            note("once " .. path .. ": recorded")
        end
    end
    release(h)
    h.c:close()
    if h.lost then
        return ex.OSERR
    end
    return status
end

-- The options of lock and elect: ours, and flock(1)'s short ones (-n, -w,
-- -s, -x, -E, -c) with their long names.
-- -o (--close: flock closes its lock file's descriptor before running CMD)
-- is taken and does nothing: no descriptor of ours reaches CMD anyway.
local COMMON = { ["--grace"] = "number", ["-c"] = "string", ["--command"] = "string",
                 ["--verbose"] = "flag", ["-o"] = "flag", ["--close"] = "flag" }
local WAITS = { ["--timeout"] = "number", ["-n"] = "flag", ["--nonblock"] = "flag",
                ["-w"] = "number", ["--wait"] = "number",
                ["-E"] = "code", ["--conflict-exit-code"] = "code" }
local SPEC = { lock = { ["--shared"] = "flag", ["--data"] = "string", ["-s"] = "flag",
                        ["-x"] = "flag", ["--exclusive"] = "flag" },
               elect = { ["--id"] = "string" },
               once = { ["--period"] = "number", ["--data"] = "string" } }
for verb, spec in pairs(SPEC) do
    for k, v in pairs(COMMON) do spec[k] = v end
    if verb ~= "once" then       -- once never waits: a held lock is a run under way
        for k, v in pairs(WAITS) do spec[k] = v end
    end
end

-- flock's names onto ours: -n is --timeout 0, -w S --timeout S, -s
-- --shared, -E --conflict-exit-code, -c --command.
local function normalize(verb, o)
    local waits = (o.timeout and 1 or 0) + ((o.n or o.nonblock) and 1 or 0)
                  + ((o.w or o.wait) and 1 or 0)
    if waits > 1 then
        usage(verb, "zkcoord: " .. verb .. ": give one of --timeout, -n and -w")
    end
    o.timeout = o.timeout or o.w or o.wait or ((o.n or o.nonblock) and 0) or nil
    o.shared = o.shared or o.s
    if o.shared and (o.x or o.exclusive) then
        usage(verb, "zkcoord: " .. verb .. ": --shared (-s) and --exclusive (-x) exclude each other")
    end
    o.conflict_exit_code = o.conflict_exit_code or o.E
    o.command = o.command or o.c
    if verb == "once" then
        if not o.period or o.period <= 0 then
            usage(verb, "zkcoord: once: --period SECONDS (> 0) is required")
        end
        o.timeout = 0
    end
    return o
end

-- `lock`, `elect` and `once`: their options, PATH, then -- CMD [ARGS...] or (as
-- flock) -c CMD, run by `sh -c`.
function _M.verb(g, verb, args, i)
    local o
    o, i = args_mod.parse_opts(verb, args, i, SPEC[verb])
    o = normalize(verb, o)
    local path = args_mod.check_path(verb, args[i])
    i = i + 1
    local a = args[i]
    if (a == "-c" or a == "--command") and not o.command then
        if args[i + 1] == nil then
            usage(verb, "zkcoord: " .. verb .. ": " .. a .. " needs a value")
        end
        o.command = args[i + 1]
        i = i + 2
        if args[i] ~= nil then
            usage(verb, "zkcoord: " .. verb .. ": nothing goes after -c CMD (got '" .. args[i] .. "')")
        end
    elseif a == "--" then
        i = i + 1
    elseif a and a:sub(1, 1) == "-" then
        usage(verb, "zkcoord: " .. verb .. ": options go before PATH (got '" .. a
                    .. "' after it; a command starting with '-' goes after '--')")
    end
    local cmd = {}
    if o.command then
        if args[i] ~= nil then
            usage(verb, "zkcoord: " .. verb .. ": give -c CMD or -- CMD [ARGS...], not both")
        end
        cmd = { "sh", "-c", o.command }
    else
        if not args[i] then
            usage(verb, "zkcoord: " .. verb .. ": no command given (PATH -- CMD [ARGS...], or PATH -c CMD)")
        end
        for k = i, #args do cmd[#cmd + 1] = args[k] end
    end
    return run_held(g, verb, o, path, cmd)
end

return _M
