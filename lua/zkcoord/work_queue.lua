--- zkcoord.work_queue: items many producers put and many consumers take,
--- each taken by one live consumer at a time (kazoo's LockingQueue).
--
--   local q = client:work_queue("/jobs")
--   q:put("resize img-42", { priority = 10 })      -- lower first, FIFO within a priority
--   local item, err = q:take(30)                    -- waits without polling
--   if item then work(item.data) item:ack() end     -- or item:release(): back to the queue
--
-- Node layout (kazoo's LockingQueue, so kazoo consumers take our items and
-- we take theirs): items are persistent-sequential nodes under
-- <path>/entries, named and ordered as work_queue/names.lua says; a put
-- makes its item with a receipt under <path>/puts (work_queue/put.lua); a
-- consumer claims an item with the ephemeral <path>/taken/<item name>
-- (work_queue/claim.lua), and acks or releases it (work_queue/item.lua);
-- an ack writes its receipt <path>/taken/ack-<claim czxid> with its
-- deletes (work_queue/ack_receipt.lua).
-- A consumer whose session ends loses its claims, and their items go back
-- to the queue.
--
-- Waiting: take() lists entries and claims with one watch each (one round
-- trip, pipelined); a new item or a claim going wakes it. Every waiting
-- consumer wakes on every change: consumers are few next to items.
--
-- Connection loss ("suspended"): claims, items and receipts stay; take()
-- waits for the connection within its timeout. Session loss ("lost"): our
-- claims are gone; item:ack() and item:release() on them return nil,
-- "lost", except an ack whose outcome the session did not live to tell:
-- its receipt decides it.
local core = require "zkcoord.core"
local util = require "zkcoord.util"
local errors = require "zkcoord.errors"
local names = require "zkcoord.work_queue.names"
local puts = require "zkcoord.work_queue.put"
local items = require "zkcoord.work_queue.item"
local contract = require "zkcoord.contract"

local now = core.now
local type, ipairs, tostring = type, ipairs, tostring
local setmetatable = setmetatable
local argerror, remaining, retry = util.argerror, util.remaining, util.retry
local UNTIL_DEADLINE = util.UNTIL_DEADLINE

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = util.self_checker(mt, "work queue", "q")

local OPT_KEYS = { "id" }
local PUT_KEYS = { "priority", "timeout" }


---@class zkcoord.work_queue_opts
---@field id string? this consumer's id, the data of its claims (default "<hostname>:<pid>")

--- client:work_queue(path, opts) -> q (no server state until put or take).
function _M.new(client, path, opts)
    contract.check_path(path, "work_queue", 1)
    opts = util.check_opts(opts, OPT_KEYS, "work_queue", 2)
    if opts.id ~= nil and type(opts.id) ~= "string" then
        argerror(2, "work_queue", "id must be a string, got " .. type(opts.id))
    end
    local base = path == "/" and "" or path
    return setmetatable({
        client = client,
        path = path,
        entries = base .. "/entries",
        taken = base .. "/taken",
        puts = base .. "/puts",
        id = opts.id or util.default_id(),
    }, mt)
end


--- Puts an item. opts.priority: 0..999, lower first (default 100);
--- opts.timeout: seconds (default the session timeout).
---@return true|nil ok, string? err
function _M:put(data, opts)
    check_self(self, "put")
    util.check_string(data, "put", 1, "data")
    opts = util.check_opts(opts, PUT_KEYS, "put", 2)
    local prio = opts.priority or names.DEFAULT_PRIORITY
    if not names.is_priority(prio) then
        argerror(2, "put", "priority must be an integer from 0 to 999, got " .. tostring(prio))
    end
    local timeout = util.check_timeout(opts.timeout, "put", 2)
    local client = self.client
    if timeout == nil then
        timeout = client:session_timeout()
    elseif timeout == 0 then
        timeout = contract.request_timeout(client)    -- 0: one try, bounded like a request
    end
    return puts.put(self, data, prio, now() + timeout)
end


--- How many items are in the queue (taken ones included, until acked).
---@return integer|nil n, string? err
function _M:len()
    check_self(self, "len")
    local listed, err = self.client:children(self.entries)
    if not listed then
        return err == "nonode" and 0 or nil, err ~= "nonode" and err or nil
    end
    return names.count(listed)
end


function _M:_unwatch(wake)
    self.client:remove_watches(self.entries, wake)
    self.client:remove_watches(self.taken, wake)
end


-- Lists entries and claims, both with the watch `wake` (one round trip):
-- names, taken; or nil, err with the watches removed.
function _M:_list(wake, deadline)
    local client = self.client
    local fe = client:send("children", self.entries, wake)
    local ft = client:send("children", self.taken, wake)
    local listed, err = fe:wait(remaining(deadline))
    local taken, terr = ft:wait(remaining(deadline))
    if listed and taken then
        return listed, taken
    end
    self:_unwatch(wake)
    return nil, listed and terr or err
end


-- One look: lists (setting `wake`), then claims the first item nobody
-- holds. The item; false when none is free (wait for `wake`); or nil, err
-- with the watches removed. Retried as a whole on a transient error.
function _M:_try_take(wake, deadline)
    local listed, taken = self:_list(wake, deadline)
    if not listed and taken == "nonode" then
        local ok, err = names.make_paths(self.client, deadline, self.entries, self.taken)
        if not ok then
            return nil, err
        end
        listed, taken = self:_list(wake, deadline)
    end
    if not listed then
        return nil, taken
    end
    local held = {}
    for _, n in ipairs(taken) do held[n] = true end
    for _, e in ipairs(names.sorted(listed)) do
        if not held[e.name] then
            local item, err = items.claim(self, e, deadline, taken)
            if item ~= false then
                self:_unwatch(wake)
                return item, err
            end
        end
    end
    return false
end


--- Takes the first item nobody holds, waiting at most `timeout` seconds
--- (nil: as long as it takes; 0: only what is there now).
---@return table|nil item, string? err "timeout" | "closed" | a ZooKeeper code
function _M:take(timeout)
    check_self(self, "take")
    util.check_timeout(timeout, "take", 1)
    local client = self.client
    local deadline = timeout and now() + timeout or math.huge
    local down = timeout == 0 and errors.of_state(client:state())
    if down then
        return nil, down    -- only looks, and no look can go out now
    end
    -- take(0) waits for no item, but for the round trips of its look.
    local look = timeout == 0 and now() + contract.request_timeout(client) or deadline
    while true do
        if contract.is_closed(client) then
            return nil, "closed"
        end
        -- Both listings carry a watch: a new item or a claim going wakes us.
        local ev = client:waiter():event()
        local wake = util.waker(ev)
        local item, err = retry(client, look, UNTIL_DEADLINE, self._try_take, self, wake, look)
        if item ~= false then
            return item, err
        end
        if remaining(deadline) == 0 or not ev:wait(remaining(deadline)) then
            self:_unwatch(wake)
            return nil, contract.is_closed(client) and "closed" or "timeout"
        end
    end
end


-- After process()'s fn: ack when it returned, else give the item back.
local function settle_item(item, ok)
    if ok then
        return item:ack()
    end
    return item:release()
end


--- Takes an item (as take(timeout)) and runs fn(data, item) protected:
--- when fn returns, the item is acked, when it raises, given back (and the
--- error raised again, with its traceback, after that). fn's results;
--- nil, err when no item came ("timeout" ...) or the ack failed ("lost":
--- our session ended, the item is back in the queue for another; "unknown":
--- see Item:ack).
---@param fn function fn(data, item)
---@param timeout number? as take's
---@return any ... fn's results, or nil, err
function _M:process(fn, timeout)
    check_self(self, "process")
    util.check_fn(fn, "process", 1)
    util.check_timeout(timeout, "process", 2)
    local item, err, detail = self:take(timeout)
    if not item then
        return nil, err, detail
    end
    return util.run_held(settle_item, item, fn, item.data, item)
end


_M.mt = mt
_M.item_mt = items.mt
return _M
