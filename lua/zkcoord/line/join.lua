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
local drivers = require "zkcoord.line.driver"

local setmetatable = setmetatable

local _M = {}

-- client -> { [parent] = the batch still open for joins }
local OPEN = setmetatable({}, { __mode = "k" })


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
end


--- The open batch of `client`'s joins of `parent`, for a join whose create
--- was just sent.
function _M.batch(client, parent)
    local open = OPEN[client]
    if not open then
        open = {}
        OPEN[client] = open
    end
    local b = open[parent]
    if not b then
        b = { client = client, parent = parent, f = nil, views = nil, n = 0 }
        open[parent] = b
        client:waiter():defer(flush, b)
    end
    b.n = b.n + 1    -- joins in the batch (one alone reads the listing in one pass)
    return b
end


--- The batch's listing (names, or nil, err), waited for at most `timeout`.
function _M.names(b, timeout)
    flush(b)
    return b.f:wait(timeout)
end


--- The batch's listing parsed for driver `d` (one with a scan: its rule
--- is a built-in, which reads the entries and changes nothing), once per
--- batch: { entries =, index = name -> position in entries }.
function _M.view(b, d, names)
    local views = b.views
    if not views then
        views = setmetatable({}, { __mode = "k" })
        b.views = views
    end
    local v = views[d]
    if not v or v.names ~= names then
        local entries = drivers.parse(d, b.parent, names)
        local index = {}
        for i = 1, #entries do
            index[entries[i].name] = i
        end
        v = { entries = entries, index = index, names = names }
        if not views[d] then
            views[d] = v    -- only the batch's own listing is shared
        end
    end
    return v
end


return _M
