--- zkcoord.work_queue.item: a taken item and what its holder does with it
--- (internal part of zkcoord.work_queue): ack, release, token, on_lost,
--- held.
--
-- ack() deletes claim and item in one multi, release() the claim. Either
-- first reads the claim (zkcoord.work_queue.claim) and writes only if it
-- is still our session's, with the version read: a claim someone deleted
-- may be another consumer's by now, also before its deletion's event
-- reached us. (A multi cannot check an ephemeral owner: a claim deleted
-- by a third party and taken by another consumer within the one round
-- trip between our read and our write is not told apart, both version 0.)
-- A write whose reply was lost is decided by the claim: while our session
-- lives only our write or someone else's delete removes it, and once it is
-- gone an ack is decided by its receipt, written by the ack's multi
-- (zkcoord.work_queue.ack_receipt): once the item is gone, nothing else
-- tells our ack from another consumer's. Once the session ended, an ack is
-- decided by the receipt too, after its old claim went (ack_after_loss); a
-- release needs no deciding.
local core = require "zkcoord.core"
local util = require "zkcoord.util"
local errors = require "zkcoord.errors"
local claims = require "zkcoord.work_queue.claim"
local receipts = require "zkcoord.work_queue.ack_receipt"
local contract = require "zkcoord.contract"

local unknown_outcome, transient = errors.unknown_outcome, errors.transient
local now, remaining = core.now, util.remaining
local setmetatable = setmetatable

local _M = {}
local Item = {}
local item_mt = { __index = Item }
local check_item = util.self_checker(item_mt, "taken item", "item")
_M.mt = item_mt


-- The hold ended, not by a write of ours (none in flight or undecided:
-- that ack() or release() answers for itself): tell the item's on_lost
-- callbacks, once. "deleted": someone deleted our claim; "sessionexpired":
-- it went with our session.
local function tell_lost(self, reason)
    if self.claim == nil or self._writing or self._unsure or self._lost_told then
        return
    end
    self._lost_told = true
    if self._lost_fns then
        util.call_all(self.queue.client, self._lost_fns, "work_queue item on_lost", reason)
    end
end


