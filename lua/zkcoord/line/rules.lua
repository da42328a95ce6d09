--- zkcoord.line.rules: the rules of the waiting-line engine, in one place.
--
-- A rule is a driver's `rule(entries, me, q)`: `entries` is the line in
-- order (zkcoord.line.driver's parse), `me` our index in it, `q` our
-- position. It returns
--   true        we are through;
--   an entry    (not ours) wait until that one node changes or goes, then
--               ask again: one node per waiter, no herd;
--   rules.ANY   wait until the line changes (a create or delete under the
--               parent), then ask again about exactly the listing the watch
--               was set with: for rules no single node can answer.
-- `check_verdict` raises (in enter) on anything else. The recipes' rules
-- are here (lock and election: first; rwlock: none_below and
-- first_none_above; semaphore: at_most), so each exists once.
--
-- Scans: a rule whose verdict is "the nearest entry below ours with one of
-- some markers, else the lowest above ours with one of some markers, else
-- through" can be answered by one pass over the names, without a table
-- per name and a sort (a join reads the whole line: docs/PERFORMANCE.md),
-- and, since no entry can appear below ours, a waiter walks down what it
-- saw below it when its entry goes, without listing (zkcoord.line.walk).
-- Such a rule is registered here with `scan_of`'s
-- description; line.driver{} looks it up once, and the engine then never
-- calls the rule (zkcoord.line.driver's scan gives its verdict).
local contract = require "zkcoord.contract"

local type, tostring, setmetatable, select = type, tostring, setmetatable, select
local argerror = contract.argerror
local raise = contract.raise

local _M = {}

--- The verdict "wait until the line changes": any participant joining or
--- leaving wakes us (a children watch on the parent).
_M.ANY = setmetatable({}, { __tostring = function() return "line.ANY" end })
local ANY = _M.ANY

-- rule -> { below = true (any marker) | set of markers, above = nil | set }
local SCANS = setmetatable({}, { __mode = "k" })

local function scanned(rule, below, above)
    SCANS[rule] = { below = below, above = above }
    return rule
end

--- The one-pass form of `rule` (see the header), or nil.
function _M.scan_of(rule)
    return SCANS[rule]
end


-- Raises unless `n` is an integer >= 1, with a hint when it is a table (a
-- maker passed as the rule itself: the rule's first argument is entries).
local function check_count(n, fname)
    if type(n) ~= "number" or n % 1 ~= 0 or n < 1 then
        argerror(1, fname, "n must be an integer >= 1, got "
                 .. (type(n) == "table" and ("a table: pass %s(n) as the rule, not %s")
                                            :format(fname, fname) or tostring(n)), 3)
    end
end


--- Through when first; watches the node just below ours: exclusive lock,
--- election, write lock.
function _M.first(entries, me)
    return me == 1 or entries[me - 1]
end
scanned(_M.first, true)


--- Always through at once: a place in the line that does not wait (a
--- group member, a work item); watch the line with q:watch_line().
function _M.always()
    return true
end


--- Through when fewer than n are ahead: k-of-n slots in one line. Any of
--- the n ahead may leave first, so no single node can be watched: every
--- waiter waits for any change of the line (ANY), and each change wakes
--- every waiter. Right for a few waiters; client:semaphore() is the
--- herd-free k-of-n (an internal lock: only its holder watches the line).
function _M.fewer_than(n)
    check_count(n, "rules.fewer_than")
    return function(_, me)
        return me <= n or ANY
    end
end


--- Through while the whole line, ours and those behind us included, holds
--- at most n entries (Curator's semaphore count); else ANY. Meant for a
--- line only one waiter at a time watches (client:semaphore).
function _M.at_most(n)
    check_count(n, "rules.at_most")
    return function(entries)
        return #entries <= n or ANY
    end
end


-- The first entry from index `from` to `to` (by `step`) whose marker is
-- in `set`: the one to watch; true (through) when there is none.
local function first_marked(entries, from, to, step, set)
    for i = from, to, step do
        if set[entries[i].marker] then
            return entries[i]
        end
    end
    return true
end


--- Through when no lower entry carries `marker` (or one of the markers
--- given: none_below("__WRIT__", "lock-")), a reader behind writers;
--- watches the last such entry: the one that must go last.
function _M.none_below(...)
    local set = {}
    for i = 1, select("#", ...) do
        set[select(i, ...)] = true
    end
    return scanned(function(entries, me)
        return first_marked(entries, me - 1, 1, -1, set)
    end, set)
end


--- Through when first and no entry above carries `marker`; watches the
--- node just below ours, or that entry (rwlock's writer behind a
--- downgraded reader, whose node sorts above it).
function _M.first_none_above(marker)
    local set = { [marker] = true }
    return scanned(function(entries, me)
        if me > 1 then
            return entries[me - 1]
        end
        return first_marked(entries, me + 1, #entries, 1, set)
    end, true, set)
end


-- What a rule returned, for an error message.
local function show(verdict)
    if type(verdict) == "table" then
        if type(verdict.name) == "string" then
            return "an entry that is not in the line it was given (" .. verdict.name .. ")"
        end
        return "a table that is not one of its entries"
    elseif type(verdict) == "string" then
        return ("the string %q"):format(verdict)
    end
    return type(verdict) == "nil" and "nil" or "a " .. type(verdict) .. " (" .. tostring(verdict) .. ")"
end


--- Raises (blaming enter's caller: call it from enter itself) unless
--- `verdict` is ANY or one of `entries` other than ours; our node leaves
--- the line first.
function _M.check_verdict(q, verdict, entries, me)
    if verdict == ANY or (me > 1 and verdict == entries[me - 1]) then
        return
    end
    if type(verdict) == "table" then
        for i = 1, #entries do
            if entries[i] == verdict then
                if i ~= me then
                    return
                end
                q:leave()
                raise("bad rule verdict in 'enter' (the rule of the line at " .. q.path
                      .. " returned our own entry: waiting on it would never end)", 3)
            end
        end
    end
    q:leave()    -- no node left behind in the line
    local hint = ""
    if type(verdict) == "function" then
        hint = "; pass the rule a ready-made rule maker returns, e.g. rules.fewer_than(n),"
               .. " not the maker itself"
    end
    raise(("bad rule verdict in 'enter' (the rule of the line at %s returned %s: a rule "
           .. "returns true, line.ANY or one of the entries it was given%s)")
          :format(q.path, show(verdict), hint), 3)
end


return _M
