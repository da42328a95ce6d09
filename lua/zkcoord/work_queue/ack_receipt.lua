--- zkcoord.work_queue.ack_receipt: an ack's receipt (internal part of
--- zkcoord.work_queue).
--
-- An ack's multi deletes claim and item and creates the persistent
-- <path>/taken/ack-<our claim's czxid> (data: how long it is kept, in
-- seconds). Only the holder of that claim acks under that name, so after a
-- lost reply the receipt tells our ack from another consumer's: there, ours
-- happened; missing while it is surely kept, ours did not. The acker
-- deletes it once it knows (at once after a reply). One an acker left
-- behind (it died, or never asked) is swept by any take that lists it once
-- older than it says it is kept, by its ctime against the ctime of the
-- take's new claim: two server clocks, never ours.
--
-- Under taken/ because a take lists it anyway and it is there whenever an
-- ack can happen (the claim is in it). Items are named entry-... or _c_...
-- (names.lua), never ack-...: a consumer (ours, an older one or kazoo's,
-- which skips the items whose names are under taken/) sees a receipt as a
-- claim of no item. An older client's ack writes none: to us it is just
-- someone else's ack.
local contract = require "zkcoord.contract"

local ipairs, pairs, tonumber, tostring, type = ipairs, pairs, tonumber, tostring, type
local setmetatable = setmetatable
local format, sub, max, huge = string.format, string.sub, math.max, math.huge

local _M = {}

local PREFIX = "ack-"

-- Kept this many session timeouts (or request timeouts, the longer): an
-- ack decides within one request timeout after its session ends, and
-- asks again only while the receipt is surely kept (`surely_kept`).
local KEEP_TIMEOUTS = 10


--- The receipt's path of the ack of our claim with czxid `czxid`.
function _M.path(q, czxid)
    return format("%s/%s%d", q.taken, PREFIX, czxid)
end


--- How long (seconds) a receipt our `client` writes is kept.
function _M.keep(client)
    return KEEP_TIMEOUTS * max(client:session_timeout(), contract.request_timeout(client))
end


--- The multi's op that writes the receipt at `path`, kept `keep` seconds.
function _M.op(path, keep)
    return { op = "create", path = path, data = tostring(keep) }
end


--- May a receipt written at most `age` seconds ago (our clock) be gone
--- by a sweep? Half the time it is kept: a margin for the servers' clocks.
function _M.surely_kept(age, keep)
    return age < keep / 2
end


--- Is the receipt at `path` there, read by `deadline`: true, false, or
--- nil, err.
function _M.read(client, path, deadline)
    local st, err = contract.read_until(client, deadline, "exists", path)
    if st == nil then
        return nil, err
    end
    return st ~= false
end


--- Deletes our receipt at `path` (not waited for; again once connected,
--- in any session: it is persistent).
function _M.drop(client, path)
    client:delete_guaranteed(path, nil, true)
end


-- Per queue object, when each receipt its takes listed may be swept
-- (server seconds; false: its read in flight): a receipt is read once
-- per queue object, not at every take.
local due_of = setmetatable({}, { __mode = "k" })


-- Reads the receipt `name` and deletes it when older than kept at `now`
-- (a server's ctime, seconds); else notes in `due` when it may go.
local function sweep_one(q, due, name, now)
    local client, path = q.client, q.taken .. "/" .. name
    due[name] = false
    client:send("get", path):on_done(function(data, st)
        local keep = data and tonumber(data)    -- data nil: st is the error
        if type(st) ~= "table" then
            due[name] = nil    -- not read (or gone): a later take looks again
        elseif not keep then
            due[name] = huge   -- not a receipt of ours: never swept
        else
            due[name] = st.ctime + keep
            if now > due[name] then
                client:send("delete", path, st.version)
            end
        end
    end)
end


--- Sweeps the receipts of the listing `taken` (of q's taken/) kept past
--- their time at `now`, the ctime (seconds) of a claim just made: a get
--- for each one not read yet or due, then a delete, nothing waited for.
function _M.sweep(q, taken, now)
    local due = due_of[q]
    if not due then
        due = {}
        due_of[q] = due
    end
    local listed = {}
    for _, name in ipairs(taken) do
        if sub(name, 1, #PREFIX) == PREFIX then
            listed[name] = true
            local at = due[name]
            if at == nil or at and now > at then
                sweep_one(q, due, name, now)
            end
        end
    end
    for name in pairs(due) do
        if not listed[name] then
            due[name] = nil    -- gone
        end
    end
end


return _M
