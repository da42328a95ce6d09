--- zkcoord.client.requests: sending one request and retrying reads
--- (client methods).
--
-- Owns `_request` (submit a C core method, record the pending request,
-- return its future), the registration of the watch a read sets, the size
-- check of a request's data, and the retry loop of idempotent reads
-- (`_retrying_until`, and `read_until` for recipes).
local core = require "zkcoord.core"
local errors = require "zkcoord.errors"
local _M = require "zkcoord.client.class"
local future = require "zkcoord.client.future"
local acl = require "zkcoord.client.acl"
local options = require "zkcoord.client.options"
local argerror = require("zkcoord.client.checks").argerror

local now, random = core.now, core.random
local errname, retryable = errors.name, errors.retryable
local new_entry, new_future, failed_future = future.new_entry, future.new, future.failed
local type, min = type, math.min
local PACKET_OVERHEAD = options.PACKET_OVERHEAD

local M = {}


--- Submits core method `method` and returns a future for its pending
--- record, or a future that yields nil, err if submission failed. `finish`
--- converts a completed record into results.
function _M:_request(finish, method, path, ...)
    local s = self._s
    local id, rc
    if self._closed then
        rc = "closed"
    elseif not s then
        rc = "connectionloss"
    elseif type(path) == "string" and #path > self._max_path then
        -- The server would drop the connection on such a packet, and every
        -- request in flight with it.
        return failed_future(self, "toolarge", ("a path of %d bytes exceeds ZooKeeper's "
                             .. "request limit of %d bytes (jute.maxbuffer)")
                             :format(#path, self._opts.max_packet_size))
    else
        id, rc = s[method](s, path, ...)
        if not id then
            rc = errname(rc)
        end
    end
    if not id then
        return failed_future(self, rc)
    end
    local p = new_entry(id, self._serial)
    self._pending[id] = p
    return new_future(self, p, finish)
end


-- `arg` (internal, for recipes) is passed to fn after the event, so a
-- recipe can use one static function instead of a closure per watch.
function _M:_register_watch(fut, fn, path, kind, arg)
    local p = fut.entry
    if fn and p then
        p.watch = kind
        self._watches[p.id] = { fn = fn, path = path, kind = kind, arg = arg }
    end
end


--- `data` as a request argument: nil stays nil; raises on a non-string;
--- nil, "toolarge", detail when the packet would exceed max_packet_size.
function _M:_data_arg(data, fname, n, path, acl_entries)
    -- type(), not `== nil`: a NULL cdata compares equal to nil in LuaJIT.
    if type(data) == "nil" then
        return nil
    end
    if type(data) ~= "string" then
        argerror(n, fname, "data must be a string or nil, got " .. type(data), 3)
    end
    local size = PACKET_OVERHEAD + #self._chroot + #path + #data + acl.bytes(acl_entries)
    if size > self._opts.max_packet_size then
        return nil, "toolarge", ("%d bytes of data at %s exceed ZooKeeper's request limit "
                                 .. "of %d bytes (jute.maxbuffer)")
                                :format(#data, path, self._opts.max_packet_size)
    end
    return data
end


--- The size a request's path and data add up to (for a multi's total).
function _M:_packet_size(path, data, acl_entries)
    return PACKET_OVERHEAD + #self._chroot + #path + #(data or "")
           + (acl_entries and acl.bytes(acl_entries) or 0)
end


local function connected_or_closed(st)
    return st == "connected" or st == "closed"
end


--- Runs `send_op(self, ...)` (which returns a future) again on retryable
--- errors, with jittered exponential backoff, while the client is open.
--- With a `deadline` (core.now() time) every wait ends by then, and a read
--- that has not succeeded by then returns nil, "timeout": a recipe's
--- acquire(t) must not overrun t by the whole retry policy.
--- Fixed arity (a read takes at most path, watch, arg; it returns at most
--- value, stat or nil, err, detail): varargs here would keep LuaJIT from
--- compiling the read path (NYI: VARG).
--- `last_err`: at the deadline, report the last try's error, if any,
--- rather than "timeout" (a sync read bounded by request_timeout).
function _M:_retrying_until(deadline, send_op, a, b, c, last_err)
    local rp = self._retry
    local delay = rp.base_delay
    local tries = 0
    local err
    while true do
        tries = tries + 1
        local left = deadline and deadline - now()
        if left and left <= 0 then
            return nil, last_err and err or "timeout"
        end
        local r1, r3
        r1, err, r3 = send_op(self, a, b, c):wait(left)
        if r1 ~= nil or not retryable[err] or tries >= rp.max_tries or self._closed then
            return r1, err, r3
        end
        local pause = delay * (0.5 + random())
        if deadline then
            pause = min(pause, deadline - now())
        end
        if pause > 0 then
            self._waiter:sleep(pause)
        end
        delay = min(delay * 2, rp.max_delay)
        self:wait_state(connected_or_closed, deadline and deadline - now())
    end
end


return M
