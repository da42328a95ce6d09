-- Process, time and loopback-socket utilities for the test helpers.
-- LuaJIT FFI over glibc on Linux (x86_64/aarch64 constants); no luasocket,
-- no luaposix. Runtime failures return nil, err; bad arguments raise.

local ffi = require("ffi")
local bit = require("bit")

local C = ffi.C

local _M = {}

-- Every C name is declared under a zkh_ alias (__asm__ picks the real
-- symbol) so these cdefs never clash with the library's own declarations
-- in the same busted process. Guarded: this file may be loaded under two
-- module names ("helpers.proc", "spec.helpers.proc"), and LuaJIT refuses to
-- redefine a struct.
if not pcall(ffi.typeof, "struct zkh_timespec") then
    ffi.cdef[[
    struct zkh_timespec { long tv_sec; long tv_nsec; };
    struct zkh_sockaddr_in {
        uint16_t sin_family; uint16_t sin_port; uint32_t sin_addr;
        uint8_t sin_zero[8];
    };
    struct zkh_pollfd { int fd; short events; short revents; };
    struct zkh_linger { int l_onoff; int l_linger; };
    struct zkh_statx_ts { int64_t tv_sec; uint32_t tv_nsec; int32_t pad; };
    struct zkh_statx {
        uint32_t mask; uint32_t blksize; uint64_t attributes;
        uint32_t nlink; uint32_t uid; uint32_t gid;
        uint16_t mode; uint16_t spare0;
        uint64_t ino; uint64_t size; uint64_t blocks; uint64_t attributes_mask;
        struct zkh_statx_ts atime, btime, ctime, mtime;
        uint32_t rdev_major, rdev_minor, dev_major, dev_minor;
        uint64_t spare2[14];
    };
    int zkh_clock_gettime(int, struct zkh_timespec *) __asm__("clock_gettime");
    int zkh_nanosleep(const struct zkh_timespec *, struct zkh_timespec *)
        __asm__("nanosleep");
    int zkh_getpid(void) __asm__("getpid");
    int zkh_kill(int, int) __asm__("kill");
    int zkh_waitpid(int, int *, int) __asm__("waitpid");
    int zkh_socket(int, int, int) __asm__("socket");
    int zkh_bind(int, const void *, uint32_t) __asm__("bind");
    int zkh_listen(int, int) __asm__("listen");
    int zkh_accept4(int, void *, uint32_t *, int) __asm__("accept4");
    int zkh_connect(int, const void *, uint32_t) __asm__("connect");
    int zkh_getsockname(int, void *, uint32_t *) __asm__("getsockname");
    int zkh_getsockopt(int, int, int, void *, uint32_t *) __asm__("getsockopt");
    int zkh_setsockopt(int, int, int, const void *, uint32_t)
        __asm__("setsockopt");
    int zkh_shutdown(int, int) __asm__("shutdown");
    int zkh_close(int) __asm__("close");
    long zkh_send(int, const void *, size_t, int) __asm__("send");
    long zkh_recv(int, void *, size_t, int) __asm__("recv");
    int zkh_poll(struct zkh_pollfd *, unsigned long, int) __asm__("poll");
    int zkh_inet_pton(int, const char *, void *) __asm__("inet_pton");
    const char *zkh_strerror(int) __asm__("strerror");
    char *zkh_mkdtemp(char *) __asm__("mkdtemp");
    int zkh_statx(int, const char *, int, unsigned int, struct zkh_statx *)
        __asm__("statx");
    uint16_t zkh_htons(uint16_t) __asm__("htons");
    uint16_t zkh_ntohs(uint16_t) __asm__("ntohs");
    int zkh_open(const char *, int, ...) __asm__("open");
    int zkh_flock(int, int) __asm__("flock");
    struct zkh_mallinfo2 {
        size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks,
            uordblks, fordblks, keepcost;
    };
    struct zkh_mallinfo2 zkh_mallinfo2(void) __asm__("mallinfo2");
    ]]
end

