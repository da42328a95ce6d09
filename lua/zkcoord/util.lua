--- zkcoord.util: what every recipe needs besides the client (internal).
--
-- Argument checks (self, options, timeouts) that raise in one wording and
-- blame the caller; deadlines; waiting for the connection; the default id
-- of a participant; calling user callbacks; and the one retry helper.
--
-- Rules the recipes follow through it:
-- * A recipe never imports another recipe for a helper: shared helpers
--   live here.
-- * User callbacks (on_lost, on_change ...) always run protected: one that
--   raises is logged through client:log("error", ...) and the others still
--   run, and so does the recipe.
-- * A retry goes through retry() (errors.lua says which errors are worth
--   one): no recipe has a loop of its own with its own bound.
local core = require "zkcoord.core"
local errors = require "zkcoord.errors"
local compat = require "zkcoord.compat"

local now, random = core.now, core.random
local type, error, pairs, ipairs, tostring, tonumber, pcall, getmetatable, setmetatable =
    type, error, pairs, ipairs, tostring, tonumber, pcall, getmetatable, setmetatable
local xpcall, traceback = compat.xpcall, debug.traceback
local min, concat = math.min, table.concat
local find, match, getinfo = string.find, string.match, debug.getinfo
-- past a __metatable field: it hides the metatable from getmetatable only
local getmetatable_raw, rawget = debug.getmetatable, rawget
local transient = errors.transient

local _M = { _VERSION = require("zkcoord.version") }


-- ---------------------------------------------------------------------------
-- Argument checks: misuse raises "bad argument #n to 'fname' (...)".

-- The library's own subdirectories (zkcoord/<dir>/<name>.lua): frames in
-- them, like those of zkcoord/<name>.lua, are passed over when an error
-- blames its caller. A new subdirectory goes here (util_spec checks that
-- every one under lua/zkcoord is listed).
_M.SUBDIRS = { cache = true, cli = true, client = true, cohort = true, counter = true,
               discovery = true, election = true, layout = true, lease = true, line = true,
               testing = true, wait = true, ["wait/ngx"] = true, work_queue = true }
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


-- ---------------------------------------------------------------------------
-- Deadlines: a core.now() time, or nil for none.

--- The deadline `timeout` seconds from now (nil for nil: no deadline).
function _M.deadline(timeout)
    return timeout and now() + timeout
end


--- Seconds left until `deadline` (a core.now() time), never below 0;
--- nil for no deadline.
function _M.remaining(deadline)
    if not deadline then
        return nil
    end
    local left = deadline - now()
    return left > 0 and left or 0
end
local remaining = _M.remaining


--- Waits until the client is connected (true), closed (nil, "closed") or
--- the deadline (nil, "timeout"); nil deadline: as long as it takes.
function _M.wait_connected(client, deadline)
    while true do
        local left = remaining(deadline)
        if left == 0 then
            return nil, "timeout"
        end
        local ok, err = client:wait_connected(left and min(left, 1) or 1)
        if ok or err == "closed" then
            return ok, err
        end
    end
end


--- The children of `path` (one round trip); a missing `path` lists as
--- empty, since a recipe's parent node appears with its first member.
---@return string[]|nil names, string? err
function _M.children(client, path)
    local names, err = client:children(path)
    if not names and err == "nonode" then
        return {}
    end
    return names, err
end


