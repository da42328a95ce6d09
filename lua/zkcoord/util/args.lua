--- zkcoord.util.args: argument checks in one wording (internal).
--
-- Misuse raises "bad argument #n to 'fname' (...)", blaming the first
-- caller outside this library (raise, argerror): self, options, callables,
-- timeouts and durations are checked here so that every recipe says it
-- the same way.
local type, error, pairs, ipairs, tostring, getmetatable = type, error, pairs, ipairs, tostring, getmetatable
local concat = table.concat
local find, match, getinfo = string.find, string.match, debug.getinfo
-- past a __metatable field: it hides the metatable from getmetatable only
local getmetatable_raw, rawget = debug.getmetatable, rawget

local _M = { _VERSION = require("zkcoord.version") }


-- The library's own subdirectories (zkcoord/<dir>/<name>.lua): frames in
-- them, like those of zkcoord/<name>.lua, are passed over when an error
-- blames its caller. A new subdirectory goes here (util_spec checks that
-- every one under lua/zkcoord is listed).
-- (cohort, election and work_queue: the splits of those recipes, landing
-- from their own branches.)
_M.SUBDIRS = { cache = true, cli = true, client = true, cohort = true, counter = true,
               discovery = true, election = true, layout = true, lease = true, line = true,
               metrics = true, testing = true, util = true, wait = true, ["wait/ngx"] = true,
               work_queue = true }
local SUBDIRS = _M.SUBDIRS


