--- zkcoord.client.future: the pending-request record and the future a
--- caller holds for it (internal; futures are public objects).
--
-- Owns the one definition of the pending record (`new_entry`), how a reply
-- completes it (`complete`), and the Future class: wait, on_done, on_late,
-- is_done, ready. Reads the client only through its contract (waiter,
-- is_closed, request_timeout).
local errors = require "zkcoord.errors"
local args = require "zkcoord.util.args"
local compat = require "zkcoord.compat"
local contract = require "zkcoord.client.contract"

local errname = errors.name
local check_wait = args.check_wait
local type, error, select, getmetatable, setmetatable =
    type, error, select, getmetatable, setmetatable
local unpack = compat.unpack

local RC_OK = 0

local _M = {}

local Future = {}
local future_mt = { __index = Future }
_M.mt = future_mt


--- The pending-request record: one per request sent, held by the client
--- under its id until the reply comes, and by the future. Every field is
--- set here (false until known), so no caller adds its own.
---@param id number the request id the C core returned
---@param serial integer the session serial it was sent in
--- @local
function _M.new_entry(id, serial)
    return {
        id = id,
        serial = serial,
        done = false,     -- the reply came (or the client closed)
        rc = false,       -- ZooKeeper's return code, once done
        value = false,    -- data, or the created path
        stat = false,     -- the node's stat table, when the reply has one
        extra = false,    -- children, ACL entries or multi results
        ev = false,       -- the waiter events of the callers waiting for it now,
                          -- a list linked by ev.next_waiter (several coroutines
                          -- may wait on one future)
        late = false,     -- fn(entry, ctx) for a reply nobody waits for
        ctx = false,      -- late's context: what its caller needs to act on it
        lost = false,     -- why its session ended while it was in flight
        watch = false,    -- the kind of watch it sets ("exists", "get", ...)
        op = false,       -- the operation and its path, and when it was sent
        path = false,     -- (zkcoord.metrics)
        sent = 0,
    }
end


--- Completes `p` with a reply: wakes every caller waiting for it, or,
--- when none does, hands it to its late handler through `waiter:defer`
--- (also when the callers' waits were abandoned: their coroutines are
--- gone).
--- @local
function _M.complete(p, rc, value, stat, extra, waiter)
    p.done = true
    p.rc, p.value, p.stat, p.extra = rc, value, stat, extra
    local woken = false
    local ev = p.ev
    while ev do
        if not ev.abandoned then
            ev:set()
            woken = true
        end
        ev = ev.next_waiter
    end
    if not woken and p.late then
        waiter:defer(p.late, p, p.ctx)
    end
end


-- The code of a failed entry; a request of a session that ended reports
-- why it ended rather than our own close of that session.
function _M.entry_err(p)
    local e = errname(p.rc)
    if e == "runtimeinconsistency" then
        -- libzookeeper fails every pending request with this code when it
        -- drops a connection on an out-of-order reply (Java's client says
        -- CONNECTIONLOSS there): the outcome is unknown, as after a loss.
        -- (A failed multi's own code is its failing op's, never this one.)
        e = "connectionloss"
    end
    if p.lost and (e == "closed" or e == "connectionloss") then
        return p.lost
    end
    return e
end
local entry_err = _M.entry_err


local function pack(...)
    return { n = select("#", ...), ... }
end
_M.pack = pack


local function not_a_future(fname)
    error(("'%s' must be called on a future (use future:%s(...))"):format(fname, fname), 3)
end


-- A future is a plain table, no closure (LuaJIT does not compile closure
-- creation, and futures are made per request): `entry` (the pending
-- record) with a static `finish` converter; or `err`, `detail` (failed
-- before it was sent); or `compose(fut, timeout)` for operations made of
-- several requests.

--- A future for pending record `p`; `finish(p)` turns it into results.
--- @local
function _M.new(client, p, finish)
    return setmetatable({ client = client, entry = p, finish = finish }, future_mt)
end


--- A future of a request that failed before it was sent.
--- @local
function _M.failed(client, err, detail)
    return setmetatable({ client = client, err = err, detail = detail }, future_mt)
end


--- A future of an operation made of several requests.
--- @local
function _M.composite(client, compose)
    return setmetatable({ client = client, compose = compose }, future_mt)
end


