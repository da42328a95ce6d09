--- zkcoord.testing.proc: the processes, loopback ports and four-letter
--- words zkcoord.testing needs to run ZooKeeper servers (and the files of
--- zkcoord.testing.files), on any Lua (5.1 to 5.4, LuaJIT): the core's
--- process calls and the shell (sh, bash for a TCP probe, coreutils),
--- Linux. Runtime failures return nil, err; bad arguments raise. The
--- project's spec helpers (spec/helpers/proc.lua) use these too.
local core = require "zkcoord.core"
local files = require "zkcoord.testing.files"

local P = core.process

local _M = {}

-- The files, temp dirs and /proc reads (zkcoord.testing.files) are here too.
for k, v in pairs(files) do
    _M[k] = v
end

-- Time -----------------------------------------------------------------------

--- Monotonic seconds.
_M.now = core.now

--- Sleeps `seconds` (a signal does not cut it short). Returns true.
function _M.sleep(seconds)
    assert(type(seconds) == "number" and seconds >= 0,
        "sleep: seconds must be a number >= 0")
    local deadline = core.now() + seconds
    repeat
        P.poll(deadline - core.now())
    until core.now() >= deadline
    return true
end


function _M.getpid()
    return P.getpid()
end

-- Shell quoting and processes -----------------------------------------------


local shquote, execute_ok = files.shquote, files.execute_ok


local function check_pid(pid, fname)
    -- kill(0|-1, ...) would hit our process group or everything we own.
    if type(pid) ~= "number" or pid ~= math.floor(pid) or pid <= 1 then
        error(fname .. ": pid must be an integer > 1, got " .. tostring(pid), 3)
    end
end

-- Runs `body` (a shell command list) in the background through sh. Without
-- an owner the forked subshell execs the program, so $! is its pid. With
-- an owner, a watchdog shell starts the program and SIGKILLs it once the
-- owner process is gone. The command travels in an environment variable so
-- that the long-lived watchdog's argv does not contain it (pgrep -f stays
-- truthful about what is running). A zombie owner counts as gone: under a
-- container init that does not reap, a dead owner stays a zombie forever.
local WATCHDOG = [[
o=$ZKH_WD_OWNER; d=$ZKH_WD_CLEAN; c=$ZKH_WD_CMD
unset ZKH_WD_OWNER ZKH_WD_CLEAN ZKH_WD_CMD
(eval "$c") &
p=$!
echo "P$p"
exec </dev/null >/dev/null 2>&1
owner_alive() {
    l=
    read -r l <"/proc/$o/stat" || return 1
    case $l in *") Z "*|*") X "*) return 1 ;; esac
}
while kill -0 "$p"; do
    if ! owner_alive; then
        kill -KILL "$p"
        wait "$p"
        case "$d" in /tmp/?*) rm -rf -- "$d" ;; esac
        exit 0
    fi
    sleep 1
done
]]


