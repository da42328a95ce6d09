--- zkcoord.client.checks: the client's own argument checks (internal):
--- self, paths, versions, watch functions, arrays. Misuse raises through
--- zkcoord.util's raise, blaming the first caller outside this library.
--
-- Plain functions on values: none reads a client's fields (check_self
-- compares a metatable only).
local args = require "zkcoord.util.args"
local type, error, pairs, tostring, getmetatable = type, error, pairs, tostring, getmetatable
local byte, find = string.byte, string.find
local client_mt = require("zkcoord.client.contract").mt

local _M = {}

local argerror = args.argerror


--- Raises unless `self` is a client (a method called with `.`).
function _M.check_self(self, fname)
    if getmetatable(self) ~= client_mt then
        error(("'%s' must be called on a zkcoord client (use client:%s(...))")
              :format(fname, fname), 3)
    end
end


--- Raises unless `c`, argument #1 of the contract function `fname`
--- ("contract.pump"), is a client.
function _M.check_client(c, fname)
    if getmetatable(c) ~= client_mt then
        argerror(1, fname, "zkcoord client expected, got " .. type(c))
    end
end


-- Paths check_path accepted, one set per rule (a sequential path may end
-- with "/" but not be "/"): a path met again costs one table read. Only
-- accepted paths are kept, so a bad path raises every time. Each set is
-- dropped when it reaches MEMO_MAX entries: node names with a uuid in them
-- are seen once, and memory stays bounded.
local MEMO_MAX = 512
local accepted = { [false] = {}, [true] = {} }
local accepted_n = { [false] = 0, [true] = 0 }


--- Raises unless `path` is an absolute ZooKeeper path. A trailing "/" is
--- allowed only where ZooKeeper appends a sequence number.
function _M.check_path(path, fname, n, sequential)
    sequential = not not sequential
    local memo = accepted[sequential]
    if memo[path] then
        return path
    end
    if type(path) ~= "string" then
        argerror(n or 1, fname, "path must be a string, got " .. type(path), 2)
    end
    if byte(path, 1) ~= 47 then
        argerror(n or 1, fname, "path must start with '/': " .. path, 2)
    end
    local len = #path
    if len > 1 and byte(path, len) == 47 and not sequential then
        argerror(n or 1, fname, "path must not end with '/': " .. path, 2)
    end
    -- ZooKeeper refuses control characters (%c: bytes 0-31 and 127);
    -- libzookeeper's multi even frees memory it never allocated on one (a
    -- crash). A byte loop, not find(path, "^%C*$"): a path with a fresh
    -- uuid misses the memo on every lock cycle, and the pattern cost about
    -- 50 instructions a byte (6 % of a contended cycle's), the loop a few.
    for i = 1, len do
        local b = byte(path, i)
        if b < 32 or b == 127 then
            argerror(n or 1, fname, "path must not contain NUL or control characters", 2)
        end
    end
    if sequential and path == "/" then
        -- Under a chroot libzookeeper would create <chroot><seq> beside the
        -- namespace, outside it.
        argerror(n or 1, fname, "a sequential node needs a name prefix, not '/'", 2)
    end
    if find(path, "//", 1, true) then
        argerror(n or 1, fname, "path must not contain empty segments: " .. path, 2)
    end
    -- A "." or ".." segment inside, or last (no concatenation: "/." or "/.." at the end)
    if find(path, "/./", 1, true) or find(path, "/../", 1, true)
        or (byte(path, len) == 46 and (byte(path, len - 1) == 47
            or (byte(path, len - 1) == 46 and byte(path, len - 2) == 47))) then
        argerror(n or 1, fname, "path must not contain '.' or '..' segments: " .. path, 2)
    end
    local count = accepted_n[sequential] + 1
    if count > MEMO_MAX then
        memo, count = {}, 1
        accepted[sequential] = memo
    end
    memo[path] = true
    accepted_n[sequential] = count
    return path
end


function _M.check_version(v, fname, n)
    if type(v) == "nil" then   -- not `== nil`: a NULL cdata equals nil
        return -1
    end
    if type(v) ~= "number" or v ~= v or v % 1 ~= 0 or v < -1 or v > 2147483647 then
        argerror(n, fname, "version must be an integer >= -1", 2)
    end
    return v
end


function _M.check_fn(fn, fname, n)
    if fn ~= nil and not args.is_callable(fn) then
        argerror(n, fname, "watch must be a function or nil", 2)
    end
    return fn
end


--- The boolean flags of a create (client:create's opts, a multi's create
--- op): true, false or nil, nothing else ("yes" would pass for true).
_M.CREATE_FLAGS = { "ephemeral", "sequential", "container" }


--- Raises unless each field of `opts` named in the array `flags` is a
--- boolean or nil (argument #n of `fname`): a flag's value is never read
--- as truthy, so { ephemeral = "no" } is refused, not made ephemeral.
function _M.check_flags(opts, flags, fname, n)
    for i = 1, #flags do
        local k = flags[i]
        local kind = type(opts[k])     -- a NULL cdata is not nil here either
        if kind ~= "nil" and kind ~= "boolean" then
            argerror(n, fname, k .. " must be a boolean, got " .. kind, 2)
        end
    end
    return opts
end


--- The length of `t` as an array, counted up to its largest integer key
--- (not `#` or ipairs, which stop at or skip a hole): nil, why when a key
--- is not a positive integer or an index below the largest is missing.
function _M.array_length(t)
    local n, count = 0, 0
    for k in pairs(t) do
        if type(k) ~= "number" or k < 1 or k % 1 ~= 0 then
            return nil, "a key is not a positive integer: " .. tostring(k)
        end
        count = count + 1
        if k > n then
            n = k
        end
    end
    if count ~= n then
        return nil, "holes"
    end
    return n
end


return _M
