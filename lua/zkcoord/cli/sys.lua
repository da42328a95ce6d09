--- zkcoord.cli.sys: the few process and signal calls the zkcoord command
--- needs, over LuaJIT's FFI (Linux, glibc). Not a public API.
--
-- Signals: INT, TERM, HUP and CHLD are blocked (block_signals) before the
-- ZooKeeper client starts its threads, so every thread inherits the mask
-- and none of them can take a signal meant for us; we read them from a
-- signalfd instead, in our own loop.
-- Children: posix_spawnp (glibc: vfork-like clone + exec, safe in a
-- multithreaded process: no Lua code runs in the child) with an empty
-- signal mask and every signal's disposition back to default.
local ffi = require "ffi"
local bit = require "bit"

local C = ffi.C

local _M = {}

-- zkcli_ aliases (__asm__ picks the real symbol) so these declarations never
-- clash with another module's in the same process.
if not pcall(ffi.typeof, "struct zkcli_sigset") then
    ffi.cdef [[
    struct zkcli_sigset { unsigned long val[16]; };
    struct zkcli_spawnattr { uint64_t opaque[64]; };
    struct zkcli_siginfo {
        uint32_t signo; int32_t err; int32_t code; uint32_t pid; uint32_t uid;
        int32_t fd; uint32_t tid; uint32_t band; uint32_t overrun; uint32_t trapno;
        int32_t status; int32_t int_; uint64_t ptr; uint64_t utime; uint64_t stime;
        uint64_t addr; uint16_t addr_lsb; uint8_t pad[46];
    };
    struct zkcli_pollfd { int fd; short events; short revents; };
    struct zkcli_timespec { long tv_sec; long tv_nsec; };
    int zkcli_sigemptyset(struct zkcli_sigset *) __asm__("sigemptyset");
    int zkcli_sigfillset(struct zkcli_sigset *) __asm__("sigfillset");
    int zkcli_sigaddset(struct zkcli_sigset *, int) __asm__("sigaddset");
    int zkcli_sigprocmask(int, const struct zkcli_sigset *, struct zkcli_sigset *)
        __asm__("sigprocmask");
    int zkcli_signalfd(int, const struct zkcli_sigset *, int) __asm__("signalfd");
    long zkcli_read(int, void *, size_t) __asm__("read");
    int zkcli_close(int) __asm__("close");
    int zkcli_poll(struct zkcli_pollfd *, unsigned long, int) __asm__("poll");
    int zkcli_spawnattr_init(struct zkcli_spawnattr *) __asm__("posix_spawnattr_init");
    int zkcli_spawnattr_destroy(struct zkcli_spawnattr *) __asm__("posix_spawnattr_destroy");
    int zkcli_spawnattr_setflags(struct zkcli_spawnattr *, short)
        __asm__("posix_spawnattr_setflags");
    int zkcli_spawnattr_setsigmask(struct zkcli_spawnattr *, const struct zkcli_sigset *)
        __asm__("posix_spawnattr_setsigmask");
    int zkcli_spawnattr_setsigdefault(struct zkcli_spawnattr *, const struct zkcli_sigset *)
        __asm__("posix_spawnattr_setsigdefault");
    int zkcli_spawnp(int *, const char *, const void *, const struct zkcli_spawnattr *,
                     char *const [], char *const []) __asm__("posix_spawnp");
    int zkcli_waitpid(int, int *, int) __asm__("waitpid");
    int zkcli_kill(int, int) __asm__("kill");
    int zkcli_fcntl(int, int, int) __asm__("fcntl");
    int zkcli_getpid(void) __asm__("getpid");
    int zkcli_gethostname(char *, size_t) __asm__("gethostname");
    int zkcli_clock_gettime(int, struct zkcli_timespec *) __asm__("clock_gettime");
    char *zkcli_strerror(int) __asm__("strerror");
    extern char **zkcli_environ __asm__("environ");
    ]]
end

