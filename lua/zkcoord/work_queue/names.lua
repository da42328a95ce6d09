--- zkcoord.work_queue.names: the queue's nodes, the items' names and their
--- taking order (internal part of zkcoord.work_queue).
--
-- Items are named as kazoo's LockingQueue names them, entry-<ppp>-<seq>
-- (priority in three digits, then the server's ten), so kazoo's consumer,
-- which sorts the raw names, takes ours and its own in one order. Items
-- named _c_<uuid>-p<ppp>-entry-<seq> (this library's names before) are
-- still taken, in the same order.
local util = require "zkcoord.util"

local remaining = util.remaining
local type, ipairs, tonumber = type, ipairs, tonumber
local match, format, sort = string.match, string.format, table.sort

local _M = {}

_M.DEFAULT_PRIORITY = 100          -- kazoo's


--- The name prefix of a new item of priority `prio` (the server appends
--- the sequence number).
function _M.marker(prio)
    return format("entry-%03d-", prio)
end


--- Is `prio` a priority (an integer 0..999)?
function _M.is_priority(prio)
    return type(prio) == "number" and prio % 1 == 0 and prio >= 0 and prio <= 999
end


-- Priority and sequence number of an item's name (ours or kazoo's).
local function item_key(name)
    local p, s = match(name, "^_c_.*%-p(%d%d%d)%-entry%-(%d+)$")
    if not p then
        p, s = match(name, "^entry%-(%d%d%d)%-(%d+)$")
    end
    if p then
        return tonumber(p), tonumber(s)
    end
end


local function by_key(a, b)
    if a.priority ~= b.priority then
        return a.priority < b.priority
    end
    return a.seq < b.seq
end


--- The items of a listing, in taking order: { name =, priority =, seq = }.
function _M.sorted(names)
    local out = {}
    for _, name in ipairs(names) do
        local p, s = item_key(name)
        if p then
            out[#out + 1] = { name = name, priority = p, seq = s }
        end
    end
    sort(out, by_key)
    return out
end


--- Makes two of a queue's nodes (entries/, taken/, puts/), with their
--- parents, by `deadline`: a take needs entries/ and taken/ (no children
--- watch is set on a missing node), a put entries/ and puts/. true, or
--- nil, err.
function _M.make_paths(client, deadline, a, b)
    local f1 = client:send("create", a, nil, { parents = true })
    local f2 = client:send("create", b, nil, { parents = true })
    local ok1, e1 = f1:wait(remaining(deadline))
    local ok2, e2 = f2:wait(remaining(deadline))
    local err = not ok1 and e1 ~= "nodeexists" and e1 or not ok2 and e2 ~= "nodeexists" and e2
    if err then
        return nil, err
    end
    return true
end


--- How many of a listing's names are items.
function _M.count(names)
    local n = 0
    for _, name in ipairs(names) do
        if item_key(name) then
            n = n + 1
        end
    end
    return n
end


return _M
