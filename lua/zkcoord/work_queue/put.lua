--- zkcoord.work_queue.put: putting an item, and its receipt (internal part
--- of zkcoord.work_queue).
--
-- A put is one multi: the item and its receipt <path>/puts/_c_<uuid>-put,
-- an ephemeral node of the putting session, deleted once the put is known
-- to have happened. A put whose reply was lost asks the receipt, once
-- connected again: only we delete it, so it is there exactly when the put
-- happened, even when a consumer took and acked the item meanwhile. The
-- receipt and the item are made by one transaction, so they share a
-- czxid: a put given up on is undone by deleting the item with the
-- receipt's czxid. Only when the session ended with the put in flight (the
-- receipt went with it) can the outcome not be learnt: the put is sent
-- again, and the item may be there twice (the one case where an item may
-- be delivered twice).
local core = require "zkcoord.core"
local util = require "zkcoord.util"
-- A write whose reply was lost may have happened (unknown_outcome): look
-- before sending it again.
local errors = require "zkcoord.errors"
local names = require "zkcoord.work_queue.names"

local unknown_outcome = errors.unknown_outcome
local uuid = core.uuid
local ipairs, sub = ipairs, string.sub
local remaining, retry = util.remaining, util.retry
local UNTIL_DEADLINE, MAX_RACES = util.UNTIL_DEADLINE, util.MAX_RACES

local _M = {}


-- Once connected again in session `sid` (never, if it ends first): fn().
-- For what a write whose outcome we never learnt may have left behind.
local function when_back(client, sid, fn)
    local listener
    local function try(state)
        if client:session_id() ~= sid or state == "closed" or state == "lost" then
            client:remove_listener(listener)
        elseif state == "connected" then
            client:remove_listener(listener)
            fn()
        end
    end
    listener = client:on_state(try)
    try(client:state())
end


-- Deletes the item named `marker`<seq> that was created with zxid
-- `czxid` (its receipt's: one multi made both), if it is still there. One
-- listing, then a pipelined exists per candidate; nothing waits.
local function drop_item_of(q, marker, czxid)
    local client = q.client
    client:send("children", q.entries):on_done(function(listed)
        for _, name in ipairs(listed or {}) do
            if sub(name, 1, #marker) == marker then
                local path = q.entries .. "/" .. name
                client:send("exists", path):on_done(function(st)
                    if st and st.czxid == czxid then
                        client:delete_guaranteed(path, nil, true)
                    end
                end)
            end
        end
    end)
end


-- A put we gave up on ("timeout") is undone if it happened after all: its
-- item (when the reply was lost, the one with the receipt's czxid) and
-- its receipt deleted, as the caller was told it failed.
local function undo_put(q, sid, marker, receipt, made, err)
    local client = q.client
    if made then
        client:delete_guaranteed(made[1].path, nil, true)
        client:delete_guaranteed(receipt)
    elseif unknown_outcome[err] then
        when_back(client, sid, function()
            client:send("exists", receipt):on_done(function(st)
                if not st then
                    return
                end
                client:delete_guaranteed(receipt)
                drop_item_of(q, marker, st.czxid)
            end)
        end)
    end
end


-- One put (see the header), for util.retry: true; or nil, err, where a
-- transient err or "sessionexpired" means it did not happen (send again),
-- and "nonode" that a parent is missing.
local function put_once(q, data, marker, deadline)
    local client = q.client
    local receipt = q.puts .. "/_c_" .. uuid() .. "-put"
    local sid = client:session_id()
    local f = client:send("multi", {
        { op = "create", path = q.entries .. "/" .. marker, data = data,
          sequential = true },
        { op = "create", path = receipt, ephemeral = true },
    })
    local made, err = f:wait(remaining(deadline))
    if made then
        client:delete_guaranteed(receipt)
        return true
    elseif err == "timeout" then
        f:on_done(function(late, lerr) undo_put(q, sid, marker, receipt, late, lerr) end)
        return nil, "timeout"
    elseif not unknown_outcome[err] then
        return nil, err    -- not applied: a multi is all or nothing
    end
    -- The reply was lost. While our session lives, the receipt tells.
    if client:session_id() == sid then
        local st, serr
        if client:wait_connected(remaining(deadline)) and client:session_id() == sid then
            st, serr = client:read_until(deadline, "exists", receipt)
        end
        if st then
            client:delete_guaranteed(receipt)
            return true
        elseif st == false then
            return nil, err    -- it did not happen: again
        elseif client:session_id() == sid then
            undo_put(q, sid, marker, receipt, nil, err)
            return nil, serr or "timeout"
        end
    end
    -- The session ended, and the receipt with it: the outcome is lost.
    -- Again (see the header: the item may be there twice).
    return nil, "sessionexpired"
end


--- Puts `data` with priority `prio` into queue `q` by `deadline` (its
--- arguments checked): true, or nil, err.
function _M.put(q, data, prio, deadline)
    local client = q.client
    local marker = names.marker(prio)
    local ok, err
    for _ = 1, MAX_RACES do
        ok, err = retry(client, deadline, UNTIL_DEADLINE, put_once, q, data, marker, deadline)
        if err ~= "nonode" then
            break
        end
        local made, merr = names.make_paths(client, deadline, q.entries, q.puts)
        if not made then
            return nil, merr
        end
    end
    if not ok then
        return nil, err
    end
    return true
end


return _M
