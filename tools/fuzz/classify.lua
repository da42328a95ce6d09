-- fuzz.classify: runs one call under xpcall, times it, and sorts its outcome
-- into the classes of tools/fuzz.lua's header; records each new bug once
-- (by signature) with a count; reads back what a write on the main client
-- wrote (the oracle).
local errors = require "zkcoord.errors"
local zkcoord = require "zkcoord"
local S = require "fuzz.state"
local show = require "fuzz.show"
local known = require "fuzz.known"
local catalogue = require "fuzz.catalogue"
local V = require "fuzz.values"

local type, pairs, ipairs, tostring, unpack = type, pairs, ipairs, tostring, unpack
local floor = math.floor
local concat = table.concat
local now = zkcoord.now
local pack = V.pack

local _M = {}

-- Every code a call may return: ZooKeeper's (core), ours (errors.own).
local KNOWN_CODES = { closed = true }
for rc, name in pairs(errors.by_rc) do
    if rc ~= 0 then
        KNOWN_CODES[name] = true
    end
end
for name in pairs(errors.own) do
    KNOWN_CODES[name] = true
end

-- Raises that are clear though they name no argument.
local CLEAR_PATTERNS = {
    "must be called on a",
    "cannot upgrade a read lock to a write lock",
    "bad rule verdict in 'enter'",
}

_M.BUG_CLASSES = { internal = true, unclear = true, bad_code = true, nil_no_code = true,
                   hang = true, oracle = true, health = true }

