--- zkcoord.cache.delivery: handing the mirror's changes to the listeners.
--
-- Owns the queue of change events and the calls of on_change listeners.
-- Rules: events are queued while the mirror changes and delivered after
-- each handler, in order, one listener call at a time, never nested (a
-- callback that waits lets replies in; what they change is delivered
-- after it returns). A listener sees the events queued after it was added
-- (its own first snapshot is queued for it alone). Every call is
-- protected: a failing listener is logged, the others still run.
-- Part of the cache's class: these are its private methods (see
-- zkcoord.cache), called through self.
local call = require("zkcoord.util.callbacks").call

local _M = {}


-- Queues an event (`node` nil: "initialized"); `only`: for that listener
-- alone.
function _M:_emit(kind, node, only)
    if #self._listeners == 0 and not only then
        return
    end
    local ev
    if node then
        ev = { type = kind, path = node.path, data = node.data, stat = node.stat }
    else
        ev = { type = kind }
    end
    local q = self._evq
    self._seq = self._seq + 1
    q.tail = q.tail + 1
    q[q.tail] = { ev = ev, seq = self._seq, only = only }
end


-- Calls the listeners with the queued events, unless a call is running.
function _M:_flush()
    if self._flushing then
        return
    end
    self._flushing = true
    local q = self._evq
    while q.head <= q.tail and not self._closed do
        local item = q[q.head]
        q[q.head] = nil
        q.head = q.head + 1
        local only = item.only
        -- a listener added meanwhile may be called in this loop: index, not ipairs
        local ls = self._listeners
        local i = 1
        while ls[i] do
            local l = ls[i]
            if (only == nil and item.seq > l.from) or only == l then
                call(self.client, l.fn, "cache " .. self.path .. ": on_change", item.ev)
            end
            i = i + 1
        end
    end
    if q.head > q.tail then
        q.head, q.tail = 1, 0
    end
    self._flushing = false
end


-- After each handler: is the load done, and deliver what happened.
function _M:_after()
    self:_check_idle()
    self:_flush()
end

return _M