-- Linux values (identical on x86_64 and aarch64).
local S = {
    AF_INET = 2, SOCK_STREAM = 1,
    SOCK_NONBLOCK = 0x800, SOCK_CLOEXEC = 0x80000,
    SOL_SOCKET = 1, SO_REUSEADDR = 2, SO_ERROR = 4, SO_LINGER = 13,
    MSG_NOSIGNAL = 0x4000, MSG_DONTWAIT = 0x40,
    SHUT_WR = 1,
    POLLIN = 0x1, POLLOUT = 0x4, POLLERR = 0x8, POLLHUP = 0x10,
    POLLNVAL = 0x20,
    EPERM = 1, EACCES = 13, ESRCH = 3, EINTR = 4, EAGAIN = 11, ECHILD = 10,
    EINPROGRESS = 115,
    CLOCK_MONOTONIC = 1, WNOHANG = 1,
    AT_FDCWD = -100, STATX_BASIC = 0x7ff,
    O_RDONLY = 0, O_CREAT = 0x40, O_CLOEXEC = 0x80000,
    LOCK_EX = 2, LOCK_NB = 4,
}

local SIGNALS = {
    HUP = 1, INT = 2, QUIT = 3, KILL = 9, USR1 = 10, USR2 = 12, TERM = 15,
    CONT = 18, STOP = 19,
}


local function errstr(e)
    return ffi.string(C.zkh_strerror(e or ffi.errno()))
end

-- Time -----------------------------------------------------------------------

local ts = ffi.new("struct zkh_timespec")