function _M.record_bug(class, key, call, msg, tb)
    local kb = known.match(class, key, msg)
    if kb then
        known.count(kb)
        if S.opts.verbose then show.say("  known bug ", kb, ": ", call, ": ", tostring(msg)) end
        return
    end
    S.counts[class] = S.counts[class] + 1
    local sig = class .. " " .. key .. " " .. tostring(msg):gsub("0x%x+", "0x?")
                                                          :gsub("#%d+", "#?"):sub(1, 200)
    local b = S.bugs[sig]
    if not b then
        b = { class = class, key = key, call = call, message = tostring(msg), traceback = tb,
              count = 0, seed = S.seed, at_call = S.calls }
        S.bugs[sig] = b
        S.bug_order[#S.bug_order + 1] = sig
        show.say("BUG [", class, "] ", call, "\n    ", tostring(msg), tb and ("\n" .. tb) or "")
    end
    b.count = b.count + 1
end
local record_bug = _M.record_bug

local function clear_message(msg)
    local name = msg:match("bad argument #%d+ to '([^']+)'")
    if name and catalogue.OUR_NAMES[name] then
        return true
    end
    for _, p in ipairs(CLEAR_PATTERNS) do
        if msg:find(p, 1, true) then
            return true
        end
    end
    return false
end

local function handler(e)
    return { err = e, tb = debug.traceback("", 2) }
end

-- Calls fn(self, args...) under xpcall, 1 in 20 from another coroutine
-- (another lock owner). Returns the packed results of xpcall.
local function invoke(fn, self, args)
    if V.chance(0.05) then
        S.coroutine_calls = S.coroutine_calls + 1
        local c = coroutine.create(function()
            return pack(xpcall(fn, handler, self, unpack(args, 1, args.n)))
        end)
        local okc, res = coroutine.resume(c)
        return okc and res or pack(false, handler(res))
    end
    return pack(xpcall(fn, handler, self, unpack(args, 1, args.n)))
end

local function judge_raise(key, desc, e, tb)
    if type(e) == "string" and e:find(S.SENTINEL, 1, true) then
        S.counts.by_fuzzer = S.counts.by_fuzzer + 1
    elseif type(e) ~= "string" then
        record_bug("unclear", key, desc, "raised a " .. type(e) .. ": " .. show.show(e), tb)
    elseif clear_message(e) then
        S.counts.arg_error = S.counts.arg_error + 1
    elseif e:find("attempt to ", 1, true) or e:find("has no member named", 1, true) then
        record_bug("internal", key, desc, e, tb)
    else
        record_bug("unclear", key, desc, e, tb)
    end
end

local function judge_return(key, desc, r, oversize_args)
    local counts = S.counts
    local v1, v2 = r[2], r[3]
    if r.n == 1 or (v1 == nil and v2 == nil) then
        if catalogue.NIL_OK[key] or (r.n >= 2 and v1 ~= nil) then
            counts.ok = counts.ok + 1
        else
            record_bug("nil_no_code", key, desc, "returned nil without an error code")
        end
    elseif v1 == nil then
        if type(v2) == "string" and KNOWN_CODES[v2] then
            local kb = known.match("err", key, v2, oversize_args)
            if kb then
                known.count(kb)
            else
                counts.err = counts.err + 1
                S.codes[v2] = (S.codes[v2] or 0) + 1
            end
        else
            record_bug("bad_code", key, desc, "returned nil, " .. show.show(v2))
        end
    else
        counts.ok = counts.ok + 1
    end
end

--- Runs fn(self, args...) and classifies it. Returns ok, results (packed).
function _M.run(key, fn, self, args, extra_wait, where)
    S.calls = S.calls + 1
    S.coverage[key] = (S.coverage[key] or 0) + 1
    local oversize_args = S.oversize
    S.oversize = false
    local desc = ("%s(%s%s)%s"):format(key, show.show(self),
                                       args.n > 0 and ", " .. show.show_args(args) or "", where or "")
    show.trace_push(("call %d seed %d: %s"):format(S.calls, S.seed, desc))
    if S.opts.verbose then
        show.say("call ", S.calls, ": ", desc)
    end
    local t0 = now()
    local r = invoke(fn, self, args)
    show.trace_pop()
    local elapsed = now() - t0
    if elapsed > S.slowest.t then
        S.slowest.t, S.slowest.call = elapsed, desc
    end
    if elapsed > S.CALL_BOUND + S.SLACK + (extra_wait or 0) then
        record_bug("hang", key, desc, ("took %.1f s"):format(elapsed))
    end
    if not r[1] then
        judge_raise(key, desc, r[2].err, r[2].tb)
        return false
    end
    judge_return(key, desc, r, oversize_args)
    return true, pack(unpack(r, 2, r.n))
end

-- ---------------------------------------------------------------------------
-- The oracle.

-- Expected perms string of an all-"world:anyone" ACL of one entry, or nil.
local function expected_perms(acl)
    if type(acl) ~= "table" or #acl ~= 1 or type(acl[1]) ~= "table" then return nil end
    local e = acl[1]
    if e.scheme ~= "world" or e.id ~= "anyone" then return nil end
    local set = {}
    if type(e.perms) == "string" then
        for ch in e.perms:gmatch(".") do set[ch] = true end
    elseif type(e.perms) == "number" and e.perms % 1 == 0 and e.perms >= 0 and e.perms <= 31 then
        local bits = { r = 1, w = 2, c = 4, d = 8, a = 16 }
        for ch, b in pairs(bits) do
            if floor(e.perms / b) % 2 == 1 then set[ch] = true end
        end
    else
        return nil
    end
    local out = {}
    for _, ch in ipairs({ "r", "w", "c", "d", "a" }) do
        if set[ch] then out[#out + 1] = ch end
    end
    return concat(out)
end

-- A create (or a multi's create) must return a path inside the chroot.
local function check_paths(key, res, desc)
    if key == "client.create" and res[1] and (type(res[1]) ~= "string" or res[1]:sub(1, 1) ~= "/") then
        record_bug("oracle", key, desc, "create returned the path " .. show.show(res[1])
                                        .. ": not a path inside the chroot")
        return false
    end
    if key == "client.multi" and type(res[1]) == "table" then
        for _, r in ipairs(res[1]) do
            if type(r) == "table" and r.path ~= nil
                    and (type(r.path) ~= "string" or r.path:sub(1, 1) ~= "/") then
                record_bug("oracle", key, desc, "multi create returned the path " .. show.show(r.path)
                                                .. ": not a path inside the chroot")
                return false
            end
        end
    end
    return true
end

-- Read back what a successful write on the main client wrote.
local function oracle(key, args, res, desc)
    local c = S.main.c
    if not check_paths(key, res, desc) then
        return
    end
    if res[1] and (key == "client.create" or key == "client.set_acl") then
        local acl = key == "client.create" and type(args[3]) == "table" and args[3].acl or args[2]
        local want = expected_perms(acl)
        if want and want ~= "" then
            local path = key == "client.create" and res[1] or args[1]
            local got = c:get_acl(path)
            if got and got[1] and got[1].perms ~= want then
                record_bug("oracle", key, desc, ("ACL perms %s read back as %s"):format(
                    want, tostring(got[1].perms)))
            end
        end
    end
    if res[1] and type(args[2]) == "string"
            and (key == "client.create" or key == "client.set") then
        local path = key == "client.create" and res[1] or args[1]
        local data = c:get(path)
        if data ~= nil and data ~= args[2] then
            record_bug("oracle", key, desc, ("wrote %d bytes, read back %d bytes"):format(
                #args[2], #data))
        end
    end
end

--- The oracle, protected: a read-back that raises is itself an oracle bug.
function _M.oracle(key, args, res)
    local desc = key .. "(" .. show.show_args(args) .. ")"
    local ok, err = pcall(oracle, key, args, res, desc)
    if not ok then
        record_bug("oracle", key, desc, "reading back failed: " .. tostring(err))
    end
end

return _M
