--- zkcoord.cli: the `zkcoord` command (bin/zkcoord): a distributed flock for
--- any program, leader-only commands, and the everyday ZooKeeper verbs.
--
--   local code = require("zkcoord.cli").main(arg)   -- returns the exit status
--
-- Exit statuses (sysexits): 0 success; CMD's own status for lock/elect (a
-- signal death as 128+N, as a shell gives it); 1 a runtime failure (the
-- message names the ZooKeeper code); 64 bad usage; 69 no server reachable
-- within the connect timeout; 71 the lock or leadership was lost while CMD
-- ran; 75 the lock (or leadership) was not acquired within --timeout.
local zkcoord = require "zkcoord"
local core = require "zkcoord.core"
local queue = require "zkcoord.queue"
local sys = require "zkcoord.cli.sys"

local _M = { _VERSION = require("zkcoord.version") }

local EX_OK, EX_FAIL, EX_USAGE, EX_UNAVAILABLE, EX_SOFTWARE, EX_OSERR, EX_TEMPFAIL =
    0, 1, 64, 69, 70, 71, 75
_M.EX = { OK = EX_OK, FAIL = EX_FAIL, USAGE = EX_USAGE, UNAVAILABLE = EX_UNAVAILABLE,
          SOFTWARE = EX_SOFTWARE, OSERR = EX_OSERR, TEMPFAIL = EX_TEMPFAIL }

local SIG = sys.SIG

-- ---------------------------------------------------------------------------
-- Help texts

local USAGE = [[
usage: zkcoord [--servers HOSTS] [--session-timeout S] [--connect-timeout S]
               [--chroot P] [--auth user:secret] VERB ...

  lock    [--timeout S] [--shared] [--data TEXT] [--grace S] PATH -- CMD [ARGS...]
  elect   [--id ID] [--timeout S] [--grace S] PATH -- CMD [ARGS...]
  locks   PATH
  get     PATH
  set     PATH DATA
  create  [-e] [-s] [-p] PATH [DATA]
  rm      [-r] PATH
  ls      [-l] PATH
  stat    PATH
  tree    PATH
  watch   [--children] PATH
  counter PATH [add N | set N]

Servers: --servers, else $ZKCOORD_SERVERS, else 127.0.0.1:2181.
`zkcoord VERB --help` (or `zkcoord help VERB`) describes a verb.
Exit status: 0 ok, 1 runtime failure, 64 usage, 69 no server reachable,
71 lock lost while CMD ran, 75 lock not acquired in time; lock and elect
exit with CMD's status (128+N when a signal N killed it).
]]