--- The data of the nodes at `paths` that answer, in order, read in one
--- pipelined round trip; a node that is gone meanwhile is skipped.
---@return string[] data
function _M.present_data(client, paths)
    local fs, out = {}, {}
    for i, p in ipairs(paths) do
        fs[i] = client:send("get", p)
    end
    for _, f in ipairs(fs) do
        local data = f:wait()
        if data then
            out[#out + 1] = data
        end
    end
    return out
end


-- ---------------------------------------------------------------------------
-- Retries.

--- The policy of a retry when none is given: the client's connect-time
--- `retry` option's defaults.
_M.DEFAULT_POLICY = { max_tries = 5, base_delay = 0.05, max_delay = 1 }
local DEFAULT_POLICY = _M.DEFAULT_POLICY


--- The policy of a step that holds nothing in the session (a read, a wait
--- for a node): tried again until the deadline, also in a new session
--- after the old one expired.
_M.UNTIL_DEADLINE = { max_tries = math.huge, also = { sessionexpired = true } }


local function connected_or_closed(st)
    return st == "connected" or st == "closed"
end


--- Calls fn(...) until it succeeds (a first result other than
--- nil), fails with an error that is not transient (errors.transient, or
--- one in `policy.also`), the client is closed (nil, "closed") or
--- `deadline` passes (nil, "timeout"; with `policy.last_error`, the last
--- try's results). fn runs at least once, even past the deadline. Between
--- tries it sleeps a jittered, doubling pause (base_delay .. max_delay) and
--- then waits for the connection while there is none; after max_tries it
--- returns the last try's results.
--- The client's sync reads go through here too; varargs (NYI in LuaJIT's
--- compiler) measured no cost on them: 5,000 sequential exists() take the
--- same instruction count as with a fixed-arity form.
---@param client table
---@param deadline number|nil a core.now() time; nil: max_tries alone bounds it
---@param policy table|nil { max_tries =, base_delay =, max_delay =, also = { code = true },
---   last_error = true }; missing fields as in DEFAULT_POLICY. max_tries = math.huge:
---   until the deadline.
---@param fn function returns r1, err, r3 like a client call
function _M.retry(client, deadline, policy, fn, ...)
    policy = policy or DEFAULT_POLICY
    local max_tries = policy.max_tries or DEFAULT_POLICY.max_tries
    local delay = policy.base_delay or DEFAULT_POLICY.base_delay
    local max_delay = policy.max_delay or DEFAULT_POLICY.max_delay
    local also = policy.also
    local tries = 0
    while true do
        tries = tries + 1
        local r1, err, r3 = fn(...)
        if r1 ~= nil or not (transient[err] or (also and also[err])) then
            return r1, err, r3
        end
        if client:is_closed() then
            return nil, "closed"
        end
        if tries >= max_tries then
            return r1, err, r3
        end
        local pause = delay * (0.5 + random())
        if deadline then
            local left = deadline - now()
            if left <= 0 then
                if policy.last_error then
                    return r1, err, r3
                end
                return nil, "timeout"
            end
            pause = min(pause, left)
        end
        client:waiter():sleep(pause)
        delay = min(delay * 2, max_delay)
        if client:state() ~= "connected" then
            client:wait_state(connected_or_closed, remaining(deadline))
        end
        if client:is_closed() then
            return nil, "closed"
        elseif remaining(deadline) == 0 then
            if policy.last_error then
                return r1, err, r3
            end
            return nil, "timeout"
        end
    end
end


-- ---------------------------------------------------------------------------
-- User callbacks.

--- Calls fn(...) protected: an error is logged through client:log("error",
--- "<what> callback failed: ...") with a traceback, never raised.
---@return boolean ok
function _M.call(client, fn, what, ...)
    local ok, err = xpcall(fn, traceback, ...)
    if not ok then
        client:log("error", what .. " callback failed: " .. tostring(err))
    end
    return ok
end
local call = _M.call


--- Calls every function of the array `fns` with the same arguments, each
--- protected as call() does: all of them run even if one raises. The list
--- is read first, so a callback that adds or removes one does not disturb
--- this round.
function _M.call_all(client, fns, what, ...)
    local n = #fns
    local list = {}
    for i = 1, n do
        list[i] = fns[i]
    end
    for i = 1, n do
        call(client, list[i], what, ...)
    end
end


-- ---------------------------------------------------------------------------
-- Deprecations: an old form keeps working for one release and says so once.

-- "old" -> true once warned: per process, whichever client warned first.
local warned = {}


--- Logs through client:log("warn", ...) that `old` is deprecated for `new`,
--- the first time in this process that `old` is used (a form called in a
--- loop must not flood the log). Returns true if it logged now.
---@param client table the client whose logger is told
---@param old string the old form, as users write it ("election:on_revoked")
---@param new string what to write instead ("election:on_lost")
function _M.deprecated(client, old, new)
    if warned[old] then
        return false
    end
    warned[old] = true
    client:log("warn", ("%s is deprecated and goes in the next release: use %s")
                       :format(old, new))
    return true
end


--- Forgets which deprecations were logged (specs: to see one logged once).
function _M.deprecated_reset()
    warned = {}
end


-- ---------------------------------------------------------------------------
-- Scoped holds: lock:run(fn), sem:run(fn), q:process(fn) ...

-- Can a coroutine yield across xpcall? LuaJIT and 5.2+ yes, plain 5.1 no:
-- there fn runs in a coroutine of its own whose yields are passed on
-- (coxpcall's way), so a wait in fn still yields under cqueues.
local YIELDS_ACROSS_PCALL = rawget(_G, "jit") ~= nil or _VERSION ~= "Lua 5.1"
local co_create, co_resume, co_yield, co_status, running =
    coroutine.create, coroutine.resume, coroutine.yield, coroutine.status, coroutine.running

-- coroutine -> the coroutine that runs it as run_held's fn (false: the main one).
local parents = setmetatable({}, { __mode = "k" })


--- The running coroutine, as an owner: inside run_held's fn on Lua 5.1 that
--- of run_held's caller, so a lock's fn still sees the lock held.
function _M.running()
    local co = running()
    while co do
        local p = parents[co]
        if p == nil then
            break
        end
        co = p or nil
    end
    return co
end


local function settle(co, ok, ...)
    if not ok then
        local e = ...
        return false, type(e) == "string" and traceback(co, e) or e
    end
    if co_status(co) == "dead" then
        return true, ...
    end
    if not running() then
        return false, "attempt to yield from outside a coroutine"
    end
    return settle(co, co_resume(co, co_yield(...)))
end

local protected = xpcall
if not YIELDS_ACROSS_PCALL then
    protected = function(fn, _, ...)
        -- a coroutine's body must be a function, not just a callable
        local co = co_create(type(fn) == "function" and fn or function(...) return fn(...) end)
        parents[co] = running() or false
        return settle(co, co_resume(co, ...))
    end
end


local function finish(done, hold, ok, ...)
    local dok, derr, ddetail = done(hold, ok)
    if not ok then
        error((...), 0)
    end
    if dok == nil and derr ~= nil then
        return nil, derr, ddetail
    end
    return ...
end


--- Calls fn(...) protected, then done(hold, ok) whatever happened (ok: fn
--- returned). An error in fn is raised again after done, with its
--- traceback. Else fn's results, or done's nil, err when it failed (a lock
--- lost while fn ran: "lost"). The one body of every recipe's run. On Lua
--- 5.1 fn runs in a coroutine of its own (its yields passed on); running()
--- answers its caller's there.
function _M.run_held(done, hold, fn, ...)
    return finish(done, hold, protected(fn, traceback, ...))
end
local run_held = _M.run_held


--- The body of a recipe's run(fn, timeout?, ...) (lock, multi_lock,
--- semaphore): checks fn and timeout, hold = self:acquire(timeout), then
--- run_held(done, ...): with `pass_hold`, fn(hold, ...) and done(hold)
--- (a lease); else fn(...) and done(self) (a lock's release).
function _M.acquire_run(self, done, pass_hold, fn, timeout, ...)
    check_fn(fn, "run", 1)
    _M.check_timeout(timeout, "run", 2)
    local hold, err, detail = self:acquire(timeout)
    if not hold then
        return nil, err, detail
    end
    if pass_hold then
        return run_held(done, hold, fn, hold, ...)
    end
    return run_held(done, self, fn, ...)
end


--- Rounds of a create-then-look step whose node keeps coming and going
--- between our two requests (someone else creates and deletes it): after
--- that many, give up until the next event or state change brings us back.
_M.MAX_RACES = 5


--- A watch function that sets `ev`. Watch closures are made in a function
--- of their own, never in the frame that waits: in nginx that frame's
--- coroutine may be gone (request aborted) when the watch fires.
function _M.waker(ev)
    return function() ev:set() end
end


-- ---------------------------------------------------------------------------
-- Ids.

--- "<hostname>:<pid>": the default id of a participant (its node's data);
--- Curator's participant id is a free string too.
function _M.default_id()
    local host, pid
    local ok, ffi = pcall(require, "ffi")
    if ok then
        -- Separate cdefs: another module may have declared one of them already.
        pcall(ffi.cdef, "int getpid(void);")
        pcall(ffi.cdef, "int gethostname(char *name, size_t len);")
        local okp, p = pcall(function() return ffi.C.getpid() end)
        pid = okp and tonumber(p) or nil
        local buf = ffi.new("char[256]")
        if pcall(function() return ffi.C.gethostname(buf, 255) end) then
            host = ffi.string(buf)
        end
    end
    if not host or host == "" then
        local f = io.open("/proc/sys/kernel/hostname")
        host = f and f:read("*l") or "localhost"
        if f then f:close() end
    end
    if not pid then
        local f = io.open("/proc/self/stat")
        pid = f and tonumber((f:read("*l") or ""):match("^(%d+)")) or 0
        if f then f:close() end
    end
    return host .. ":" .. tostring(pid)
end


return _M