function _M.now()
    C.zkh_clock_gettime(S.CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end


function _M.sleep(seconds)
    assert(type(seconds) == "number" and seconds >= 0,
        "sleep: seconds must be a number >= 0")
    local req = ffi.new("struct zkh_timespec")
    local rem = ffi.new("struct zkh_timespec")
    req.tv_sec = math.floor(seconds)
    req.tv_nsec = math.floor((seconds - math.floor(seconds)) * 1e9)
    -- Resume after signals (SIGCHLD from popen'd shells) with the remainder.
    while C.zkh_nanosleep(req, rem) ~= 0 do
        if ffi.errno() ~= S.EINTR then
            return nil, errstr()
        end
        req.tv_sec, req.tv_nsec = rem.tv_sec, rem.tv_nsec
    end
    return true
end


function _M.getpid()
    return C.zkh_getpid()
end

-- Shell quoting and processes -----------------------------------------------


local function shquote(s)
    s = tostring(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end
_M.shquote = shquote


-- os.execute returns 0 (Lua 5.1) or true (5.2 compat) on success.
local function execute_ok(cmd)
    local r = os.execute(cmd)
    return r == 0 or r == true
end


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


function _M.kill(pid, sig)
    check_pid(pid, "kill")
    sig = sig or "TERM"
    local signo = type(sig) == "number" and sig
        or SIGNALS[tostring(sig):upper():gsub("^SIG", "")]
    if not signo then
        error("kill: unknown signal " .. tostring(sig), 2)
    end
    if C.zkh_kill(pid, signo) ~= 0 then
        return nil, errstr()
    end
    return true
end


-- One-letter state from /proc/<pid>/stat ("R", "S", "T", "Z", ...).
function _M.state(pid)
    check_pid(pid, "state")
    local f = io.open("/proc/" .. pid .. "/stat", "r")
    if not f then
        return nil, "no such process"
    end
    local line = f:read("*l") or ""
    f:close()
    -- comm may contain spaces and parens: the state follows the last ')'.
    return line:match("^.*%) (%a)")
end


-- True when every thread of pid is stopped (SIGSTOP has taken: kill()
-- returns before each thread of a busy process has stopped).
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


function _M.alive(pid)
    check_pid(pid, "alive")
    -- Reap it if it happens to be our own child (no-op otherwise).
    C.zkh_waitpid(pid, nil, S.WNOHANG)
    if C.zkh_kill(pid, 0) ~= 0 and ffi.errno() ~= S.EPERM then
        return false
    end
    -- A zombie still answers kill 0 but is gone for our purposes.
    local st = _M.state(pid)
    return st ~= nil and st ~= "Z" and st ~= "X"
end


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

-- Temp dirs ------------------------------------------------------------------


function _M.mktemp_dir(prefix)
    prefix = prefix or "zkcoord-"
    assert(type(prefix) == "string" and not prefix:find("/"),
        "mktemp_dir: prefix must be a string without '/'")
    local tmpl = "/tmp/" .. prefix .. "XXXXXX"
    local buf = ffi.new("char[?]", #tmpl + 1)
    ffi.copy(buf, tmpl)
    if C.zkh_mkdtemp(buf) == nil then
        return nil, "mkdtemp " .. tmpl .. ": " .. errstr()
    end
    return ffi.string(buf)
end


function _M.rm_rf(dir)
    if type(dir) ~= "string" or not dir:match("^/tmp/[^/]") or dir:find("%.%.")
            or dir:find("[%c]") then
        error("rm_rf: refusing to remove " .. tostring(dir)
            .. " (only paths under /tmp/)", 2)
    end
    if not execute_ok("rm -rf -- " .. shquote(dir)) then
        return nil, "rm -rf " .. dir .. " failed"
    end
    return true
end

-- File helpers used by zkserver and tcpproxy.


function _M.mkdir_p(path)
    assert(type(path) == "string" and path ~= "", "mkdir_p: path must be a string")
    if not execute_ok("mkdir -p -- " .. shquote(path)) then
        return nil, "mkdir -p " .. path .. " failed"
    end
    return true
end


function _M.write_file(path, text)
    local f, err = io.open(path, "w")
    if not f then
        return nil, err
    end
    local ok, werr = f:write(text)
    f:close()
    if not ok then
        return nil, werr
    end
    return true
end


-- Write then rename, so readers never see a half-written file.
function _M.write_file_atomic(path, text)
    local tmp = path .. ".tmp" .. _M.getpid()
    local ok, err = _M.write_file(tmp, text)
    if not ok then
        return nil, err
    end
    local rok, rerr = os.rename(tmp, path)
    if not rok then
        os.remove(tmp)
        return nil, rerr
    end
    return true
end


--- Resident set size of this process in KiB.
function _M.rss_kb()
    local f = io.open("/proc/self/status")
    local text = f and f:read("*a") or ""
    if f then f:close() end
    return tonumber(text:match("VmRSS:%s*(%d+)")) or 0
end


-- Bytes malloc() has handed out and not had back, in KiB, over every
-- arena (glibc's mallinfo2: the C core's and libzookeeper's memory; the
-- LuaJIT heap has its own allocator). Unlike RSS it does not move with
-- page faults, arena trimming or the JIT under load.
function _M.malloc_kb()
    return tonumber(C.zkh_mallinfo2().uordblks) / 1024
end


function _M.file_exists(path)
    local f = io.open(path, "r")
    if f then
        f:close()
        return true
    end
    return false
end


function _M.read_file(path)
    local f, err = io.open(path, "r")
    if not f then
        return nil, err
    end
    local text = f:read("*a")
    f:close()
    return text
end

-- Identity of a file's current version: changes on every write or replace.
-- nil when the file does not exist.
local stx = ffi.new("struct zkh_statx")
function _M.file_version(path)
    if C.zkh_statx(S.AT_FDCWD, path, 0, S.STATX_BASIC, stx) ~= 0 then
        return nil, errstr()
    end
    return string.format("%d.%d/%d/%d", tonumber(stx.mtime.tv_sec),
        tonumber(stx.mtime.tv_nsec), tonumber(stx.ino), tonumber(stx.size))
end

-- Sockets --------------------------------------------------------------------


local function sockaddr(host, port)
    if host == "localhost" then
        host = "127.0.0.1"
    end
    assert(type(host) == "string", "host must be an IPv4 address string")
    assert(type(port) == "number" and port >= 0 and port < 65536,
        "port must be a number in 0..65535")
    local sa = ffi.new("struct zkh_sockaddr_in")
    sa.sin_family = S.AF_INET
    sa.sin_port = C.zkh_htons(port)
    if C.zkh_inet_pton(S.AF_INET, host, ffi.cast("void *", ffi.cast(
            "uint8_t *", sa) + 4)) ~= 1 then
        error("not an IPv4 address: " .. host, 3)
    end
    return sa
end


local function new_socket()
    local fd = C.zkh_socket(S.AF_INET,
        bit.bor(S.SOCK_STREAM, S.SOCK_NONBLOCK, S.SOCK_CLOEXEC), 0)
    if fd < 0 then
        return nil, "socket: " .. errstr()
    end
    return fd
end


local function local_port(fd)
    local sa = ffi.new("struct zkh_sockaddr_in")
    local len = ffi.new("uint32_t[1]", ffi.sizeof(sa))
    if C.zkh_getsockname(fd, sa, len) ~= 0 then
        return nil, "getsockname: " .. errstr()
    end
    return C.zkh_ntohs(sa.sin_port)
end

-- poll() one fd for `events`; returns revents, 0 on timeout, or nil, err.
local pfd1 = ffi.new("struct zkh_pollfd[1]")
local function poll1(fd, events, timeout)
    pfd1[0].fd, pfd1[0].events, pfd1[0].revents = fd, events, 0
    local ms = math.max(0, math.floor(timeout * 1000 + 0.5))
    local n = C.zkh_poll(pfd1, 1, ms)
    if n < 0 then
        if ffi.errno() == S.EINTR then
            return 0
        end
        return nil, "poll: " .. errstr()
    end
    return n == 0 and 0 or pfd1[0].revents
end


-- A listening socket (non-blocking, SO_REUSEADDR). Port 0 picks a free one.
function _M.tcp_listen(host, port, backlog)
    local sa = sockaddr(host or "127.0.0.1", port or 0)
    local fd, err = new_socket()
    if not fd then
        return nil, err
    end
    local one = ffi.new("int[1]", 1)
    C.zkh_setsockopt(fd, S.SOL_SOCKET, S.SO_REUSEADDR, one, 4)
    if C.zkh_bind(fd, sa, ffi.sizeof(sa)) ~= 0 then
        err = errstr()
        C.zkh_close(fd)
        return nil, "bind " .. tostring(host) .. ":" .. tostring(port) .. ": "
            .. err
    end
    if C.zkh_listen(fd, backlog or 128) ~= 0 then
        err = errstr()
        C.zkh_close(fd)
        return nil, "listen: " .. err
    end
    return fd, local_port(fd)
end


-- Ports for servers. bind(0) would hand a port out of the kernel's
-- ephemeral range, where another process's bind(0) or outgoing connection
-- can take it before our server binds it. Instead: a port below that range
-- (the kernel never picks those by itself), claimed with an flock on
-- PORT_DIR/<port> held by this process until it exits (the kernel drops
-- it then, even on a crash), so parallel busted runs never share a port.
-- Free ports are checked by binding them; the lock files stay.
local PORT_DIR = "/tmp/zkcoord-ports"
local PORT_MIN = 10000
local claimed = {}          -- port -> fd holding its lock

local function port_range()
    local f = io.open("/proc/sys/net/ipv4/ip_local_port_range", "r")
    local low = f and tonumber((f:read("*l") or ""):match("^(%d+)"))
    if f then
        f:close()
    end
    return PORT_MIN, (low or 32768) - 1
end

local function claim(port)
    local fd = C.zkh_open(PORT_DIR .. "/" .. port,
        bit.bor(S.O_RDONLY, S.O_CREAT, S.O_CLOEXEC), ffi.new("int", 420))
    if fd < 0 then
        local e = ffi.errno()
        if e == S.EACCES then
            return false    -- another user's file, unreadable under its umask
        end
        return nil, "open " .. PORT_DIR .. "/" .. port .. ": " .. errstr(e)
    end
    if C.zkh_flock(fd, bit.bor(S.LOCK_EX, S.LOCK_NB)) ~= 0 then
        C.zkh_close(fd)
        return false
    end
    return fd
end

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
    for i = 0, n - 1 do
        local port = low + (start + i) % n
        if not claimed[port] then
            local fd, err = claim(port)
            if fd == nil then
                return nil, err
            end
            if fd then
                local sfd = _M.tcp_listen("127.0.0.1", port)
                if sfd then
                    C.zkh_close(sfd)
                    claimed[port] = fd
                    return port
                end
                C.zkh_close(fd)    -- bound by something else: not ours
            end
        end
    end
    return nil, "free_port: no free port in " .. low .. "-" .. high
end


-- Starts a non-blocking connect; returns fd (connect may be in progress).
function _M.tcp_connect_start(host, port)
    local sa = sockaddr(host, port)
    local fd, err = new_socket()
    if not fd then
        return nil, err
    end
    if C.zkh_connect(fd, sa, ffi.sizeof(sa)) ~= 0
            and ffi.errno() ~= S.EINPROGRESS then
        err = errstr()
        C.zkh_close(fd)
        return nil, "connect: " .. err
    end
    return fd
end


-- Pending error of a socket (0 when fine), e.g. after a non-blocking connect.
function _M.sock_error(fd)
    local v = ffi.new("int[1]")
    local len = ffi.new("uint32_t[1]", 4)
    if C.zkh_getsockopt(fd, S.SOL_SOCKET, S.SO_ERROR, v, len) ~= 0 then
        return ffi.errno()
    end
    return v[0]
end

local Conn = {}
Conn.__index = Conn

local RECV_SIZE = 65536
local recvbuf = ffi.new("uint8_t[?]", RECV_SIZE)


-- A blocking-style TCP client over a non-blocking socket: every call takes
-- a timeout in seconds.
function _M.tcp_connect(host, port, timeout)
    timeout = timeout or 5
    local fd, err = _M.tcp_connect_start(host, port)
    if not fd then
        return nil, err
    end
    local rev, perr = poll1(fd, S.POLLOUT, timeout)
    if not rev then
        C.zkh_close(fd)
        return nil, perr
    end
    if rev == 0 then
        C.zkh_close(fd)
        return nil, "timeout"
    end
    local e = _M.sock_error(fd)
    if e ~= 0 then
        C.zkh_close(fd)
        return nil, "connect: " .. errstr(e)
    end
    return setmetatable({ fd = fd }, Conn)
end


function Conn:send(data, timeout)
    assert(type(data) == "string", "send: data must be a string")
    if not self.fd then
        return nil, "closed"
    end
    local deadline = _M.now() + (timeout or 5)
    local pos = 0
    while pos < #data do
        local n = C.zkh_send(self.fd, ffi.cast("const char *", data) + pos,
            #data - pos, bit.bor(S.MSG_NOSIGNAL, S.MSG_DONTWAIT))
        if n > 0 then
            pos = pos + tonumber(n)
        else
            local e = ffi.errno()
            if e ~= S.EAGAIN and e ~= S.EINTR then
                return nil, errstr(e)
            end
            local left = deadline - _M.now()
            if left <= 0 then
                return nil, "timeout"
            end
            local rev, perr = poll1(self.fd, S.POLLOUT, left)
            if not rev then
                return nil, perr
            end
        end
    end
    return true
end


-- Reads up to `max` bytes once data is available: returns the bytes, or
-- nil, "closed" on EOF, nil, "timeout", or nil, err.
function Conn:recv_some(max, timeout)
    if not self.fd then
        return nil, "closed"
    end
    max = math.min(max or RECV_SIZE, RECV_SIZE)
    local deadline = _M.now() + (timeout or 5)
    while true do
        local n = C.zkh_recv(self.fd, recvbuf, max, S.MSG_DONTWAIT)
        if n > 0 then
            return ffi.string(recvbuf, n)
        elseif n == 0 then
            return nil, "closed"
        end
        local e = ffi.errno()
        if e ~= S.EAGAIN and e ~= S.EINTR then
            return nil, errstr(e)
        end
        local left = deadline - _M.now()
        if left <= 0 then
            return nil, "timeout"
        end
        local rev, perr = poll1(self.fd, S.POLLIN, left)
        if not rev then
            return nil, perr
        end
    end
end


-- Reads exactly n bytes; on failure returns nil, err, partial.
function Conn:recv(n, timeout)
    assert(type(n) == "number" and n >= 0, "recv: n must be a number >= 0")
    local deadline = _M.now() + (timeout or 5)
    local chunks, got = {}, 0
    while got < n do
        local s, err = self:recv_some(n - got, math.max(0, deadline - _M.now()))
        if not s then
            return nil, err, table.concat(chunks)
        end
        chunks[#chunks + 1] = s
        got = got + #s
    end
    return table.concat(chunks)
end


-- Reads until EOF; on failure returns nil, err, partial.
function Conn:recv_all(timeout)
    local deadline = _M.now() + (timeout or 5)
    local chunks = {}
    while true do
        local s, err = self:recv_some(RECV_SIZE,
            math.max(0, deadline - _M.now()))
        if not s then
            if err == "closed" then
                return table.concat(chunks)
            end
            return nil, err, table.concat(chunks)
        end
        chunks[#chunks + 1] = s
    end
end


function Conn:close()
    if self.fd then
        C.zkh_close(self.fd)
        self.fd = nil
    end
    return true
end


-- Sends `send_text`, then returns everything the server answers before it
-- closes (ZooKeeper four-letter words). nil, "timeout" if it stays silent.
function _M.tcp_probe(host, port, send_text, timeout)
    assert(type(send_text) == "string", "tcp_probe: send_text must be a string")
    timeout = timeout or 2
    local deadline = _M.now() + timeout
    local conn, err = _M.tcp_connect(host, port, timeout)
    if not conn then
        return nil, err
    end
    local ok, serr = conn:send(send_text, math.max(0, deadline - _M.now()))
    if not ok then
        conn:close()
        return nil, serr
    end
    local text, rerr, partial = conn:recv_all(math.max(0, deadline - _M.now()))
    conn:close()
    if not text then
        return nil, rerr, partial
    end
    return text
end

-- Low-level pieces for tcpproxy.lua (same process family, not a public API).
_M.sys = { C = C, S = S, errstr = errstr, poll1 = poll1 }

return _M
