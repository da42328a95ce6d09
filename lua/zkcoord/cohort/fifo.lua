--- zkcoord.cohort.fifo: the local queue of a cohort's owners, in arrival
--- order, and how far a node is served from it (internal part of
--- zkcoord.cohort): the one bound of the lock's local handoffs and of the
--- readers joining a read node, and the token's range. Any table with the
--- fields init() sets is a queue: a lock's cohort, a read node's generation.
local now = require("zkcoord.core").now
local remaining = require("zkcoord.util").remaining
local contract = require "zkcoord.contract"

local _M = {}

_M.LOCAL_BITS = 12
_M.LOCAL_MAX = 2 ^ _M.LOCAL_BITS - 1    -- local grants of one node: n <= LOCAL_MAX
_M.DEFAULT_HANDOFFS = 16
_M.DEFAULT_TIME = 0.01

local LOCAL_MAX = _M.LOCAL_MAX


--- May a node granted at `since` be granted locally once more, as grant
--- number `n` (1 for the first local grant)? Always while `remote` is false
--- (no participant behind the node), else within the lock's
--- cohort_handoffs and cohort_time; never beyond LOCAL_MAX (the token's
--- range).
function _M.may_grant(n, since, remote, opts)
    if n > LOCAL_MAX then
        return false
    end
    if not remote then
        return true
    end
    return n <= (opts.cohort_handoffs or _M.DEFAULT_HANDOFFS)
           and now() - since < (opts.cohort_time or _M.DEFAULT_TIME)
end


--- Makes `t` an empty queue.
function _M.init(t)
    t.waiting, t.head, t.tail = {}, 1, 0
    return t
end


--- Is anyone queued (maybe one that gave up: pop skips those)?
function _M.queued(t)
    return t.head <= t.tail
end


--- Queues hold `h` at the end of `t`: the entry { h =, ev =, line = t }.
function _M.enqueue(t, client, h)
    local e = { h = h, ev = client:waiter():event(), line = t }
    t.tail = t.tail + 1
    t.waiting[t.tail] = e
    return e
end


--- Waits for entry `e` to be woken: "held" (it holds now), "lead" (it is
--- to join the line itself), or nil, err when its time ran out or it was
--- interrupted (the entry stays, skipped by pop).
function _M.await(e, client, deadline)
    e.ev:wait(remaining(deadline))
    if e.state then
        return e.state
    end
    e.gone = true
    if e.interrupted then
        return nil, "interrupted"
    end
    return nil, contract.is_closed(client) and "closed" or "timeout"
end


--- The first entry still waiting (those that gave up are skipped), popped.
function _M.pop(t)
    local w = t.waiting
    while t.head <= t.tail do
        local e = w[t.head]
        w[t.head] = nil
        t.head = t.head + 1
        if not e.gone then
            return e
        end
    end
    t.head, t.tail = 1, 0
    return nil
end


--- Wakes entry `e` with `state` ("held" or "lead").
function _M.wake(e, state)
    e.state = state
    e.ev:set()
end


--- The first entry still waiting is to join the line itself: true, or
--- false when none waits.
function _M.lead_next(t)
    local e = _M.pop(t)
    if not e then
        return false
    end
    _M.wake(e, "lead")
    return true
end


--- Takes entry `e` out (its owner is gone, or interrupted): a woken entry
--- that never resumed was to lead, so the next one leads instead.
function _M.leave(e, interrupted)
    if e.gone then
        return
    end
    e.gone = true
    if interrupted and not e.state then
        e.interrupted = true
        e.ev:set()
        return
    end
    if e.state == "lead" then
        e.line.kind.pass_lead(e.line)
    end
end


return _M
