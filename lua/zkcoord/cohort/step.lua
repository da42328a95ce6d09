--- zkcoord.cohort.step: a seat's enter_step, enter() in steps for a
--- caller that must not wait for others (internal part of zkcoord.cohort;
--- the contract is zkcoord.line's enter_step).
--
-- A step takes a seat if the seat has none: it holds at once (true), or
-- it queues, joins the line for the cohort, or waits for its node's
-- confirmation, and answers false; wake() is called (deferred, from the
-- client's callbacks) when that moves: a grant, a turn to lead, the
-- confirmation, a loss, an interrupt, or the line (line.lua's enter_step
-- watch while it joins). Only round trips wait, at most `timeout`.
local seat = require "zkcoord.cohort.seat"
local node = require "zkcoord.cohort.node"
local registry = require "zkcoord.cohort.registry"
local util = require "zkcoord.util"
local args = require "zkcoord.util.args"
local contract = require "zkcoord.contract"

local setmetatable = setmetatable
local MAX_RACES = require("zkcoord.util.retry").MAX_RACES

local _M = {}


-- An event of the seat's queue entry and confirmation: set() calls the
-- step's wake later, never inside another seat's release.
local Wake = {}
local wake_mt = { __index = Wake }

local function call_wake(ev)
    util.call(ev.client, ev.wake, "seat enter_step wake")
end

function Wake:set()
    self.client:waiter():defer(call_wake, self)
end


-- One step of seat `h` (`ev` its wake event): true, false or nil, err.
local function step(h, ev, timeout)
    for _ = 1, MAX_RACES do      -- again: the node went under a seat granted it
        local c, how = h.cohort
        local e = h.entry
        if h.leading or h.relead then
            how = "lead"
        elseif e and not e.state and not e.gone then
            return false           -- queued: woken when it moves
        elseif e then
            h.entry = nil
            if e.interrupted then
                return nil, "interrupted"
            end
            how = e.state == "joined" or e.state
        elseif h.pending then
            how = "held"
        else
            c = registry.of(h.client, h.path, h.driver, h.policy, seat)
            h.cohort = c
            local g, holds = seat.arrive(c, h)
            if holds ~= nil then
                how = holds or "held"
            elseif not g then
                how = "lead"
            else
                seat.enqueue(c, h, ev)
                if g.state == "held" then
                    node.serve_many(g)
                end
                return false
            end
        end
        if how == "held" then
            how = seat.settle(c, h, h.gen, nil, true)
            if how == false then
                node.notify(h.gen.rec, ev)    -- its confirmation or loss
                return false
            end
        end
        if how == "lead" then
            h.relead = nil
            return node.lead(c, h, nil, ev.wake, timeout)
        elseif how ~= "again" then
            return how
        end
    end
    return nil, "timeout"    -- lost under it every time (bounded)
end


--- One step of seat `h`'s enter: true (it holds), false (wake() comes
--- when it may) or nil, err; an error keeps what the seat has (leave()
--- ends it). A seat that held a node now gone takes a seat again.
function _M.enter_step(h, wake, timeout)
    args.check_fn(wake, "enter_step", 1)
    args.check_timeout(timeout, "enter_step", 2)
    if contract.is_closed(h.client) then
        return nil, "closed"
    end
    if h.granted then
        if h:is_through() then
            return true
        end
        h:leave()
        h.granted, h.revoked = false, nil
    end
    local ev = h.step_ev
    if not ev then
        ev = setmetatable({ client = h.client }, wake_mt)
        h.step_ev = ev
    end
    ev.wake = wake
    return step(h, ev, timeout)
end


return _M
