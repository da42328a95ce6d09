-- Process, time, file and loopback-socket utilities for the test helpers:
-- zkcoord.testing's (processes, files, free ports and the four-letter-word
-- probe from zkcoord.testing.proc; sockets and file versions from
-- zkcoord.testing.socket), plus memory figures, which only the suite's
-- soak and memory specs need.
local ffi = require("ffi")
local testing_proc = require("zkcoord.testing.proc")
local socket = require("zkcoord.testing.socket")

local _M = {}

for k, v in pairs(socket) do
    _M[k] = v
end
-- the processes' clock and sleep: the core's (the same CLOCK_MONOTONIC)
for k, v in pairs(testing_proc) do
    _M[k] = v
end

-- Guarded: LuaJIT refuses to redefine a struct (a second module name).
if not pcall(ffi.typeof, "struct zkh_mallinfo2") then
    ffi.cdef[[
    struct zkh_mallinfo2 {
        size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks,
            uordblks, fordblks, keepcost;
    };
    struct zkh_mallinfo2 zkh_mallinfo2(void) __asm__("mallinfo2");
    ]]
end


--- The standard output of shell command `cmd` (benches: versions, load
--- averages, compilers).
function _M.output(cmd)
    local f = assert(io.popen(cmd))
    local out = f:read("*a")
    f:close()
    return out
end


--- Resident set size of this process (or of process `pid`) in KiB.
function _M.rss_kb(pid)
    local f = io.open("/proc/" .. (pid or "self") .. "/status")
    local text = f and f:read("*a") or ""
    if f then f:close() end
    return tonumber(text:match("VmRSS:%s*(%d+)")) or 0
end


-- Bytes malloc() has handed out and not had back, in KiB, over every
-- arena (glibc's mallinfo2: the C core's and libzookeeper's memory; the
-- LuaJIT heap has its own allocator). Unlike RSS it does not move with
-- page faults, arena trimming or the JIT under load.
function _M.malloc_kb()
    return tonumber(ffi.C.zkh_mallinfo2().uordblks) / 1024
end

--- Raises this process's open-files limit to `want` (at most the hard
--- limit); returns the limit now in effect (benches that open a connection
--- per waiting request).
function _M.raise_nofile(want)
    pcall(ffi.cdef, [[
        struct zkh_rlimit { unsigned long cur, max; };
        int getrlimit(int, struct zkh_rlimit *);
        int setrlimit(int, const struct zkh_rlimit *);
    ]])
    local RLIMIT_NOFILE = 7
    local rl = ffi.new("struct zkh_rlimit")
    assert(ffi.C.getrlimit(RLIMIT_NOFILE, rl) == 0)
    if rl.cur < want then
        rl.cur = math.min(want, tonumber(rl.max))
        assert(ffi.C.setrlimit(RLIMIT_NOFILE, rl) == 0)
    end
    return tonumber(rl.cur)
end

--- The threads of process `pid` as the scheduler counted them so far
--- (/proc/<pid>/task/<tid>/schedstat): a list of { tid, comm, run, wait,
--- slices }, run and wait in seconds (on a CPU; runnable but waiting for
--- one), slices the times it got a CPU. Benches split a phase's time per
--- thread with two of these (`schedstat_delta`).
function _M.schedstat(pid)
    local list = {}
    local ls = io.popen("ls /proc/" .. pid .. "/task 2>/dev/null")
    for tid in ls:lines() do
        local f = io.open(("/proc/%s/task/%s/schedstat"):format(pid, tid))
        local text = f and f:read("*a")
        if f then f:close() end
        local run, wait, slices = (text or ""):match("^(%d+) (%d+) (%d+)")
        if run then
            local c = io.open(("/proc/%s/task/%s/comm"):format(pid, tid))
            local comm = c and c:read("*l") or "?"
            if c then c:close() end
            list[#list + 1] = { tid = tonumber(tid), comm = comm, run = tonumber(run) * 1e-9,
                                wait = tonumber(wait) * 1e-9, slices = tonumber(slices) }
        end
    end
    ls:close()
    return list
end


--- What the threads of `after` (a schedstat list) did since `before`
--- (an earlier one of the same process), summed over the threads that
--- `pick(thread)` takes (nil: all): run, wait (seconds), slices.
function _M.schedstat_delta(before, after, pick)
    local was = {}
    for _, t in ipairs(before) do was[t.tid] = t end
    local run, wait, slices = 0, 0, 0
    for _, t in ipairs(after) do
        if not pick or pick(t) then
            local b = was[t.tid] or { run = 0, wait = 0, slices = 0 }
            run, wait, slices = run + t.run - b.run, wait + t.wait - b.wait, slices + t.slices - b.slices
        end
    end
    return run, wait, slices
end

return _M
