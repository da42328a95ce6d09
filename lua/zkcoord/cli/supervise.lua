-- zkcoord.cli.supervise: the command `zkcoord lock`, `elect` and `once`
-- run while holding (zkcoord.cli.held): its signals forwarded to its
-- process group, SIGTERM once the hold is lost and SIGKILL after --grace,
-- waited for as the subreaper of every descendant. Not a public API.
local sys = require "zkcoord.cli.sys"
local ex = require "zkcoord.cli.exit"

local note = ex.note
local SIG = sys.SIG

local _M = {}

-- The process group of process `pid` (field 5 of /proc/PID/stat, after the
-- ")" that ends the command name), or nil once it is gone.
local function pgrp_of(pid)
    local f = io.open("/proc/" .. pid .. "/stat", "r")
    local stat = f and f:read("*a") or ""
    if f then f:close() end
    return tonumber(stat:match("^.*%)%s+%S+%s+%d+%s+(%d+)"))
end

-- Sends each signal of `sigs` to the process group of the command (pgid)
-- and to the group of each of our children outside it (a descendant that
-- left the group and was reparented to us; its own children went with
-- it). With `reached`, only to those children not in it, and not to pgid:
-- it records whom the signals reached, so that a child reparented later
-- gets them too.
local function signal_all(pgid, sigs, reached)
    if not reached then
        for _, sig in ipairs(sigs) do sys.kill(-pgid, sig) end
    end
    local own
    for _, pid in ipairs(sys.children()) do
        local g = not (reached and reached[pid]) and pgrp_of(pid)
        if g and g ~= pgid then
            own = own or pgrp_of(sys.getpid())
            -- never our own group (a child that joined it): just that child
            local target = g ~= own and -g or pid
            for _, sig in ipairs(sigs) do sys.kill(target, sig) end
            if reached then reached[pid] = true end
        end
    end
end

-- The signals that ask the command to end: forwarded to every process of
-- it (also those reparented to us later), then SIGKILL after --grace.
-- USR1 and USR2 are only passed on, once, to those there now.
local ENDING = { [SIG.HUP] = true, [SIG.INT] = true, [SIG.TERM] = true, [SIG.QUIT] = true }

-- Serves the client while the command runs: forwards signals to its group,
-- and once the hold is lost sends SIGTERM; after either, SIGKILL `grace`
-- seconds later. As the subreaper of every descendant, waits until none is
-- left (waitpid: ECHILD; the guard is not our child). Returns the status
-- of CMD (pid, the group's leader).
local function supervise(h, pid, grace)
    local c = h.c
    local fd = c:fd()
    local ending, reached = {}, {}     -- the ending signals sent, and whom they reached
    local term_at, killed, status
    local function stop_all(sig, why)
        if not term_at then
            note(("%s: %s to its process group %d"):format(why, sys.SIGNAME[sig], pid))
            term_at = sys.now()
        end
        local known = false
        for _, e in ipairs(ending) do known = known or e == sig end
        if not known then ending[#ending + 1] = sig end
        signal_all(pid, { sig })
        signal_all(pid, ending, reached)
    end
    local function check_lost()
        if h.lost and not h.lost_told then
            h.lost_told = true
            stop_all(SIG.TERM, ("%s lost (%s) while the command ran"):format(h.what, h.lost))
        end
    end
    while true do
        while true do
            local r, st = sys.wait(-1, h.tty ~= nil)
            if st == "stopped" then
                -- Ctrl-Z on the terminal CMD has: stop too, as a shell's job
                -- would, with the terminal back; on `fg`, hand it on again
                sys.foreground(h.tty_fd, h.tty)
                sys.kill(sys.getpid(), SIG.STOP)
                -- Stopped, we may have lost the session meanwhile: find out
                -- before CMD runs another step, and if so let it resume
                -- only to take its SIGTERM.
                c:process()
                check_lost()
                sys.foreground(h.tty_fd, pid)
                sys.kill(-pid, SIG.CONT)
            elseif r == pid then
                status = st
            elseif r == nil then
                return status or ex.OSERR    -- echild: no descendant left
            elseif r == false then
                break
            end
        end
        check_lost()
        if #ending > 0 then
            signal_all(pid, ending, reached)     -- those reparented to us since
        end
        if term_at and sys.now() - term_at >= grace then
            if not killed then
                note(("command %d still running %gs after %s: SIGKILL")
                     :format(pid, grace, sys.SIGNAME[ending[1]]))
                killed = true
            end
            signal_all(pid, { SIG.KILL })    -- again each round: orphans reparented since
        end
        sys.poll(0.1, h.sigfd, fd)
        c:process()
        for _, s in ipairs(sys.read_signals(h.sigfd)) do
            local n = s.signo
            if ENDING[n] then
                stop_all(n, sys.SIGNAME[n] .. " received")
            elseif n ~= SIG.CHLD then
                signal_all(pid, { n })
            end
        end
    end
end
_M.supervise = supervise

return _M
