--- zkcoord.work_queue.claim: a consumer's claim on one item (internal part
--- of zkcoord.work_queue).
--
-- A consumer claims an item by creating the ephemeral <path>/taken/<item
-- name> (data: its id), sent with the item's read in one round trip. The
-- claim is a zkcoord.owned_node: ours only as created in this session
-- (after a lost reply, only if the node there is our session's), watched
-- until it goes, deleted only while ours. The path is shared: once our
-- claim is gone, another consumer's claim of the item is there.
--
-- What the client's registry holds for a claim (own_node, `shared`): in
-- nginx a request that ends holding the item gives it back. A lost
-- session's claims went with it on the server; the path is anybody's
-- then, so a new session forgets them rather than deleting them. A claim
-- answers as a queue position does (node, is_through, leave).
local util = require "zkcoord.util"
local errors = require "zkcoord.errors"
local owned_node = require "zkcoord.owned_node"

local unknown_outcome = errors.unknown_outcome
local remaining = util.remaining
local setmetatable = setmetatable

local _M = {}
local Claim = {}
local claim_mt = { __index = Claim }


--- The claim node's path (nil once let go).
--- @local
function Claim:node()
    return self._node
end


--- A claim is held from the start: there is no line to wait in.
--- @local
function Claim:is_through()
    return self._node ~= nil
end


--- Gives the item back (not waited for; retried until done), while the
--- session that took it lives and the claim is still ours.
--- @local
function Claim:leave()
    if self._node then
        self:forget()
        self._own:delete_soon()
    end
    return true
end


--- The claim node is gone or going (acked, released, given back, or with
--- its session).
--- @local
function Claim:forget()
    if self._node then
        self.client:disown_node(self._node)
        self._node = nil
    end
end


-- A create of ours we stopped waiting for: a claim its late reply made
-- (or may have made, the reply lost) is not wanted.
local function unwanted(n, serial, sid)
    return function(made, err)
        if made or unknown_outcome[err] then
            n:delete_soon(serial, sid)
        end
    end
end


--- Claims the item named `e.name` in queue `q` by `deadline`; `on_gone`
--- (fn(reason)) is told when the claim goes without a write of ours. A
--- table { node = (the owned_node), held = (the registry's entry), path =,
--- stat = (the claim's), data =, item_stat =, sid = }; false (taken by
--- another, or acked meanwhile); or nil, err.
function _M.take(q, e, deadline, on_gone)
    local client = q.client
    local claim = q.taken .. "/" .. e.name
    local path = q.entries .. "/" .. e.name
    local sid, serial = client:session_id(), client:serial()
    local n = owned_node.new(client, claim, { data = q.id, parents = false, on_gone = on_gone })
    local fc = client:send("create", claim, q.id, { ephemeral = true })
    local fg = client:send("get", path)
    local created, cerr = fc:wait(remaining(deadline))
    local cstat = created and cerr     -- a create answers path, stat
    if not created and cerr == "timeout" then
        fc:on_done(unwanted(n, serial, sid))
        return nil, "timeout"
    end
    local data, stat = fg:wait(remaining(deadline))
    if not created and unknown_outcome[cerr] then
        -- Did our create happen? Only our own session's claim is ours; one
        -- made by an ended session went with it.
        if client:session_id() ~= sid then
            return nil, "sessionexpired"
        end
        if not client:wait_connected(remaining(deadline)) or client:session_id() ~= sid then
            n:delete_soon(serial, sid)
            return nil, "timeout"
        end
        local st, serr = client:exists(claim)
        if st == nil then
            -- Not learnt: a claim our create made would lock the item
            -- until the session ends.
            n:delete_soon(serial, sid)
            return nil, serr
        elseif not (st and owned_node.ours_now(client, st, sid)) then
            return false
        end
        cstat = st
        data, stat = client:get(path)    -- ours: the create did happen
    elseif not created then
        if cerr == "nodeexists" then
            return false
        elseif cerr == "nonode" then
            -- no taken/ parent yet: make it, then try again
            local ok, perr = client:create(q.taken, nil, { parents = true })
            if ok or perr == "nodeexists" then
                return _M.take(q, e, deadline, on_gone)
            end
            return nil, perr
        end
        return nil, cerr
    end
    if data == nil or not n:adopt(cstat) then
        -- Acked by someone else meanwhile (nonode), not read, or made in
        -- a session that ended since: give the claim back either way (not
        -- waited for; retried until done, while it is ours).
        n:delete_soon(serial, sid)
        if data ~= nil then
            return nil, "sessionexpired"
        elseif stat == "nonode" then
            return false
        end
        return nil, stat
    end
    -- Registered like a queue position, but shared (see the header).
    local held = setmetatable({ client = client, _node = claim, _own = n }, claim_mt)
    client:own_node(claim, held, true)
    return { node = n, held = held, path = claim, stat = cstat, data = data,
             item_stat = stat, sid = sid }
end


return _M