local HELP = {
    lock = [[
usage: zkcoord lock [--timeout S] [--shared] [--data TEXT] [--grace S] PATH -- CMD [ARGS...]

Runs CMD while holding the lock PATH (exclusive; --shared: the read side of
the read-write lock PATH), then releases it at once. Fair: first come, first
served. Exclusive and shared runs on PATH exclude each other, and respect
the zkcoord library's lock and rwlock holders and Curator's InterProcessMutex
on PATH (the same node names); kazoo's locks are listed by `locks` only.

  --timeout S   give up after S seconds (exit 75); 0 tries once;
                without it, wait as long as it takes
  --shared      take the read lock: many --shared holders at once, none
                while an exclusive holder or an earlier writer is there
  --data TEXT   the lock node's data (default hostname:pid), shown by `locks`
  --grace S     when the lock is lost while CMD runs, CMD gets SIGTERM at
                once and SIGKILL S seconds later (default 10)

CMD's environment has ZKCOORD_FENCING_TOKEN (grows with every grant of the
lock) and ZKCOORD_LOCK_NODE. SIGINT, SIGTERM and SIGHUP are passed on to CMD.
Exit status: CMD's (128+N for a signal N), 75 not acquired in time, 71 lock
lost while CMD ran (session expired, node deleted), 69 no server, 64 usage;
126/127 CMD not executable / not found.
]],
    elect = [[
usage: zkcoord elect [--id ID] [--timeout S] [--grace S] PATH -- CMD [ARGS...]

Joins the leader election PATH (Curator LeaderLatch compatible), waits to be
leader, then runs CMD while leader. When leadership is lost, CMD gets SIGTERM
at once and SIGKILL --grace S seconds later (default 10); the exit status is
then 71. When CMD ends, leadership passes on at once.

  --id ID       this candidate's id, stored as node data (default hostname:pid)
  --timeout S   give up when not leader after S seconds (exit 75)
  --grace S     seconds between SIGTERM and SIGKILL after a loss

Environment, signals and exit statuses as for `zkcoord lock`.
]],
    locks = [[
usage: zkcoord locks PATH

Lists the holders and waiters of the lock (or read-write lock, or
election) PATH in line order, one a line, tab-separated:
  STATE  KIND  NODE  DATA  SESSION  AGE
STATE is holder or waiter; KIND lock, read, write or leader. Knows the
nodes of zkcoord, Curator (_c_<uuid>-lock-<seq>, __READ__, __WRIT__,
latch-) and kazoo (<uuid>__lock__<seq>, __rlock__); other children are
skipped. SESSION is the owner session (hex), AGE the node's age.
]],
    get = "usage: zkcoord get PATH\n\nPrints the node's data and a newline.\n",
    set = "usage: zkcoord set PATH DATA\n\nSets the node's data (the node must exist).\n",
    create = [[
usage: zkcoord create [-e] [-s] [-p] PATH [DATA]

Creates a node and prints its path.
  -e  ephemeral (it goes when this command exits: useful for tests only)
  -s  sequential (a sequence number is appended to the name)
  -p  create missing parents
]],
    rm = "usage: zkcoord rm [-r] PATH\n\nDeletes the node; -r: with its whole subtree.\n",
    ls = [[
usage: zkcoord ls [-l] PATH

Prints the node's children, sorted, one a line. -l: tab-separated
NAME  DATA_LENGTH  NUM_CHILDREN  EPHEMERAL_OWNER (or -)  MTIME (UTC)
]],
    stat = "usage: zkcoord stat PATH\n\nPrints the node's stat, one NAME<tab>VALUE a line.\n",
    tree = "usage: zkcoord tree PATH\n\nPrints PATH and every node below it, one path a line, depth first.\n",
    watch = [[
usage: zkcoord watch [--children] PATH

Prints the node's data (--children: its children, separated by spaces)
now and again on every change, one line each, until interrupted (SIGINT,
SIGTERM or SIGHUP: exit 0). While the node does not exist nothing is
printed on stdout; stderr says so.
]],
    counter = [[
usage: zkcoord counter PATH [add N | set N]

Prints the counter's value (after adding N, or setting it to N). The node
holds a decimal integer; it is created (with 0) on first use.
]],
}
HELP.help = USAGE

-- ---------------------------------------------------------------------------
-- Errors

-- Raised with error(); main() turns it into a message and an exit status.
local Exit = {}
Exit.__index = Exit

local function exit(code, msg)
    error(setmetatable({ code = code, msg = msg }, Exit), 0)
end


local function usage(verb, msg)
    exit(EX_USAGE, (msg and msg .. "\n" or "") .. (HELP[verb] or USAGE))
end


local RC = {}
for rc, name in pairs(core.codes) do
    RC[name] = rc
end


--- "nonode (ZNONODE -101): detail", or our own code with its meaning.
local function describe(err, detail)
    local s = tostring(err)
    local rc = RC[err]
    if rc and rc ~= 0 then
        s = s .. " (Z" .. s:upper() .. " " .. rc .. ")"
    elseif zkcoord.errors.own[err] then
        s = s .. " (" .. zkcoord.errors.own[err] .. ")"
    end
    if detail ~= nil and detail ~= "" then
        s = s .. ": " .. tostring(detail)
    end
    return s
end
_M.describe = describe


local function fail(what, err, detail)
    exit(EX_FAIL, what .. ": " .. describe(err, detail))
end


local function note(msg)
    io.stderr:write("zkcoord: ", msg, "\n")
    io.stderr:flush()
end

-- ---------------------------------------------------------------------------
-- Options

