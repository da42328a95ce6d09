--- zkcoord.testing.socket: loopback TCP sockets for zkcoord.testing's
--- proxy (its process) and for raw protocol checks: listen, connect, a
--- blocking-style connection with timeouts; a monotonic clock and file
--- versions. LuaJIT FFI over glibc on Linux (x86_64/aarch64 constants),
--- no core: the proxy process runs it on luajit whatever Lua its user
--- runs. Runtime failures return nil, err; bad arguments raise.

local ffi = require("ffi")
local bit = require("bit")

local C = ffi.C

local _M = {}

-- Every C name is declared under a zkh_ alias (__asm__ picks the real
-- symbol) so these cdefs never clash with the library's own declarations
-- in the same busted process. Guarded: this file may be loaded under two
-- module names, and LuaJIT refuses to redefine a struct.
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
    int zkh_statx(int, const char *, int, unsigned int, struct zkh_statx *)
        __asm__("statx");
    uint16_t zkh_htons(uint16_t) __asm__("htons");
    uint16_t zkh_ntohs(uint16_t) __asm__("ntohs");
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


local function errstr(e)
    return ffi.string(C.zkh_strerror(e or ffi.errno()))
end

local ts = ffi.new("struct zkh_timespec")

--- Monotonic seconds (CLOCK_MONOTONIC, as the core's clock).
function _M.now()
    C.zkh_clock_gettime(S.CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
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


-- Low-level pieces for the proxy (same family, not a public API).
_M.sys = { C = C, S = S, errstr = errstr, poll1 = poll1 }

return _M
