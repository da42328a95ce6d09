-- fuzz.report: the summary the run prints (counts per outcome class, codes,
-- known bugs and their probes, coverage, each new bug) and the --report
-- file (a Lua table spec/fuzz_spec.lua reads back).
local S = require "fuzz.state"
local show = require "fuzz.show"
local known = require "fuzz.known"
local catalogue = require "fuzz.catalogue"
local classify = require "fuzz.classify"
local luadata = require "helpers.luadata"

local pairs, ipairs, tonumber = pairs, ipairs, tonumber
local concat = table.concat
local say = show.say

local _M = {}

local CLASSES = { "ok", "err", "arg_error", "by_fuzzer", "known_bug", "internal", "unclear",
                  "bad_code", "nil_no_code", "hang", "oracle", "health" }

local function sorted_counts(t)
    local list = {}
    for k, v in pairs(t) do list[#list + 1] = k .. "=" .. v end
    table.sort(list)
    return concat(list, " ")
end

local function print_classes()
    for _, cls in ipairs(CLASSES) do
        local extra = ""
        if cls == "err" then extra = "  " .. sorted_counts(S.codes) end
        if cls == "known_bug" then extra = "  " .. sorted_counts(S.known_hits) end
        say(("  %-12s %7d%s%s"):format(cls, S.counts[cls], classify.BUG_CLASSES[cls] and " (bug)" or "",
                                      extra))
    end
end

local function print_known()
    local sorted = {}
    for i, k in ipairs(known.KNOWN) do sorted[i] = k end
    table.sort(sorted, function(a, b) return tonumber(a.id:sub(2)) < tonumber(b.id:sub(2)) end)
    for _, k in ipairs(sorted) do
        if S.known_hits[k.id] or k.avoided then
            local status
            if k.avoided and not S.include[k.id] then
                status = "still present (probe): inputs left out"
            elseif k.avoided and S.present[k.id] == false then
                status = "fixed (probe): inputs included"
            elseif k.avoided then
                status = "inputs included (--known-bugs)"
            else
                status = "x" .. S.known_hits[k.id]
            end
            say(("  known %s (%s) %s: %s"):format(k.id, k.where, status, k.what))
        end
    end
end

--- Prints the summary; writes --report. Returns the number of new bug outcomes.
function _M.finish(elapsed, leftover)
    local nbugs = 0
    for class in pairs(classify.BUG_CLASSES) do nbugs = nbugs + S.counts[class] end
    local all = catalogue.ALL_KEYS
    local missing = {}
    for _, k in ipairs(all) do
        if not S.coverage[k] then missing[#missing + 1] = k end
    end

    say(("fuzz: seed %d: %d calls in %.1f s (%.0f/s), %d batches, %d victims (%d closed by the "
         .. "guard), %d main clients rotated, %d wrong-self calls, %d from coroutines"):format(
        S.seed, S.calls, elapsed, S.calls / elapsed, S.batch_no, S.victims, S.guard_closes,
        S.rotations, S.wrong_self_calls, S.coroutine_calls))
    print_classes()
    say(("  health checks: %d ok (%d retried), %d failed; logged: %d error, %d warn; %d nested calls")
        :format(S.health_ok, S.health_retries, S.health_failed, S.logged.error, S.logged.warn,
                S.nested_calls))
    say(("  slowest call %.2f s: %s"):format(S.slowest.t, tostring(S.slowest.call)))
    print_known()
    say(("  coverage: %d of %d methods called%s"):format(#all - #missing, #all,
        #missing > 0 and (", missing: " .. concat(missing, " ")) or ""))
    if leftover then
        say("  namespace ", S.ns, " not fully deleted (restrictive ACLs)")
    end
    for _, sig in ipairs(S.bug_order) do
        local b = S.bugs[sig]
        say(("BUG x%d [%s] %s\n    %s"):format(b.count, b.class, b.call, b.message))
    end
    say(nbugs == 0 and "fuzz: no new bug" or ("fuzz: %d new bug outcomes"):format(nbugs))

    if S.opts.report then
        local list = {}
        for _, sig in ipairs(S.bug_order) do list[#list + 1] = S.bugs[sig] end
        luadata.write(S.opts.report, {
            seed = S.seed, calls = S.calls, seconds = elapsed, batches = S.batch_no,
            victims = S.victims, guard_closes = S.guard_closes, rotations = S.rotations,
            counts = S.counts, codes = S.codes, known = S.known_hits, still_present = S.present,
            bugs = list, new_bugs = nbugs, coverage = S.coverage, missing = missing,
            methods = #all, health_ok = S.health_ok, health_failed = S.health_failed,
            health_retries = S.health_retries, wrong_self = S.wrong_self_calls,
            nested = S.nested_calls, slowest = S.slowest.t, slowest_call = S.slowest.call,
            finished = true,
        })
    end
    return nbugs
end

return _M
