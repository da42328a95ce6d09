--- zkcoord.util.retry: the one retry helper (internal).
--
-- A retry goes through retry() (errors.lua says which errors are worth
-- one): no recipe has a loop of its own with its own bound.
local core = require "zkcoord.core"
local errors = require "zkcoord.errors"
local deadline_ = require "zkcoord.util.deadline"
local contract = require "zkcoord.client.contract"

local now, random = core.now, core.random
local min = math.min
local transient = errors.transient
local remaining = deadline_.remaining

local _M = { _VERSION = require("zkcoord.version") }


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
        if contract.is_closed(client) then
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
            contract.wait_state(client, connected_or_closed, remaining(deadline))
        end
        if contract.is_closed(client) then
            return nil, "closed"
        elseif remaining(deadline) == 0 then
            if policy.last_error then
                return r1, err, r3
            end
            return nil, "timeout"
        end
    end
end


--- Rounds of a create-then-look step whose node keeps coming and going
--- between our two requests (someone else creates and deletes it): after
--- that many, give up until the next event or state change brings us back.
_M.MAX_RACES = 5

return _M
