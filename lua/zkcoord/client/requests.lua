--- zkcoord.client.requests: sending one request and retrying reads
--- (client methods).
--
-- Owns `_request` (submit a C core method, record the pending request,
-- return its future), the registration of the watch a read sets, the size
-- check of a request's data, and the retry of idempotent reads through
-- util.retry (`_read` for the sync reads and `read_until`; `retry`, the
-- contract method, for what builds on the client).
local core = require "zkcoord.core"
local errors = require "zkcoord.errors"
local _M = require "zkcoord.client.class"
local future = require "zkcoord.client.future"
local acl = require "zkcoord.client.acl"
local options = require "zkcoord.client.options"
local args = require "zkcoord.util.args"
local retries = require "zkcoord.util.retry"
local argerror = args.argerror

local now = core.now
local errname = errors.name
local retry = retries.retry
local check_self = require("zkcoord.client.checks").check_self
local new_entry, new_future, failed_future = future.new_entry, future.new, future.failed
local type = type
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
    p.op, p.path, p.sent = method, path, now()
    self._pending[id] = p
    local sent = self._sent
    sent[method] = (sent[method] or 0) + 1
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


--- Contract, for what builds on the client: util.retry(self, deadline,
--- policy, fn, ...) with this client's connect-time `retry`
--- policy: fn again on a transient error (errors.transient), after a
--- jittered backoff and once connected, until it succeeds, fails
--- otherwise, max_tries runs out, the client closes (nil, "closed") or
--- `deadline` (a core.now() time; nil: max_tries alone) passes (nil,
--- "timeout"). Only for idempotent steps: a write whose outcome is unknown
--- (errors.unknown_outcome) must not be sent again blindly.
function _M:retry(deadline, fn, ...)
    check_self(self, "retry")
    -- NaN: tried once, then its pause raised from 'sleep'
    if deadline ~= nil and (type(deadline) ~= "number" or deadline ~= deadline) then
        argerror(1, "retry", "deadline must be a number (a zkcoord.now() time) or nil")
    end
    if not args.is_callable(fn) then
        argerror(2, "retry", "fn must be a function, got " .. type(fn))
    end
    return retry(self, deadline, self._retry, fn, ...)
end


-- One try of a read: send_op(self, a, b, c) (a `send` function, which
-- returns a future) waited on until `deadline`; nil, "timeout" without
-- sending once it has passed.
local function read_once(self, deadline, send_op, a, b, c)
    local left = deadline and deadline - now()
    if left and left <= 0 then
        return nil, "timeout"
    end
    return send_op(self, a, b, c):wait(left)
end


--- Reads through send_op (a `send` function) as the sync methods do: again
--- on transient errors under `policy` (the client's retry policy), until
--- `deadline` (nil: the policy only). A read takes at most path, watch,
--- arg.
function _M:_read(deadline, policy, send_op, a, b, c)
    return retry(self, deadline, policy, read_once, self, deadline, send_op, a, b, c)
end


return M