-- spec: option name -> "flag" | "number" | "string" (long: "--x", short: "-x").
-- Parses options up to the first operand (or "--"); returns opts, index of the
-- first operand. --help anywhere among the options asks for help.
local function parse_opts(verb, args, i, spec)
    local o = {}
    while i <= #args do
        local a = args[i]
        if a == "--" then
            return o, i + 1, true
        elseif a == "--help" or a == "-h" then
            io.stdout:write(HELP[verb] or USAGE)
            exit(EX_OK)
        elseif a:sub(1, 2) == "--" then
            local name, value = a:match("^%-%-([^=]+)=(.*)$")
            name = name or a:sub(3)
            local kind = spec["--" .. name]
            if not kind then
                usage(verb, "zkcoord: unknown option --" .. name)
            end
            local key = name:gsub("%-", "_")
            if kind == "flag" then
                if value then usage(verb, "zkcoord: --" .. name .. " takes no value") end
                o[key] = true
            else
                if not value then
                    i = i + 1
                    value = args[i]
                    if value == nil then
                        usage(verb, "zkcoord: --" .. name .. " needs a value")
                    end
                end
                if kind == "number" then
                    local n = tonumber(value)
                    if not n or n ~= n or n < 0 or n == math.huge then
                        usage(verb, "zkcoord: --" .. name .. " needs a number of seconds >= 0, got '"
                                    .. value .. "'")
                    end
                    value = n
                end
                o[key] = value
            end
        elseif a:match("^%-%a+$") then
            for ch in a:sub(2):gmatch(".") do
                local kind = spec["-" .. ch]
                if kind ~= "flag" then
                    usage(verb, "zkcoord: unknown option -" .. ch)
                end
                o[ch] = true
            end
        else
            return o, i, false
        end
        i = i + 1
    end
    return o, i, false
end


local function check_path(verb, path)
    if type(path) ~= "string" or path:sub(1, 1) ~= "/" or (path ~= "/" and path:sub(-1) == "/")
            or path:find("//", 1, true) or path:find("%z") then
        usage(verb, "zkcoord: " .. verb .. ": PATH must be an absolute ZooKeeper path, got "
                    .. (path and ("'" .. path .. "'") or "none"))
    end
    return path
end


-- Exactly the operands a verb takes (after its options).
local function operands(verb, args, i, min, max)
    local n = #args - i + 1
    if n < min or n > max then
        usage(verb, ("zkcoord: %s takes %s operand%s, got %d"):format(verb,
              min == max and tostring(min) or (min .. " to " .. max), max == 1 and "" or "s", n))
    end
    local out = {}
    for k = i, #args do out[#out + 1] = args[k] end
    return out
end

-- ---------------------------------------------------------------------------
-- The session

local clients = {}     -- closed by main() whatever happens

