--- zkcoord.cohort.fifo: the local queue of a cohort's owners, in arrival
--- order (internal part of zkcoord.cohort). Any table with the fields
--- init() sets is one: a lock's cohort, a read node's generation.
local remaining = require("zkcoord.util").remaining

local _M = {}


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
    return nil, client:is_closed() and "closed" or "timeout"
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
