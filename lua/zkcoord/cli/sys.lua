--- zkcoord.cli.sys: the process and signal calls the zkcoord command needs,
--- over the core's process calls (src/process.c: any Lua, no FFI; Linux).
--- Not a public API.
--
-- Signals: INT, TERM, HUP, QUIT, USR1, USR2 and CHLD are blocked (block_signals) before the
-- ZooKeeper client starts its threads, so every thread inherits the mask
-- and none of them can take a signal meant for us; we read them from a
-- signalfd instead, in our own loop.
-- Children: posix_spawnp (no Lua code runs in the child of a threaded
-- process) with an empty signal mask, default dispositions, and a process
-- group of their own.
local core = require "zkcoord.core"

local P = core.process

local _M = {}

_M.SIG = P.SIG
local SIGNAME = {}
for name, n in pairs(P.SIG) do
    SIGNAME[n] = "SIG" .. name
end
_M.SIGNAME = SIGNAME

_M.now = core.now
_M.walltime = P.walltime
_M.getpid = P.getpid
_M.kill = P.kill
_M.poll = P.poll
_M.read_signals = P.read_signals
_M.spawn = P.spawn
_M.wait = P.wait
_M.subreaper = P.subreaper
_M.foreground = P.foreground


function _M.hostname()
    return P.hostname() or "localhost"
end


--- Blocks INT, TERM, HUP, QUIT, USR1, USR2 and CHLD in this thread (and in every thread it
--- starts later) and returns a non-blocking signalfd that reads them.
function _M.block_signals()
    local S = P.SIG
    -- QUIT, USR1, USR2 too: their default action would end us and leave
    -- CMD to the guard's SIGKILL
    return P.block_signals({ S.HUP, S.INT, S.QUIT, S.USR1, S.USR2, S.TERM, S.CHLD })
end


local MAX_FD = 4096

--- The descriptors open now, as a set (those below MAX_FD).
function _M.open_fds()
    return P.fds(MAX_FD)
end


--- Sets FD_CLOEXEC on every descriptor open now that is not in `keep`: the
--- descriptors we were started with stay the command's, ours (the
--- ZooKeeper connection, the client's eventfd ...) do not leak into it.
function _M.cloexec_all_but(keep)
    for fd in pairs(P.fds(MAX_FD)) do
        if fd >= 3 and not keep[fd] then
            P.cloexec(fd)
        end
    end
end


--- Our children now (orphans reparented to us as subreaper included), from
--- /proc; empty when the kernel does not list them.
function _M.children()
    local out = {}
    local pid = P.getpid()
    local f = io.open("/proc/" .. pid .. "/task/" .. pid .. "/children", "r")
    if f then
        for c in (f:read("*a") or ""):gmatch("%d+") do
            out[#out + 1] = tonumber(c)
        end
        f:close()
    end
    return out
end


--- The guard: a process, not our child, that SIGKILLs a process group when
--- we die (even by SIGKILL). guard() starts it (before any thread of ours
--- and before any connection, so it holds none); :arm(pgid) gives it the
--- group; :stop() ends it without killing (once the group is gone).
local Guard = {}
Guard.__index = Guard

function _M.guard()
    local fd, err = P.guard()
    if not fd then
        return nil, err
    end
    return setmetatable({ fd = fd }, Guard)
end

function Guard:arm(pgid)
    return P.write(self.fd, ("%d\n"):format(pgid))
end

function Guard:stop()
    if self.fd then
        P.write(self.fd, "q\n")
        P.close(self.fd)
        self.fd = nil
    end
end


return _M