--- Starts `cmd` (an argv table, or a simple command line that is exec'd)
--- in the background. opts: stdout, stderr (files, appended; default
--- /dev/null), cwd, env (name -> value, added), owner (a pid, or true for
--- this process: a watchdog SIGKILLs the program once the owner is gone,
--- and removes cleanup_dir, a /tmp/ path). Returns pid and the watchdog's
--- pid (with an owner), or nil, err.
function _M.spawn(cmd, opts)
    opts = opts or {}
    assert(type(opts) == "table", "spawn: opts must be a table")
    local prog
    if type(cmd) == "table" then
        assert(#cmd > 0, "spawn: empty argv")
        local q = {}
        for i, a in ipairs(cmd) do
            q[i] = shquote(a)
        end
        prog = table.concat(q, " ")
    elseif type(cmd) == "string" and cmd:find("%S") then
        -- A simple command line: it is exec'd, so no ';', '&&' or pipes.
        prog = cmd
    else
        error("spawn: cmd must be an argv table or a command line string", 2)
    end

    local out = opts.stdout or "/dev/null"
    local err = opts.stderr or "/dev/null"
    -- The subshell first points its own stdio away from the popen pipe (so
    -- the pipe closes at once) and its stderr at the log, so that a failing
    -- cd or a missing program is reported there. Append: a restarted server
    -- keeps one log. Same file for both: share the fd.
    local parts = { "exec </dev/null >/dev/null 2>>" .. shquote(err) .. ";" }
    if opts.cwd then
        parts[#parts + 1] = "cd " .. shquote(opts.cwd) .. " || exit 127;"
    end
    for k, v in pairs(opts.env or {}) do
        assert(type(k) == "string" and k:match("^[%a_][%w_]*$"),
            "spawn: bad environment variable name " .. tostring(k))
        parts[#parts + 1] = "export " .. k .. "=" .. shquote(v) .. ";"
    end
    parts[#parts + 1] = "exec " .. prog .. " >>" .. shquote(out)
        .. (err == out and " 2>&1" or " 2>>" .. shquote(err))
    local body = table.concat(parts, " ")

    local script
    local owner = opts.owner
    if owner == true then
        owner = _M.getpid()
    end
    if owner then
        check_pid(owner, "spawn")
        local clean = opts.cleanup_dir or ""
        script = "ZKH_WD_CMD=" .. shquote(body)
            .. " ZKH_WD_OWNER=" .. owner
            .. " ZKH_WD_CLEAN=" .. shquote(clean)
            .. " sh -c " .. shquote(WATCHDOG) .. " </dev/null 2>/dev/null &"
            .. " echo \"W$!\""
    else
        script = "( " .. body .. " ) & echo \"P$!\""
    end

    local f, perr = io.popen(script, "r")
    if not f then
        return nil, "spawn: popen failed: " .. tostring(perr)
    end
    local text = f:read("*a") or ""
    f:close()
    local pid = tonumber(text:match("P(%d+)"))
    if not pid then
        return nil, "spawn: could not start: " .. text
    end
    return pid, tonumber(text:match("W(%d+)"))
end


--- Sends signal `sig` (a name: "TERM", "SIGKILL", ...; or a number;
--- default TERM) to process `pid`. true, or nil, err.
function _M.kill(pid, sig)
    check_pid(pid, "kill")
    sig = sig or "TERM"
    local signo = type(sig) == "number" and sig
        or P.SIG[tostring(sig):upper():gsub("^SIG", "")]
    if not signo then
        error("kill: unknown signal " .. tostring(sig), 2)
    end
    return P.kill(pid, signo)
end


--- True when every thread of pid is stopped (SIGSTOP has taken: kill()
--- returns before each thread of a busy process has stopped).
function _M.stopped(pid)
    check_pid(pid, "stopped")
    local ls = io.popen("ls /proc/" .. pid .. "/task 2>/dev/null")
    local tids = ls:read("*a")
    ls:close()
    local any = false
    for tid in tids:gmatch("%d+") do
        local f = io.open("/proc/" .. pid .. "/task/" .. tid .. "/stat", "r")
        if f then       -- a thread may exit meanwhile
            local st = (f:read("*l") or ""):match("^.*%) (%a)")
            f:close()
            if st ~= "T" and st ~= "t" then
                return false
            end
            any = true
        end
    end
    return any
end


--- Is process `pid` there (a zombie is not)?
function _M.alive(pid)
    check_pid(pid, "alive")
    -- Reap it if it happens to be our own child (no-op otherwise).
    pcall(P.wait, pid)
    local st = files.state(pid)
    return st ~= nil and st ~= "Z" and st ~= "X"
end


--- Waits up to `timeout` seconds (default 10) for `pid` to be gone.
--- true, or nil, "timeout".
function _M.wait_exit(pid, timeout)
    check_pid(pid, "wait_exit")
    timeout = timeout or 10
    local deadline = _M.now() + timeout
    while _M.alive(pid) do
        if _M.now() >= deadline then
            return nil, "timeout"
        end
        _M.sleep(0.02)
    end
    return true
end

-- Ports ----------------------------------------------------------------------

-- A free port is one no socket of this host uses (/proc/net/tcp, tcp6),
-- below the ephemeral range (where bind(0) and outgoing connections never
-- land), claimed for this process across processes and users: a directory
-- <port>.claim holding the owner's pid (mkdir is atomic; a claim whose
-- owner is gone is taken over). Older helpers held flock(1) on <port>:
-- a port locked that way is not free either.
local PORT_DIR = "/tmp/zkcoord-ports"
local PORT_MIN = 10000
local claimed = {}          -- port -> true, this process's claims

local function port_range()
    local f = io.open("/proc/sys/net/ipv4/ip_local_port_range", "r")
    local low = f and tonumber((f:read("*l") or ""):match("^(%d+)"))
    if f then
        f:close()
    end
    return PORT_MIN, (low or 32768) - 1
end

-- The local ports of every TCP socket of this host (this network namespace).
local function ports_in_use()
    local used = {}
    for _, file in ipairs({ "/proc/net/tcp", "/proc/net/tcp6" }) do
        local text = _M.read_file(file) or ""
        for hex in text:gmatch("\n%s*%d+: %x+:(%x+) ") do
            used[tonumber(hex, 16)] = true
        end
    end
    return used
end

local function claim(port)
    local dir = PORT_DIR .. "/" .. port .. ".claim"
    local owner = tonumber(_M.read_file(dir .. "/owner") or "")
    if owner and owner > 1 and _M.alive(owner) then
        return false
    end
    -- A stale claim (or one whose owner is still writing): take it over
    -- only once its owner file says the owner is gone.
    if owner then
        _M.rm_rf(dir)
    end
    local me = _M.getpid()
    local script = ("mkdir -m 755 %s 2>/dev/null && echo %d > %s/owner"
                    .. " && { command -v flock >/dev/null || exit 0;"
                    .. " flock -n -x %s true 2>/dev/null || { rm -rf %s; exit 1; }; }")
                   :format(shquote(dir), me, shquote(dir), shquote(PORT_DIR .. "/" .. port),
                           shquote(dir))
    return execute_ok(script)
end

--- A free loopback port, claimed for this process (never handed out
--- twice while it lives), or nil, err.
function _M.free_port()
    if not _M.file_exists(PORT_DIR) then
        -- Sticky and world-writable like /tmp: the rock smoke's user shares it.
        execute_ok("mkdir -p -m 1777 " .. PORT_DIR .. " 2>/dev/null")
    end
    local low, high = port_range()
    if high - low < 1000 then
        return nil, "free_port: no room below the ephemeral port range"
    end
    local n = high - low + 1
    local start = (_M.getpid() * 7919 + math.floor(_M.now() * 1000)) % n
    local used = ports_in_use()
    for i = 0, n - 1 do
        local port = low + (start + i) % n
        if not claimed[port] and not used[port] and claim(port) then
            claimed[port] = true
            return port
        end
    end
    return nil, "free_port: no free port in " .. low .. "-" .. high
end

-- A TCP probe ----------------------------------------------------------------

-- On LuaJIT the socket module's probe (in process: a probe costs no
-- process, which matters for a spec timing a proxy); elsewhere bash's
-- /dev/tcp under timeout(1): no socket library on every Lua.
local socket_probe = pcall(require, "ffi") and require("zkcoord.testing.socket").tcp_probe

--- Sends `send_text` to host:port and returns everything the server
--- answers before it closes (ZooKeeper's four-letter words), within
--- `timeout` seconds (default 2): nil, "timeout" when it stays silent,
--- nil, err naming "refused" when nobody listens, nil, err otherwise.
function _M.tcp_probe(host, port, send_text, timeout)
    assert(type(send_text) == "string", "tcp_probe: send_text must be a string")
    if socket_probe then
        return socket_probe(host, port, send_text, timeout)
    end
    assert(type(host) == "string" and host:match("^[%w%.%-:]+$"), "tcp_probe: bad host")
    port = assert(tonumber(port), "tcp_probe: port must be a number")
    timeout = timeout or 2
    local script = ("exec 3<>/dev/tcp/%s/%d || exit 3; printf '%%s' %s >&3 || exit 4; cat <&3")
                   :format(host, port, shquote(send_text))
    local f = io.popen(("timeout -s KILL %.3f bash -c %s 2>&1; printf '\\nrc=%%d\\n' $?")
                       :format(math.max(timeout, 0.01), shquote(script)))
    if not f then
        return nil, "popen failed"
    end
    local out = f:read("*a") or ""
    f:close()
    local text, rc = out:match("^(.*)\nrc=(%d+)\n?$")
    rc = tonumber(rc)
    if rc == 0 then
        return text
    elseif rc == 137 or rc == 124 then
        return nil, "timeout"
    elseif text and text:find("refused", 1, true) then
        return nil, "refused"
    end
    return nil, (text or out):gsub("%s+$", "")
end

return _M