-- Is `source` (debug.getinfo's) a file of this library? By name, not by
-- the exact directory: one process may load modules through several
-- package.path entries.
local function our_source(source)
    if find(source, "zkcoord[/\\][%w_]+%.lua$") then
        return true
    end
    local dir = match(source, "zkcoord[/\\]([%w_]+)[/\\][%w_]+%.lua$")
    if dir ~= nil and SUBDIRS[dir] then
        return true
    end
    -- two folders deep (wait/ngx/ticker.lua)
    local d1, d2 = match(source, "zkcoord[/\\]([%w_]+)[/\\]([%w_]+)[/\\][%w_]+%.lua$")
    return d1 ~= nil and SUBDIRS[d1 .. "/" .. d2] == true
end


--- Raises `msg`, blaming the first caller outside this library: the same
--- check runs from client:create, client:send("create"), recipe
--- constructors and internal paths at different depths, and `level` alone
--- would point inside zkcoord from some of them. `level` (default 2: the
--- caller of the function calling raise) is where the search starts.
function _M.raise(msg, level)
    local k = (level or 2) + 1
    while true do
        local info = getinfo(k, "S")
        -- C frames (pcall around a user's rule) are passed over too
        if not info or (info.what ~= "C" and not our_source(info.source)) then
            break
        end
        k = k + 1
    end
    error(msg, k)
end
local raise = _M.raise


--- Raises "bad argument #n to 'fname' (msg)", blaming the first caller
--- outside this library (see raise).
function _M.argerror(n, fname, msg, level)
    raise(("bad argument #%d to '%s' (%s)"):format(n, fname, msg), (level or 2) + 1)
end
local argerror = _M.argerror


--- Is `v` callable: a function, or a table or userdata whose metatable
--- has a __call (kazoo takes any callable for a callback; so do we).
function _M.is_callable(v)
    local kind = type(v)
    if kind == "function" then
        return true
    end
    local m = (kind == "table" or kind == "userdata") and getmetatable_raw(v)
    return m and type(rawget(m, "__call")) == "function" or false
end
local is_callable = _M.is_callable


--- Checks that argument #n (default 1) of `fname` is callable (a function,
--- or a table or userdata with __call); returns it.
function _M.check_fn(fn, fname, n)
    if not is_callable(fn) then
        argerror(n or 1, fname, "function expected, got " .. type(fn))
    end
    return fn
end
local check_fn = _M.check_fn


--- Checks the `layout` option (argument #n of `fname`): whose node names
--- a recipe uses, "curator" (the default) or "kazoo" (zkcoord.layout.kazoo).
--- Returns it.
function _M.check_layout(layout, fname, n)
    if layout == nil then
        return "curator"
    end
    if layout ~= "curator" and layout ~= "kazoo" then
        argerror(n, fname, "layout must be \"curator\" or \"kazoo\", got "
                 .. (type(layout) == "string" and ("%q"):format(layout) or type(layout)))
    end
    return layout
end


--- Checks that argument #n of `fname` (`what` in the message: "data") is
--- a string; returns it.
function _M.check_string(v, fname, n, what)
    if type(v) ~= "string" then
        argerror(n, fname, what .. " must be a string, got " .. type(v))
    end
    return v
end


--- A listener method's body: checks fn (argument #1 of `fname`), appends
--- it to the array `list` and returns it (what remove/off methods take).
function _M.add_fn(list, fn, fname)
    check_fn(fn, fname)
    list[#list + 1] = fn
    return fn
end


--- A check that `self` is an instance of metatable `mt`, for the methods
--- of one kind of object: check(self, "wait") raises "'wait' must be called
--- on a <noun> (use <var>:wait(...))" at the method's caller.
---@param mt table
---@param noun string "barrier", "work queue" ...
---@param var string the usual variable name in examples ("b", "q" ...)
function _M.self_checker(mt, noun, var)
    local fmt = "'%s' must be called on a " .. noun .. " (use " .. var .. ":%s(...))"
    return function(self, name)
        if getmetatable(self) ~= mt then
            error(fmt:format(name, name), 3)   -- 1 here, 2 the method, 3 its caller
        end
    end
end


--- Checks an options argument (#n of `fname`): nil or a table whose keys
--- are all in the array `keys`. Returns the table ({} for nil).
---@param opts table|nil
---@param keys string[] the known keys, in the order the message lists them
---@param fname string the checked function's name
---@param n integer the options argument's position
function _M.check_opts(opts, keys, fname, n)
    if opts == nil then
        return {}
    end
    if type(opts) ~= "table" then
        argerror(n, fname, "opts must be a table, got " .. type(opts))
    end
    for k in pairs(opts) do
        local known = false
        for _, key in ipairs(keys) do
            if k == key then
                known = true
                break
            end
        end
        if not known then
            argerror(n, fname, "unknown option '" .. tostring(k) .. "' ("
                     .. concat(keys, ", ") .. ")")
        end
    end
    return opts
end


--- Checks the timeout of a waiter's primitive (an event's wait, sleep, a
--- future's wait; argument #n of `fname`): nil or a number of seconds >= 0,
--- math.huge no limit. NaN, a negative number, a numeric string or a cdata
--- raise (NaN would wait for ever, a negative number return at once: both
--- hide a bug). With `required`, nil raises too (a sleep has no "no
--- timeout"). No upper bound: the library's own waits pass sums of bounds
--- here (a counter's request timeouts and retries). Returns it.
function _M.check_wait(t, fname, n, required)
    local kind = type(t)     -- not `t == nil`: a NULL cdata equals nil
    if kind == "number" then
        if t >= 0 then
            return t
        end
    elseif kind == "nil" and not required then
        return t
    end
    argerror(n or 1, fname, required and "timeout must be a number >= 0"
                            or "timeout must be nil or a number >= 0")
end
local check_wait = _M.check_wait


--- The largest finite duration option or timeout in seconds: a larger one
--- is almost surely milliseconds (Curator's unit), which the server would
--- silently cap (a session timeout) or which would stall for hours.
_M.MAX_SECONDS = 600
local MAX_SECONDS = _M.MAX_SECONDS


--- Checks the timeout of a call of the API that waits (argument #n of
--- `fname`, or an option of it): what check_wait takes, and at most
--- MAX_SECONDS unless math.huge (no limit). acquire(5000) is Curator's
--- milliseconds, 83 minutes here: it raises; a longer wait is math.huge
--- (or nil), bounded by the caller. Every such call checks its timeout
--- here, so all raise in the same words. Returns it.
function _M.check_timeout(t, fname, n, required)
    check_wait(t, fname, (n or 1), required)
    if t ~= nil and t > MAX_SECONDS and t ~= math.huge then
        argerror(n or 1, fname, ("timeout = %.17g is over %d: seconds, not milliseconds "
                                 .. "(math.huge: no limit)"):format(t, MAX_SECONDS))
    end
    return t
end


--- Checks a duration option in seconds (argument #n of `fname`, `name` in
--- the message): a number > 0 (>= 0 with `zero_ok`) and at most
--- MAX_SECONDS; math.huge (no limit) too with `unbounded`. Returns it.
function _M.check_seconds(v, name, fname, n, zero_ok, unbounded)
    if type(v) ~= "number" or not (v > 0 or (zero_ok and v == 0)) then  -- luacheck: ignore 581
        argerror(n, fname, name .. (zero_ok and " must be a number of seconds >= 0"
                                    or " must be a positive number of seconds"))
    end
    if v > MAX_SECONDS and not (unbounded and v == math.huge) then
        if v == math.huge then
            argerror(n, fname, ("%s must be at most %d seconds (math.huge is no limit "
                                .. "only for timeouts)"):format(name, MAX_SECONDS))
        end
        argerror(n, fname, ("%s = %.17g is over %d: seconds, not milliseconds")
                           :format(name, v, MAX_SECONDS))
    end
    return v
end


return _M
