-- tools/chaos/check.lua: proves (or refutes) from the logs of a chaos run
-- that nothing unsafe happened.
--
--   luajit tools/chaos/check.lua DIR        (exit 0: no violation, hang or leak)
--
-- Reads DIR/driver.log (faults with their monotonic start and end, spawns,
-- the final node listing and counter value), DIR/c<ID>.<INC>.log (one per
-- contender process: try / enter / write / leave / release / fail / ack /
-- lost / heldfalse / fenced / state / raise / exit events, and the
-- recipes' own), and the resources' decision logs DIR/lock.res, DIR/rw.res
-- (and DIR/cohort.res, DIR/cohortrw.res).
--
-- Definitions:
--   grant      an acquire that returned true: the interval [enter, leave]
--              as logged by its holder (a subset of the time its node
--              existed); a holder SIGKILLed inside ends at the kill.
--   overlap    two grants of different processes whose intervals intersect,
--              on the lock, or on the rwlock when one of them is a writer.
--              It is a violation unless the OLDER grant (lower token: it is
--              the one the lock passed over) had lost its lock, shown by one
--              of: the holder itself saw it (on_lost, held() false, its
--              token refused, release() "lost"); the driver SIGSTOPped,
--              killed, expired, cut, black-holed or delayed that process
--              from one session timeout before its enter to its leave; or
--              its client reported the connection suspended/lost meanwhile
--              (a suspended holder keeps its lock by design: the session may
--              live, and only the fencing token protects the resource then).
--              Even then, no write of the older grant may be accepted after
--              a write of the newer one.
--   stale write  an accepted write whose token is lower than an earlier
--              accepted one, or equal to it but from another grant: the
--              accept log must be strictly increasing across grants.
--   hang       a try with no outcome (unless its process was SIGKILLed
--              during it), an outcome later than its timeout plus 120 s
--              (time the process spent SIGSTOPped not counted), a grant
--              without leave or release, a process that did not exit when
--              told to stop.
--   leak       a lock or rwlock node left once every contender closed and
--              the sessions of killed ones expired; or, during the run, a
--              node owned by a contender's live session while it held
--              nothing (an "orphan" event: contenders check every 5 s and
--              before they close, after a sync that orders the check behind
--              their pending deletes). Such a ghost blocks everyone.
--   counter    acknowledged add() results all distinct, within 1..final,
--              and final <= acknowledged + ambiguous (errors that said the
--              write may have happened, and adds cut short by SIGKILL).
--   the other recipes of the run (DIR/driver.log's config recipes=):
--              chaos/check/<name>.lua each states and checks its promises
--              (cohort_lock, cohort_rwlock, multi_lock, semaphore, barrier,
--              double_barrier, work_queue, group, partitioner, persistent_node,
--              service_discovery, lease, multi_lease;
--              chaos/check/stable.lua: when a state must have settled).
--
-- The parts: chaos/check/logs.lua reads the logs, chaos/check/rules.lua
-- applies the definitions above, chaos/check/summary.lua makes the table.
do
    local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
    package.path = here .. "/../?.lua;" .. here .. "/../../spec/?.lua;" .. package.path
    require("helpers.tool").paths(here .. "/../..")     -- zkcoord (its error codes)
end
local logs = require "chaos.check.logs"
local rules = require "chaos.check.rules"
local summary = require "chaos.check.summary"
local recipes = require "chaos.recipes"

local _M = {}

-- The record the rules fill: what they find, counted by kind, and the first
-- 200 details.
local Record = {}
Record.__index = Record

function Record:violation(kind, msg)
    self.V[kind] = (self.V[kind] or 0) + 1
    if #self.details < 200 then self.details[#self.details + 1] = "VIOLATION " .. kind .. ": " .. msg end
end

function Record:hang(kind, msg)
    self.H[kind] = (self.H[kind] or 0) + 1
    if #self.details < 200 then self.details[#self.details + 1] = "HANG " .. kind .. ": " .. msg end
end

--- Checks the run in `dir`. Returns a result table:
--- { ok, violations, hangs, leaks, faults = { kind = n }, fault_total,
---   ops = {...}, details = { "..." }, text = markdown table }.
function _M.run(dir)
    local R = setmetatable({ dir = dir, details = {}, V = {}, H = {} }, Record)
    logs.read_driver(R)
    logs.read_contenders(R)
    rules.outcomes(R)
    rules.overlaps(R)
    rules.resources(R)
    rules.fenced_holders(R)
    rules.held_cases(R)
    rules.counter(R)
    R.recipe_rows = {}     -- { label =, prefix = (of its violation kinds), details = }
    for _, name in ipairs(R.recipes) do
        local checker = recipes.checker(name)
        if checker then checker.run(R) end
    end
    rules.leaks(R)
    return summary.result(R)
end


local function this_is_the_script()
    local src = debug.getinfo(1, "S").source:match("^@(.*)$")
    return arg and arg[0] and src and arg[0]:match("chaos/check%.lua$")
        and not package.loaded["busted"]
end

if this_is_the_script() then
    local dir = arg[1]
    if not dir then
        io.stderr:write("usage: luajit tools/chaos/check.lua DIR\n")
        os.exit(64)
    end
    local r = _M.run(dir)
    print(r.text)
    for _, d in ipairs(r.details) do print(d) end
    os.exit(r.ok and 0 or 1)
end

return _M
