--- zkcoord.util.held: scoped holds, the one body of every recipe's run:
--- lock:run(fn), sem:run(fn), q:process(fn) ... (internal).
local compat = require "zkcoord.compat"
local args = require "zkcoord.util.args"

local type, error, rawget, setmetatable = type, error, rawget, setmetatable
local xpcall, traceback = compat.xpcall, debug.traceback
local check_fn = args.check_fn

local _M = { _VERSION = require("zkcoord.version") }


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
    args.check_timeout(timeout, "run", 2)
    local hold, err, detail = self:acquire(timeout)
    if not hold then
        return nil, err, detail
    end
    if pass_hold then
        return run_held(done, hold, fn, hold, ...)
    end
    return run_held(done, self, fn, ...)
end
return _M