-- Takes event `ev` out of `p`'s waiting list.
local function unlink(p, ev)
    if p.ev == ev then
        p.ev = ev.next_waiter
        return
    end
    local prev = p.ev
    while prev and prev.next_waiter ~= ev do
        prev = prev.next_waiter
    end
    if prev then
        prev.next_waiter = ev.next_waiter
    end
end


-- Waits for pending record `p`. A wait that gives up leaves the record to
-- its late handler (if any), so a reply that still arrives is not lost.
local function await(client, p, timeout)
    if not p.done then
        local ev = client:waiter():event()
        -- ev.entry: a waiter whose caller is gone (an aborted nginx
        -- request) hands the record to its late handler (abandon in
        -- wait/ngx/ticker.lua).
        ev.entry, ev.next_waiter = p, p.ev
        p.ev = ev
        ev:wait(timeout)
        unlink(p, ev)
        if not p.done then
            return nil, contract.is_closed(client) and "closed" or "timeout"
        end
        -- Taken: another waiter of it, abandoned later with its event
        -- set, must not hand the reply to the late handler too.
        p.late = false
    end
    return true
end


--- Waits for the result (at most `timeout` seconds, default the client's
--- request_timeout) and returns it as the synchronous method would.
function Future:wait(timeout)
    -- A hot path: one metatable test, one type test and one comparison
    -- (written `not (t >= 0)` so that NaN fails it).
    if getmetatable(self) ~= future_mt then
        not_a_future("wait")
    end
    if timeout ~= nil and (type(timeout) ~= "number" or not (timeout >= 0)) then  -- luacheck: ignore 581
        check_wait(timeout, "wait", 1)      -- raises, in the library's one wording
    end
    local r = self.results
    if r then
        return unpack(r, 1, r.n)
    end
    local p = self.entry
    if self.compose then
        r = pack(self.compose(self, timeout))
    elseif not p then
        r = { n = 3, nil, self.err, self.detail }
    else
        local client = self.client
        local ok, err = await(client, p, timeout or contract.request_timeout(client))
        if not ok then
            r = { n = 2, nil, err }
        elseif self.finish then
            r = pack(self.finish(p))
        elseif p.rc ~= RC_OK then
            r = { n = 2, nil, entry_err(p) }
        else
            r = { n = 1, true }
        end
    end
    self.results = r
    return unpack(r, 1, r.n)
end


--- Calls fn(results...) once the reply is there, without waiting for it
--- (from the callback runner, never from inside the drain). Waiting on the
--- future afterwards is still allowed and returns the same results.
function Future:on_done(fn)
    if getmetatable(self) ~= future_mt then
        not_a_future("on_done")
    end
    args.check_fn(fn, "on_done")
    local p = self.entry
    if p and not p.done then
        p.late = function()
            fn(self:wait(0))
        end
    else
        -- Not submitted (no session) or already complete: deliver deferred.
        self.client:waiter():defer(function()
            fn(self:wait(0))
        end)
    end
    return self
end


--- Contract, for recipes: a reply that arrives while nobody waits for it
--- (the caller gave up, or never waited) goes to fn(reply, ctx), from the
--- callback runner. `reply` is the pending record: rc, value, stat, extra,
--- serial (the session it was sent in), lost (why that session ended).
--- Returns false, and fn is never called, when the request was not sent.
---@return boolean sent
--- @local
function Future:on_late(fn, ctx)
    if getmetatable(self) ~= future_mt then
        not_a_future("on_late")
    end
    local p = self.entry
    if not p then
        return false
    end
    p.late, p.ctx = fn, ctx
    return true
end


--- Contract, for the client: waits (at most `timeout` seconds) until the
--- result is there, without taking it, so that a caller may wait again
--- (a timed-out wait() keeps its "timeout"). True when wait() returns at
--- once. A composed future has no reply of its own to wait for: it waits
--- as wait() does.
---@return boolean
--- @local
function Future:ready(timeout)
    if getmetatable(self) ~= future_mt then
        not_a_future("ready")
    end
    local p = self.entry
    if self.results or not p then
        return true
    elseif self.compose then
        self:wait(timeout)
        return true
    end
    return (await(self.client, p, timeout)) == true
end


--- Is the result there, so that wait() returns at once? A request that
--- failed before it was sent is done.
---@return boolean
function Future:is_done()
    if getmetatable(self) ~= future_mt then
        not_a_future("is_done")
    end
    if self.results then
        return true
    end
    local p = self.entry
    if p then
        return p.done
    end
    return self.compose == nil
end


return _M
