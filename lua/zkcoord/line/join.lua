--- zkcoord.line.join: positions of one client joining one line together
--- share one listing (internal part of zkcoord.line).
--
-- A join sends its create at once; the listing that must follow it is
-- shared: the first join of a batch defers one `children` request to the
-- end of the current turn of the waiter (waiter:defer: after the other
-- coroutines or nginx requests that run now have sent their creates), and
-- every join of the batch reads its answer. One session runs its requests
-- in order, so that listing holds every create sent before it. A join
-- whose create is answered before the deferred send ran sends it itself.
-- 10,000 coroutines joining at once cost a few listings, not 10,000, and
-- a built-in rule parses and sorts the listing once for all of them
-- (`view`): each join finds its index instead of reading every name.
-- Joins that do not come in one turn (nginx requests, accepted one or a
-- few per turn of the event loop) share one too: while a listing of the
-- parent is on its way, a new batch stays open and is sent by its first
-- join whose create was answered, which comes after that listing's answer
-- (one session answers in order). So one listing is in flight at a time:
-- 10,000 requests joining one by one had each turn send a listing of up
-- to 10,000 names, thousands of them, and the server fell behind for the
-- whole session timeout.
local drivers = require "zkcoord.line.driver"
local now = require("zkcoord.core").now

local setmetatable, max = setmetatable, math.max

local _M = {}

-- client -> { [parent] = the batch still open for joins }
local OPEN = setmetatable({}, { __mode = "k" })
-- client -> { [parent] = the batch whose listing was sent last }
local SENT = setmetatable({}, { __mode = "k" })

local function of(registry, client)
    local t = registry[client]
    if not t then
        t = {}
        registry[client] = t
    end
    return t
end


-- Sends the batch's listing (once) and closes it to new joins.
local function flush(b)
    if b.f then
        return
    end
    local open = OPEN[b.client]
    if open and open[b.parent] == b then
        open[b.parent] = nil
    end
    b.f = b.client:send("children", b.parent)
    of(SENT, b.client)[b.parent] = b
end


--- The open batch of `client`'s joins of `parent`, for a join whose create
--- was just sent.
function _M.batch(client, parent)
    local open = of(OPEN, client)
    local b = open[parent]
    if not b then
        local sent = of(SENT, client)[parent]
        local busy = sent and not sent.f:is_done() and sent or nil
        b = { client = client, parent = parent, f = nil, views = nil, n = 0, after = busy }
        open[parent] = b
        if not busy then
            client:waiter():defer(flush, b)
        end
    end
    b.n = b.n + 1    -- joins in the batch (one alone reads the listing in one pass)
    return b
end


--- The batch's listing (names, or nil, err), waited for at most `timeout`.
function _M.names(b, timeout)
    local after = b.after
    if after and not b.f then
        b.after = nil
        if not after.f:is_done() then   -- answered before our create, as a rule
            local t0 = now()
            after.f:wait(timeout)
            timeout = timeout and max(0, timeout - (now() - t0))
        end
    end
    flush(b)
    return b.f:wait(timeout)
end


-- client -> { [parent] = the view made last (weak: as long as its batch
-- lives) }: the next batch's view sorts only the nodes made since.
local LAST = setmetatable({}, { __mode = "k" })

local new_table = (pcall(require, "table.new")) and require("table.new")
                  or function() return {} end


--- The batch's listing parsed for driver `d` (one with a scan: its rule
--- is a built-in, which reads the entries and changes nothing), once per
--- batch: { entries =, index = name -> position in entries }. The view
--- made last of the same line and driver is its start (order.sorted): 10,000
--- waiters joining 500 at a time sorted 10,000 names per batch before.
function _M.view(b, d, names)
    local views = b.views
    if not views then
        views = setmetatable({}, { __mode = "k" })
        b.views = views
    end
    local v = views[d]
    if not v or v.names ~= names then
        local last = LAST[b.client]
        if not last then
            last = setmetatable({}, { __mode = "v" })
            LAST[b.client] = last
        end
        local before = last[b.parent]
        if before and before.d ~= d then
            before = nil
        end
        local entries = drivers.sorted(d, b.parent, names, before)
        local index = new_table(0, #entries)
        for i = 1, #entries do
            index[entries[i].name] = i
        end
        v = { entries = entries, index = index, names = names, d = d }
        if not views[d] then
            views[d] = v    -- only the batch's own listing is shared
        end
        last[b.parent] = v
    end
    return v
end


return _M
