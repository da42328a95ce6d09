-- tools/chaos/resource.lua: the fenced resource of the chaos run.
--
-- A file that stands for a storage service guarded by fencing tokens: a
-- write carries the writer's token, and the resource refuses a token lower
-- than the last one it accepted (equal is accepted: one holder writes
-- several times under one grant). Every decision is appended as one line
--
--   A|R <token> <last accepted after the decision> <pid> <monotonic time> <who>
--
-- under flock(2), so the read-decide-append step is atomic across
-- processes, and the file is its own state: the last line holds the last
-- accepted token. One write(2) per line with O_APPEND: a SIGKILL cannot
-- leave half a line, and the kernel drops the flock of a killed process.
local ffi = require "ffi"
local bit = require "bit"

local C = ffi.C

-- Aliased names (the real symbol via __asm__) so these declarations never
-- clash with anyone else's cdefs in the same process.
if not pcall(ffi.typeof, "struct chaos_res_marker") then
    ffi.cdef [[
    struct chaos_res_marker { int unused; };
    struct chaos_res_timespec { long tv_sec; long tv_nsec; };
    int chaos_res_open(const char *, int, int) __asm__("open");
    int chaos_res_close(int) __asm__("close");
    int chaos_res_flock(int, int) __asm__("flock");
    long chaos_res_pread(int, void *, size_t, long) __asm__("pread");
    long chaos_res_write(int, const void *, size_t) __asm__("write");
    long chaos_res_lseek(int, long, int) __asm__("lseek");
    int chaos_res_getpid(void) __asm__("getpid");
    int chaos_res_clock_gettime(int, struct chaos_res_timespec *) __asm__("clock_gettime");
    int chaos_res_nanosleep(const struct chaos_res_timespec *, struct chaos_res_timespec *)
        __asm__("nanosleep");
    const char *chaos_res_strerror(int) __asm__("strerror");
    ]]
end

local O_RDWR, O_CREAT, O_APPEND, O_CLOEXEC = 2, 0x40, 0x400, 0x80000
local LOCK_EX, LOCK_NB, LOCK_UN = 2, 4, 8
local SEEK_END = 2
local EINTR, EWOULDBLOCK = 4, 11

local _M = {}
local mt = { __index = _M }

local ts = ffi.new("struct chaos_res_timespec")
local function now()
    C.chaos_res_clock_gettime(1, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end
_M.now = now

local function sleep(s)
    local req = ffi.new("struct chaos_res_timespec")
    req.tv_sec = math.floor(s)
    req.tv_nsec = math.floor((s - math.floor(s)) * 1e9)
    C.chaos_res_nanosleep(req, nil)
end
_M.sleep = sleep
_M.getpid = function() return C.chaos_res_getpid() end

local function errstr()
    return ffi.string(C.chaos_res_strerror(ffi.errno()))
end


--- Opens (creates) the resource file. Returns the object, or nil, err.
function _M.open(path)
    local fd = C.chaos_res_open(path, bit.bor(O_RDWR, O_CREAT, O_APPEND, O_CLOEXEC), 420)
    if fd < 0 then
        return nil, "open " .. path .. ": " .. errstr()
    end
    return setmetatable({ path = path, fd = fd, pid = C.chaos_res_getpid(),
                          buf = ffi.new("char[512]") }, mt)
end


-- The last accepted token, from the file's last line (-1 when empty).
local function last_accepted(self)
    local size = tonumber(C.chaos_res_lseek(self.fd, 0, SEEK_END))
    if size <= 0 then
        return -1
    end
    local n = math.min(size, 512)
    local got = tonumber(C.chaos_res_pread(self.fd, self.buf, n, size - n))
    if got ~= n then
        return nil, "pread: " .. errstr()
    end
    local tail = ffi.string(self.buf, n)
    local line = tail:match("([^\n]+)\n$")
    local last = line and tonumber(line:match("^[AR] %S+ (%S+)"))
    if not last then
        return nil, "resource file ends with a malformed line: " .. tostring(line)
    end
    return last
end


--- Offers a write with `token` on behalf of `who` (a word, for the log).
--- Returns true (accepted) or false (refused: a higher token was accepted
--- before), the last accepted token after the decision, and the decision's
--- time; or nil, err. Bounded: gives up after `wait` seconds (default 30)
--- when the file stays locked (its holder may be SIGSTOPped).
function _M:offer(token, who, wait)
    assert(type(token) == "number" and token >= 0, "token must be a number >= 0")
    local deadline = now() + (wait or 30)
    while C.chaos_res_flock(self.fd, bit.bor(LOCK_EX, LOCK_NB)) ~= 0 do
        local e = ffi.errno()
        if e ~= EWOULDBLOCK and e ~= EINTR then
            return nil, "flock: " .. errstr()
        end
        if now() >= deadline then
            return nil, "resource busy"
        end
        sleep(0.001)
    end
    local last, err = last_accepted(self)
    local ok, t
    if last then
        ok = token >= last
        local after = ok and token or last
        t = now()
        local line = ("%s %.0f %.0f %d %.6f %s\n"):format(ok and "A" or "R", token, after,
                                                          self.pid, t, who or "-")
        local n = C.chaos_res_write(self.fd, line, #line)
        if n ~= #line then
            err = "write: " .. errstr()
        end
        last = after
    end
    C.chaos_res_flock(self.fd, LOCK_UN)
    if err then
        return nil, err
    end
    return ok, last, t
end


function _M:close()
    if self.fd then
        C.chaos_res_close(self.fd)
        self.fd = nil
    end
end


--- Reads a resource file (for the checker): an array of
--- { ok =, token =, last =, pid =, t =, who = }.
function _M.read(path)
    local f = io.open(path, "r")
    if not f then
        return {}
    end
    local out = {}
    for line in f:lines() do
        local d, token, last, pid, t, who = line:match("^([AR]) (%S+) (%S+) (%S+) (%S+) (%S+)$")
        if d then
            out[#out + 1] = { ok = d == "A", token = tonumber(token), last = tonumber(last),
                              pid = tonumber(pid), t = tonumber(t), who = who }
        else
            out[#out + 1] = { malformed = line }
        end
    end
    f:close()
    return out
end

return _M