local SIG_BLOCK = 0
local SFD_NONBLOCK, SFD_CLOEXEC = 0x800, 0x80000
local POSIX_SPAWN_SETSIGDEF, POSIX_SPAWN_SETSIGMASK = 0x04, 0x08
local WNOHANG = 1
local EINTR, EAGAIN, ENOENT, EACCES, ENOEXEC, ECHILD = 4, 11, 2, 13, 8, 10
local F_GETFD, F_SETFD, FD_CLOEXEC = 1, 2, 1
local SI_KERNEL = 0x80

_M.SIG = { HUP = 1, INT = 2, KILL = 9, TERM = 15, CHLD = 17 }
local SIGNAME = { [1] = "SIGHUP", [2] = "SIGINT", [9] = "SIGKILL", [15] = "SIGTERM",
                  [17] = "SIGCHLD" }
_M.SIGNAME = SIGNAME


function _M.strerror(e)
    return ffi.string(C.zkcli_strerror(e or ffi.errno()))
end


local ts = ffi.new("struct zkcli_timespec")
--- Monotonic seconds.
function _M.now()
    C.zkcli_clock_gettime(1, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end


--- Wall-clock seconds since the epoch (sub-second).
function _M.walltime()
    C.zkcli_clock_gettime(0, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end


function _M.getpid()
    return tonumber(C.zkcli_getpid())
end


function _M.hostname()
    local buf = ffi.new("char[256]")
    if C.zkcli_gethostname(buf, 255) ~= 0 then
        return "localhost"
    end
    return ffi.string(buf)
end


--- Blocks INT, TERM, HUP and CHLD in this thread (and in every thread it
--- starts later) and returns a non-blocking signalfd that reads them.
function _M.block_signals()
    local set = ffi.new("struct zkcli_sigset")
    C.zkcli_sigemptyset(set)
    for _, s in ipairs({ 1, 2, 15, 17 }) do
        C.zkcli_sigaddset(set, s)
    end
    if C.zkcli_sigprocmask(SIG_BLOCK, set, nil) ~= 0 then
        return nil, "sigprocmask: " .. _M.strerror()
    end
    local fd = C.zkcli_signalfd(-1, set, bit.bor(SFD_NONBLOCK, SFD_CLOEXEC))
    if fd < 0 then
        return nil, "signalfd: " .. _M.strerror()
    end
    return fd
end


local info = ffi.new("struct zkcli_siginfo")
local INFO_SIZE = ffi.sizeof(info)
--- The signals pending on the signalfd, in order: { { signo =, kernel = } ... }.
--- `kernel` is true when the kernel sent it (a terminal's Ctrl-C or hangup,
--- which reaches the whole foreground process group).
function _M.read_signals(fd)
    local out = {}
    while true do
        local n = C.zkcli_read(fd, info, INFO_SIZE)
        if n ~= INFO_SIZE then
            local e = ffi.errno()
            if n < 0 and e == EINTR then -- luacheck: ignore 542
            else
                return out
            end
        else
            out[#out + 1] = { signo = tonumber(info.signo), kernel = info.code == SI_KERNEL }
        end
    end
end


local pfds = ffi.new("struct zkcli_pollfd[2]")
--- Waits up to `timeout` seconds until one of the fds (at most two) is
--- readable.
function _M.poll(fd1, fd2, timeout)
    pfds[0].fd, pfds[0].events, pfds[0].revents = fd1, 1, 0
    pfds[1].fd, pfds[1].events, pfds[1].revents = fd2 or -1, 1, 0
    local ms = math.max(0, math.floor(timeout * 1000 + 0.5))
    C.zkcli_poll(pfds, fd2 and 2 or 1, ms)
end


local MAX_FD = 4096

--- The descriptors open now, as a set (those below MAX_FD).
function _M.open_fds()
    local set = {}
    for fd = 0, MAX_FD - 1 do
        if C.zkcli_fcntl(fd, F_GETFD, 0) >= 0 then
            set[fd] = true
        end
    end
    return set
end


--- Sets FD_CLOEXEC on every descriptor open now that is not in `keep`: the
--- descriptors we were started with stay the command's, ours (the
--- ZooKeeper connection, the client's eventfd ...) do not leak into it.
function _M.cloexec_all_but(keep)
    for fd = 3, MAX_FD - 1 do
        if not keep[fd] then
            local flags = C.zkcli_fcntl(fd, F_GETFD, 0)
            if flags >= 0 and bit.band(flags, FD_CLOEXEC) == 0 then
                C.zkcli_fcntl(fd, F_SETFD, bit.bor(flags, FD_CLOEXEC))
            end
        end
    end
end


--- Our environment plus `extra` (name -> value), as "NAME=value" strings.
local function environment(extra)
    local out, i = {}, 0
    local env = C.zkcli_environ
    while env ~= nil and env[i] ~= nil do
        local kv = ffi.string(env[i])
        local name = kv:match("^([^=]*)=")
        if not (name and extra[name]) then
            out[#out + 1] = kv
        end
        i = i + 1
    end
    for k, v in pairs(extra) do
        out[#out + 1] = k .. "=" .. v
    end
    return out
end


local function cstrings(list)
    local arr = ffi.new("char *[?]", #list + 1)
    local keep = {}
    for i, s in ipairs(list) do
        local b = ffi.new("char[?]", #s + 1, s)
        keep[i] = b
        arr[i - 1] = b
    end
    arr[#list] = nil
    return arr, keep
end


--- Starts argv[1] (searched in PATH) with argv, our environment plus `env`,
--- an empty signal mask and default signal dispositions. Returns the pid,
--- or nil, message, exit status a shell would give (127 not found,
--- 126 not executable).
function _M.spawn(argv, env)
    local attr = ffi.new("struct zkcli_spawnattr")
    if C.zkcli_spawnattr_init(attr) ~= 0 then
        return nil, "posix_spawnattr_init failed", 71
    end
    local empty = ffi.new("struct zkcli_sigset")
    C.zkcli_sigemptyset(empty)
    local all = ffi.new("struct zkcli_sigset")
    C.zkcli_sigfillset(all)
    C.zkcli_spawnattr_setsigmask(attr, empty)
    C.zkcli_spawnattr_setsigdefault(attr, all)
    C.zkcli_spawnattr_setflags(attr, bit.bor(POSIX_SPAWN_SETSIGDEF, POSIX_SPAWN_SETSIGMASK))
    local cargv, k1 = cstrings(argv)
    local cenv, k2 = cstrings(environment(env or {}))
    local pid = ffi.new("int[1]")
    local rc = C.zkcli_spawnp(pid, argv[1], nil, attr, cargv, cenv)
    C.zkcli_spawnattr_destroy(attr)
    local _ = { k1, k2 }    -- the strings live until here
    if rc ~= 0 then
        local status = (rc == ENOENT) and 127 or ((rc == EACCES or rc == ENOEXEC) and 126 or 71)
        return nil, argv[1] .. ": " .. _M.strerror(rc), status
    end
    return tonumber(pid[0])
end


local statusp = ffi.new("int[1]")
--- Non-blocking wait for child `pid`: nil while it runs, else its status
--- as a shell gives it (exit code, or 128 + signal number) and, for a
--- signal death, the signal number.
function _M.reap(pid)
    local r = C.zkcli_waitpid(pid, statusp, WNOHANG)
    if r == 0 then
        return nil
    end
    if r < 0 then
        local e = ffi.errno()
        if e == EINTR then
            return nil
        end
        if e == ECHILD then
            return 71        -- not ours any more: cannot happen unless someone reaped it
        end
        return nil
    end
    local st = statusp[0]
    local sig = bit.band(st, 0x7f)
    if sig == 0 then
        return bit.band(bit.rshift(st, 8), 0xff)
    end
    return 128 + sig, sig
end


function _M.kill(pid, sig)
    return C.zkcli_kill(pid, sig) == 0
end


_M.EAGAIN = EAGAIN
return _M