-- held: for lock and elect. libzookeeper notices a silent connection after
-- 2/3 of the session timeout; counting the session lost 1/4 of it later
-- (the library's lost_after; by default a whole timeout later) sends CMD its
-- SIGTERM a little before the server can expire the session and grant the
-- lock to someone else.
local function connect(g, held)
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
    if opts.session_timeout <= 0 or opts.connect_timeout <= 0 then
        usage(nil, "zkcoord: --session-timeout and --connect-timeout must be > 0")
    end
    local ok, c, err, detail = pcall(zkcoord.connect, opts)
    if not ok then
        usage(nil, "zkcoord: " .. tostring(c):gsub("^.-: ", ""))
    end
    if not c then
        -- systemerror: libzookeeper could not resolve or open any address
        if err == "timeout" or err == "connectionloss" or err == "systemerror" then
            exit(EX_UNAVAILABLE, "cannot reach ZooKeeper at " .. g.servers .. ": "
                                 .. describe(err, detail))
        end
        exit(EX_FAIL, "connecting to " .. g.servers .. ": " .. describe(err, detail))
    end
    clients[#clients + 1] = c
    return c
end


local function fmt_number(x)
    if type(x) == "cdata" then
        return (tostring(x):gsub("U?LL$", ""))
    end
    return ("%.0f"):format(x)
end


local function utc(t)
    return os.date("!%Y-%m-%dT%H:%M:%S", math.floor(t)) .. ("%.3fZ"):format(t % 1):sub(2)
end


local function join(path, name)
    return (path == "/" and "" or path) .. "/" .. name
end

-- ---------------------------------------------------------------------------
-- lock and elect

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


-- The lock's line: one queue (zkcoord.queue) of ephemeral-sequential nodes
-- for both sides. The exclusive side is client:lock()'s node
-- (_c_<uuid>-lock-<seq>, Curator's InterProcessMutex), through when first
-- in line; the shared side is the read-write lock's read node
-- (_c_<uuid>-__READ__<seq>, Curator's InterProcessReadWriteLock), through
-- when no exclusive node (lock- or __WRIT__) is below it. So `lock` and
-- `lock --shared` on one PATH exclude each other, and each also honours
-- the library's (and Curator's) lock or rwlock nodes on that PATH.
local LINE_MARKERS = { "downgrade-__READ__", "__READ__", "__WRIT__", "lock-" }
local EXCLUSIVE = { ["__WRIT__"] = true, ["lock-"] = true }

local function shared_rule(entries, me)
    for k = me - 1, 1, -1 do
        if EXCLUSIVE[entries[k].marker] then
            return entries[k]      -- the last exclusive node below us
        end
    end
    return true
end


local function line_position(c, path, shared, data)
    return queue.new(c, path, { marker = shared and "__READ__" or "lock-",
                                markers = LINE_MARKERS,
                                rule = shared and shared_rule or queue.rule_first,
                                data = data })
end


-- Election: our node is the first latch node, owned by our session.
local function leader_node(c, path)
    local q = queue.new(c, path, { marker = "latch-", rule = queue.rule_first })
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


local function run_held(g, verb, o, path, cmd)
    local grace = o.grace or 10
    -- Before the client starts its threads: they inherit the blocked mask.
    local sigfd, serr = sys.block_signals()
    if not sigfd then
        exit(EX_OSERR, serr)
    end
    local user_fds = sys.open_fds()
    local c = connect(g, true)
    local lost
    local done, ok, err, detail = false, nil, nil, nil
    local lk, e
    if verb == "lock" then
        lk = line_position(c, path, o.shared, o.data or default_id())
        lk:on_lost(function(reason) lost = lost or reason end)
        c:spawn(function()
            ok, err, detail = lk:enter(o.timeout)
            done = true
        end)
    else
        e = c:election(path, { id = o.id or default_id() })
        e:on_revoked(function(reason)
            if reason ~= "resigned" then lost = lost or reason end
        end)
        c:spawn(function()
            ok, err, detail = e:campaign(o.timeout)
            done = true
        end)
    end
    local what = verb == "lock" and ((o.shared and "read lock " or "lock ") .. path)
                 or ("leadership of " .. path)

    local sig = drive_until(c, sigfd, function() return done end)
    if sig then
        c:close()     -- our node, if any, goes with the session at once
        note(("%s while waiting for the %s"):format(sys.SIGNAME[sig] or ("signal " .. sig), what))
        return 128 + sig
    end
    if not ok then
        c:close()
        if err == "timeout" then
            note(("%s not acquired within %gs"):format(what, o.timeout or 0))
            return EX_TEMPFAIL
        end
        exit(EX_FAIL, verb .. " " .. path .. ": " .. describe(err, detail))
    end

    local node, token
    if lk then
        node, token = lk:node(), lk:is_through() and lk:stat() and lk:stat().czxid
    else
        node, token = leader_node(c, path)
    end
    if lost or not node or not token then
        c:close()
        note(("%s lost (%s) before the command started"):format(what, lost or tostring(token)))
        return EX_OSERR
    end

    -- A signal that came with the grant: stop here rather than start CMD.
    for _, s in ipairs(sys.read_signals(sigfd)) do
        if s.signo ~= SIG.CHLD then
            c:close()
            note(("%s just after the %s was granted: the command was not started")
                 :format(sys.SIGNAME[s.signo] or ("signal " .. s.signo), what))
            return 128 + s.signo
        end
    end

    sys.cloexec_all_but(user_fds)
    io.stdout:flush()
    io.stderr:flush()
    local pid, perr, pstatus = sys.spawn(cmd, { ZKCOORD_FENCING_TOKEN = fmt_number(token),
                                                ZKCOORD_LOCK_NODE = node })
    if not pid then
        if lk then lk:leave() else e:resign() end
        c:close()
        note(perr)
        return pstatus
    end

    local status
    local fd = c:fd()
    local term_at, killed
    while true do
        status = sys.reap(pid)
        if status then break end
        if lost and not term_at then
            note(("%s lost (%s) while the command ran: SIGTERM to %d"):format(what, lost, pid))
            sys.kill(pid, SIG.TERM)
            term_at = sys.now()
        end
        if term_at and not killed and sys.now() - term_at >= grace then
            note(("command %d still running %gs after SIGTERM: SIGKILL"):format(pid, grace))
            sys.kill(pid, SIG.KILL)
            killed = true
        end
        sys.poll(sigfd, fd, 0.1)
        c:process()
        for _, s in ipairs(sys.read_signals(sigfd)) do
            -- A terminal's Ctrl-C reached the whole foreground process group,
            -- CMD included: do not send it twice.
            if s.signo ~= SIG.CHLD and not (s.signo == SIG.INT and s.kernel) then
                sys.kill(pid, s.signo)
            end
        end
    end
    if lk then
        lk:leave()
    else
        e:resign()
    end
    c:close()
    if lost then
        return EX_OSERR
    end
    return status
end


local function verb_held(g, verb, args, i)
    local spec = verb == "lock"
        and { ["--timeout"] = "number", ["--shared"] = "flag", ["--data"] = "string",
              ["--grace"] = "number" }
        or { ["--id"] = "string", ["--timeout"] = "number", ["--grace"] = "number" }
    local o
    o, i = parse_opts(verb, args, i, spec)
    local path = check_path(verb, args[i])
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

-- ---------------------------------------------------------------------------
-- locks

local KINDS = {   -- most specific first
    { "__READ__(%d+)$", "read" },
    { "__WRIT__(%d+)$", "write" },
    { "__rlock__(%d+)$", "read" },
    { "__lock__(%d+)$", "lock" },
    { "lock%-(%d+)$", "lock" },
    { "latch%-(%d+)$", "leader" },
}


local function classify(name)
    for _, k in ipairs(KINDS) do
        local seq = name:match(k[1])
        if seq then
            return k[2], tonumber(seq)
        end
    end
end
_M.classify = classify


local function printable(s)
    return (s:gsub("[%c\\]", function(ch)
        if ch == "\\" then return "\\\\" end
        return ("\\x%02x"):format(ch:byte())
    end))
end


local function verb_locks(c, path)
    local names, err, detail = c:children(path)
    if not names then
        fail("locks " .. path, err, detail)
    end
    local entries = {}
    for _, name in ipairs(names) do
        local kind, seq = classify(name)
        if kind then
            entries[#entries + 1] = { name = name, kind = kind, seq = seq }
        end
    end
    table.sort(entries, function(a, b) return a.seq < b.seq end)
    local futures = {}
    for k, en in ipairs(entries) do
        futures[k] = c:send("get", join(path, en.name))
    end
    local now = sys.walltime()
    local exclusive_seen, first = false, true
    for k, en in ipairs(entries) do
        local data, st = futures[k]:wait()
        if data then        -- else gone meanwhile
            local holder
            if en.kind == "read" then
                holder = not exclusive_seen
            else
                holder = first
                exclusive_seen = true
            end
            first = false
            io.stdout:write(table.concat({
                holder and "holder" or "waiter", en.kind, en.name, printable(data),
                st.ephemeral_owner and ("0x" .. st.ephemeral_owner) or "-",
                ("%.1fs"):format(math.max(0, now - st.ctime)),
            }, "\t"), "\n")
        end
    end
    return EX_OK
end

-- ---------------------------------------------------------------------------
-- Plain verbs

local function delete_tree(c, path)
    local names, err, detail = c:children(path)
    if not names then
        if err == "nonode" then return true end
        return nil, err, detail
    end
    for _, n in ipairs(names) do
        local ok, e2, d2 = delete_tree(c, join(path, n))
        if not ok then return nil, e2, d2 end
    end
    if path == "/" then
        return true
    end
    local ok, derr, ddetail = c:delete(path)
    if not ok and derr ~= "nonode" then
        return nil, derr, ddetail
    end
    return true
end


local STAT_FIELDS = { "czxid", "mzxid", "pzxid", "ctime", "mtime", "version", "cversion",
                      "aversion", "data_length", "num_children", "ephemeral_owner" }


local function verb_plain(g, verb, args, i)
    local o
    if verb == "create" then
        o, i = parse_opts(verb, args, i, { ["-e"] = "flag", ["-s"] = "flag", ["-p"] = "flag" })
    elseif verb == "rm" then
        o, i = parse_opts(verb, args, i, { ["-r"] = "flag" })
    elseif verb == "ls" then
        o, i = parse_opts(verb, args, i, { ["-l"] = "flag" })
    elseif verb == "watch" then
        o, i = parse_opts(verb, args, i, { ["--children"] = "flag" })
    else
        o, i = parse_opts(verb, args, i, {})
    end
    local ops
    if verb == "set" then
        ops = operands(verb, args, i, 2, 2)
    elseif verb == "create" then
        ops = operands(verb, args, i, 1, 2)
    elseif verb == "counter" then
        ops = operands(verb, args, i, 1, 3)
        if #ops == 2 or (#ops == 3 and ((ops[2] ~= "add" and ops[2] ~= "set")
                                         or not tostring(ops[3]):match("^[+-]?%d+$"))) then
            usage(verb, "zkcoord: counter PATH [add N | set N], N an integer")
        end
    else
        ops = operands(verb, args, i, 1, 1)
    end
    local path = check_path(verb, ops[1])
    if verb == "rm" and path == "/" then
        usage(verb, "zkcoord: rm: refusing to remove /")
    end
    local what = verb .. " " .. path
    local out = io.stdout

    local sigfd
    if verb == "watch" then
        sigfd = assert(sys.block_signals())
    end
    local c = connect(g)

    if verb == "get" then
        local data, err, detail = c:get(path)
        if not data then fail(what, err, detail) end
        out:write(data, "\n")
    elseif verb == "set" then
        local st, err, detail = c:set(path, ops[2])
        if not st then fail(what, err, detail) end
    elseif verb == "create" then
        local p, err, detail = c:create(path, ops[2], { ephemeral = o.e, sequential = o.s,
                                                        parents = o.p })
        if not p then fail(what, err, detail) end
        out:write(p, "\n")
    elseif verb == "rm" then
        if o.r then
            local st, err, detail = c:exists(path)
            if st == false then err = "nonode" end
            if not st then fail(what, err, detail) end
            local ok
            ok, err, detail = delete_tree(c, path)
            if not ok then fail(what, err, detail) end
        else
            local ok, err, detail = c:delete(path)
            if not ok then fail(what, err, detail) end
        end
    elseif verb == "ls" then
        local names, err, detail = c:children(path)
        if not names then fail(what, err, detail) end
        table.sort(names)
        if o.l then
            local fs = {}
            for k, n in ipairs(names) do fs[k] = c:send("exists", join(path, n)) end
            for k, n in ipairs(names) do
                local st = fs[k]:wait()
                if st then
                    out:write(table.concat({ n, st.data_length, st.num_children,
                        st.ephemeral_owner and ("0x" .. st.ephemeral_owner) or "-",
                        utc(st.mtime) }, "\t"), "\n")
                end
            end
        else
            for _, n in ipairs(names) do out:write(n, "\n") end
        end
    elseif verb == "stat" then
        local st, err, detail = c:exists(path)
        if st == nil then fail(what, err, detail) end
        if st == false then fail(what, "nonode") end
        for _, k in ipairs(STAT_FIELDS) do
            local v = st[k]
            if k == "ctime" or k == "mtime" then
                v = utc(v)
            elseif k == "ephemeral_owner" then
                v = v and ("0x" .. v) or "-"
            elseif type(v) == "number" or type(v) == "cdata" then
                v = fmt_number(v)
            end
            out:write(k, "\t", tostring(v), "\n")
        end
    elseif verb == "tree" then
        local st, err, detail = c:exists(path)
        if st == nil then fail(what, err, detail) end
        if st == false then fail(what, "nonode") end
        local function walk(p)
            out:write(p, "\n")
            local names, werr, wdetail = c:children(p)
            if not names then
                if werr == "nonode" then return end     -- deleted meanwhile
                fail(what, werr, wdetail)
            end
            table.sort(names)
            for _, n in ipairs(names) do walk(join(p, n)) end
        end
        walk(path)
    elseif verb == "counter" then
        local ctr = c:counter(path)
        local v, err, detail
        if ops[2] == "add" then
            v, err, detail = ctr:add(tonumber(ops[3]))
        elseif ops[2] == "set" then
            local ok
            ok, err, detail = ctr:set(tonumber(ops[3]))
            v = ok and tonumber(ops[3])
        else
            v, err, detail = ctr:get()
        end
        if v == nil then fail(what, err, detail) end
        out:write(fmt_number(v), "\n")
    elseif verb == "locks" then
        verb_locks(c, path)
    elseif verb == "watch" then
        local kind = o.children and "children" or "data"
        local w, err, detail = c:watch(path, function(value)
            if value == nil then
                note(path .. " does not exist (waiting for it)")
            elseif kind == "children" then
                out:write(table.concat(value, " "), "\n")
            else
                out:write(value, "\n")
            end
            out:flush()
        end, { kind = kind })
        if not w then fail(what, err, detail) end
        local fd = c:fd()
        local stop
        while not stop do
            sys.poll(sigfd, fd, 0.25)
            c:process()
            for _, s in ipairs(sys.read_signals(sigfd)) do
                if s.signo ~= SIG.CHLD then stop = true end
            end
        end
        w:cancel()
    end
    out:flush()
    c:close()
    return EX_OK
end

-- ---------------------------------------------------------------------------
-- main

local VERBS = { lock = verb_held, elect = verb_held }
for _, v in ipairs({ "locks", "get", "set", "create", "rm", "ls", "stat", "tree", "watch",
                     "counter" }) do
    VERBS[v] = verb_plain
end


local GLOBAL = { ["--servers"] = "string", ["--session-timeout"] = "number",
                 ["--connect-timeout"] = "number", ["--chroot"] = "string",
                 ["--auth"] = "string" }


local function run(args)
    local g, i = parse_opts(nil, args, 1, GLOBAL)
    local verb = args[i]
    if not verb then
        usage(nil, "zkcoord: no verb given")
    end
    if verb == "help" then
        local topic = args[i + 1]
        io.stdout:write(HELP[topic] or USAGE)
        return (topic == nil or HELP[topic]) and EX_OK or EX_USAGE
    end
    local fn = VERBS[verb]
    if not fn then
        usage(nil, "zkcoord: unknown verb '" .. verb .. "'")
    end
    if g.servers and not g.servers:find("%S") then
        usage(nil, "zkcoord: --servers needs host:port[,host:port...]")
    end
    g.servers = g.servers or os.getenv("ZKCOORD_SERVERS")
    if not g.servers or g.servers == "" then
        g.servers = "127.0.0.1:2181"
    end
    if g.chroot then
        check_path(verb, g.chroot)
    end
    return fn(g, verb, args, i + 1)
end


--- Runs the command with `args` (an array of strings); returns the exit
--- status. Messages go to stderr, results to stdout.
function _M.main(args)
    local ok, res = xpcall(run, function(e)
        if getmetatable(e) == Exit then
            return e
        end
        return debug.traceback(tostring(e), 2)
    end, args)
    for k, c in ipairs(clients) do
        c:close()
        clients[k] = nil
    end
    if ok then
        io.stdout:flush()
        return res or EX_OK
    end
    if getmetatable(res) == Exit then
        if res.msg then
            io.stderr:write(res.code == EX_USAGE and "" or "zkcoord: ", res.msg,
                            res.msg:sub(-1) == "\n" and "" or "\n")
        end
        io.stdout:flush()
        return res.code
    end
    io.stderr:write("zkcoord: internal error: ", tostring(res), "\n")
    return EX_SOFTWARE
end


return _M