-- The claim went without a write of ours (the owned node's on_gone):
-- "deleted" (someone deleted it) or "sessionexpired". The item is lost:
-- held() is false, ack() and release() return "lost" and delete nothing.
-- While a write of ours may be deleting the claim the node cannot tell our
-- delete from another's: kept for after the write (drop_claim).
local function claim_gone(self, reason)
    if self.claim == nil or contract.is_closed(self.queue.client) then
        return    -- close() ends every hold untold: ack() and release() say "closed"
    elseif self._writing then
        self._gone_seen = reason
    end
    if self._writing or self._unsure then
        return
    end
    -- given back by the client's registry (nginx: its request ended), as
    -- a lock is released then: no loss to tell
    local given_back = self._held:node() == nil
    if reason == "deleted" then
        self._deleted = true
    end
    self._held:forget()
    if not given_back then
        tell_lost(self, reason)
    end
end


-- The owned node's on_gone, made outside any waiting frame.
local function gone_handler(self)
    return function(reason)
        claim_gone(self, reason)
    end
end


-- Claims the item `e` (a names.sorted entry) of queue `q` by `deadline`:
-- the item; false (taken by another, or acked meanwhile); or nil, err.
-- Sweeps the old ack receipts of `taken` (the listing of taken/ that
-- found `e` free) then. (A plain comment: the API reference shows this
-- file on the work queue's page, whose take() is the user's.)
function _M.claim(q, e, deadline, taken)
    local self = setmetatable({ queue = q, priority = e.priority }, item_mt)
    local c, err = claims.take(q, e, deadline, gone_handler(self))
    if not c then
        return c, err
    end
    receipts.sweep(q, taken, c.stat.ctime)
    self._own, self._held, self._sid = c.node, c.held, c.sid
    self._czxid = c.stat.czxid     -- token(): our claim's
    self._receipt = receipts.path(q, self._czxid)
    self.claim, self.path = c.path, q.entries .. "/" .. e.name
    self.data, self.stat = c.data, c.item_stat
    return self
end


-- Is our session the claim's, as far as this process has been told?
local function same_session(self)
    local client = self.queue.client
    contract.current_state(client)     -- what reached the process, and the clock rule, first
    return self._sid == client:session_id()
end


-- Is our claim still ours? It lives as long as the session that made it,
-- unless someone deleted it (claim_gone: same_session may run it) or the
-- registry gave it back.
local function claimed(self)
    if self.claim == nil or self._sid == nil or self._deleted
            or contract.is_closed(self.queue.client) then
        return false
    end
    return same_session(self) and not self._deleted and self._held:node() ~= nil
end


-- true while the claim is ours; else nil, "notheld" (given back already),
-- nil, "closed" (client:close() ended it) or nil, "lost" (it went with our
-- session, or someone deleted it).
local function check_claim(self)
    if not self.claim then
        return nil, "notheld"
    elseif contract.is_closed(self.queue.client) then
        return nil, "closed"
    end
    if not claimed(self) then
        self.claim = nil
        return nil, "lost"
    end
    return true
end


-- The claim is gone: forget it here and in the client's registry.
local function let_go(self)
    self._held:forget()
    self.claim = nil
    return true
end


-- nil, "lost" when the claim is no longer ours, else nil, err.
local function failed(self, err)
    local held, why = check_claim(self)
    return nil, held and err or why
end


-- Someone deleted our claim before our write (the write was not sent):
-- "lost", nothing deleted.
local function lost_claim(self)
    self._deleted = true
    let_go(self)
    return nil, "lost"
end


-- An ack's multi failed because the item went (someone deleted it): our
-- claim now locks nothing; give it back.
local function ack_found_nonode(self)
    self._own:delete_soon()
    let_go(self)
    return nil, "nonode"
end


-- Our claim is gone after an ack of ours that may have happened, and no
-- write of its session can happen any more: our receipt decides (the
-- ack's multi writes it). There: acked by us (true), and it is deleted.
-- Missing: our ack did not happen ("lost": someone deleted our claim or
-- it went with our session; the item is back in the queue, or another
-- consumer took it, maybe acked it). Missing when a sweep may have taken
-- it: only the item still there decides ("lost"). Not known: "unknown",
-- and the next ack() decides.
local function decided_by_receipt(self, deadline)
    local client = self.queue.client
    local mine, err = receipts.read(client, self._receipt, deadline)
    if mine == false and not receipts.surely_kept(now() - self._ack_at, self._keep) then
        local item
        item, err = contract.read_until(client, deadline, "exists", self.path)
        if item == false then
            mine, err = nil, "unknown"
        elseif item == nil then
            mine = nil
        end
    end
    if mine == nil then
        self._unsure = "ack"
        return nil, (err == "unknown" or transient[err] or unknown_outcome[err]) and "unknown" or err
    end
    self._unsure = nil
    if mine then
        receipts.drop(client, self._receipt)
        return let_go(self)
    end
    return lost_claim(self)
end


-- An ack of ours whose outcome we did not learn before its session ended
-- is decided by what the server shows, read in the session we have after
-- a sync (its server may not have applied our ack yet). First our claim:
-- while it is there, the server still holds our old session (the client
-- ends it as soon as a server answers, or the server expires it) and a
-- write of it may still be applied: wait for the claim to go (a watch).
-- Gone, our ack can no longer happen later, and our receipt decides
-- (decided_by_receipt): never the item, which another consumer may have
-- taken and acked since (before, its ack was answered as ours: seed
-- 802140). Not learnt by the deadline: "unknown", and the next ack()
-- decides it.
local function ack_after_loss(self, deadline)
    local client = self.queue.client
    local ok, err = client:wait_connected(remaining(deadline))
    if ok then
        ok, err = contract.read_until(client, deadline, "sync", self.claim)
    end
    while ok do
        local ev = client:waiter():event()
        local wake = util.waker(ev)
        local claim, cerr = contract.read_until(client, deadline, "exists", self.claim, wake)
        if not (claim and claim.ephemeral_owner == self._sid) then
            client:remove_watches(self.claim, wake)  -- set on a missing node too
            if claim == nil then
                err = cerr
                break
            end
            return decided_by_receipt(self, deadline)
        end
        if not ev:wait(remaining(deadline)) then
            client:remove_watches(self.claim, wake)
            err = "timeout"
            break
        end
    end
    self._unsure = "ack"
    if err == "timeout" or transient[err] or unknown_outcome[err] then
        return nil, "unknown"
    end
    return nil, err
end


-- Deletes our claim, with `ops` (an ack's item delete; none for a
-- release), within the request timeout: the owned node's delete_with, a
-- look at the claim and the write only while it is ours. A write whose
-- reply was lost is decided by the next look (see the header). A write
-- still undecided at the deadline is reported "unknown", never "timeout":
-- it may have happened. The next ack() or release() decides it.
local function drop_claim_now(self, ops)
    local client = self.queue.client
    local deadline = now() + contract.request_timeout(client)
    local is_ack = #ops > 0
    local sent = self._unsure ~= nil    -- an earlier try of ours may have happened
    while remaining(deadline) > 0 and client:wait_connected(remaining(deadline))
            and same_session(self) do
        local ok, err, results = self._own:delete_with(ops, deadline, self._sid)
        local first = results and results[1] and results[1].err
        if ok then
            self._unsure = nil
            if is_ack then
                receipts.drop(client, self._receipt)    -- read by nobody: done
            end
            return let_go(self)
        elseif ok == false or first == "nonode" then
            -- Not ours: a write of ours happened, or someone deleted it.
            self._unsure = nil
            if not sent then
                return lost_claim(self)
            elseif is_ack then
                return decided_by_receipt(self, deadline)
            end
            return let_go(self)
        elseif results then    -- the write went out and failed
            if is_ack and results[2] and results[2].err == "nonode" then
                self._unsure = nil
                return ack_found_nonode(self)
            elseif err == "sessionexpired" and not is_ack then
                self._unsure = nil
                return failed(self, err)    -- "lost": the claim went with the session
            elseif unknown_outcome[err] then
                sent = true    -- it may have happened (an ack: before its session ended too)
            elseif not (transient[err] or first == "badversion") then
                self._unsure = nil    -- our look showed the claim ours: no earlier write happened
                return failed(self, err)
            end
            -- else not applied (badversion: the claim changed since our look): again
        elseif not (transient[err] or unknown_outcome[err]) then    -- the look failed
            self._unsure = sent and (is_ack and "ack" or "release") or nil
            return failed(self, sent and "unknown" or err)
        end
    end
    if sent and is_ack and self.claim and not same_session(self) then
        return ack_after_loss(self, deadline)    -- our session ended meanwhile
    end
    -- The deadline: "unknown" if a write of ours may have happened.
    self._unsure = sent and claimed(self) and (is_ack and "ack" or "release") or nil
    return failed(self, sent and "unknown" or "timeout")
end


local function drop_claim(self, ops)
    self._writing, self._gone_seen = true, nil
    local ok, err = drop_claim_now(self, ops)
    local gone = self._gone_seen
    self._writing, self._gone_seen = nil, nil
    if not ok and self.claim and not self._unsure and gone then
        claim_gone(self, gone)    -- it went during our write, not by it
    end
    return ok, err
end


--- Done with the item: it is removed from the queue (claim and item in one
--- multi, with a receipt of ours that decides the ack if its reply is lost).
---@return true|nil ok, string? err "lost" (not done: our session ended, or our
---   claim was deleted; the item is back in the queue, or another consumer's,
---   who may have acked it) | "notheld" | "unknown"
---   (the reply was lost and no server answered in time: ack() again decides) |
---   a code
function Item:ack()
    check_item(self, "ack")
    if self._unsure == "ack" and self.claim and not same_session(self) then
        -- an ack of ours was undecided when our session ended
        return ack_after_loss(self, now() + contract.request_timeout(self.queue.client))
    end
    local held, why = check_claim(self)
    if not held then
        return nil, why
    end
    if self._unsure ~= "ack" then    -- no receipt of an earlier ack of ours can be there
        self._ack_at, self._keep = now(), receipts.keep(self.queue.client)
    end
    return drop_claim(self, { { op = "delete", path = self.path },
                              receipts.op(self._receipt, self._keep) })
end


--- Gives the item back to the queue, for another consumer (or us) to take.
---@return true|nil ok, string? err "lost" | "notheld" | "unknown" | a code
function Item:release()
    check_item(self, "release")
    local held, why = check_claim(self)
    if not held then
        return nil, why
    end
    return drop_claim(self, {})
end


--- The fencing token of our hold on the item: our claim node's czxid (as
--- lock:token()), while held; another consumer's later claim of the item
--- has a higher one.
---@return number|nil token, string? err "notheld" (acked, given back or lost)
function Item:token()
    check_item(self, "token")
    if not claimed(self) then
        return nil, "notheld"
    end
    return self._czxid
end


--- fn(reason) runs when the held item is lost: "sessionexpired" (our claim
--- went with our session: the item is back in the queue) or "deleted"
--- (someone deleted our claim); held() is false then. Not after ack() or
--- release(), nor for a loss that an ack() or release() in flight or
--- undecided answers itself ("lost", "unknown"). Once per item.
function Item:on_lost(fn)
    check_item(self, "on_lost")
    local fns = self._lost_fns or {}
    self._lost_fns = fns
    return util.add_fn(fns, fn, "on_lost")
end


--- Is the item still held by us (claim alive in our session)?
function Item:held()
    check_item(self, "held")
    return claimed(self)
end


return _M
