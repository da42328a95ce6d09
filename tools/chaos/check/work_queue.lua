-- chaos.check.work_queue: the work queue's promises (README), from the
-- contenders' wq_* lines and the driver's wq_final listing. An item is its
-- data (unique per put).
--   lost item         a put that returned true whose item was never acked
--                     (reported done or "lost") and is not in the queue at the end.
--   never processed   the same seen from the consumers: never taken
--                     either (counted in the row; "lost item" is the violation).
--   acked twice       two acks reported done for one item (unless its put
--                     was in flight when its session ended: the README says
--                     it is sent again and may be there twice; nor is such
--                     an item judged "came back" or "still queued").
--   ack not applied   an ack reported done, and the item taken again by a
--                     take that began after it, or still in the queue at the end.
--   lost ack applied  an ack reported "lost", and the item neither taken
--                     again (by anyone, returning after the take the ack
--                     was for began) nor
--                     in the queue at the end: the ack was applied after all.
--   An ack whose process was killed before it answered (a wq_settle with
--   no wq_ack after it) may have been applied: its item is not judged lost.
--   phantom item      an item taken or left whose put reported a plain
--                     failure (not an unknown outcome: "timeout",
--                     "connectionloss", "operationtimeout", "sessionexpired").
local errors = require "zkcoord.errors"

local format = string.format

local _M = {}

function _M.run(R)
    local items = {}         -- data -> { put =, takes = { {t, key} }, acks = {}, lost = {} }
    local function item(data)
        items[data] = items[data] or { takes = {}, acks = {}, lost = {} }
        return items[data]
    end
    local counts = { puts = 0, put_ok = 0, takes = 0, acks = 0, lost = 0, unknown = 0,
                     releases = 0, twice = 0 }
    for _, P in pairs(R.procs) do
        local last_take, put_from, lost_at, settling = {}, {}, nil, {}
        for _, e in ipairs(P.events) do
            local d = e.kv.data
            if e.ev == "state" and e.kv.new == "lost" then
                lost_at = e.t
            elseif e.ev == "wq_put" then
                put_from[d] = e.t
            elseif e.ev == "wq_put_done" then
                counts.puts = counts.puts + 1
                local it = item(d)
                it.put = { ok = e.kv.ok == "1", err = e.kv.err, t = e.t, key = P.key }
                -- Its session ended with the put in flight: sent again, the
                -- item may be there twice (README).
                it.maybe_twice = lost_at and put_from[d] and lost_at >= put_from[d]
                if it.put.ok then counts.put_ok = counts.put_ok + 1 end
            elseif e.ev == "wq_take" then
                counts.takes = counts.takes + 1
                local tk = { t = e.t, t0 = tonumber(e.kv.t0) or e.t, key = P.key, n = e.kv.n }
                local it = item(d)
                it.takes[#it.takes + 1] = tk
                last_take[e.kv.n] = tk
            elseif e.ev == "wq_settle" then
                settling[e.kv.n] = e.kv.verb == "ack" and item(d) or nil
            elseif e.ev == "wq_ack" then
                settling[e.kv.n] = nil
                local it = item(d)
                local tk = last_take[e.kv.n]
                if e.kv.ok == "1" then
                    counts.acks = counts.acks + 1
                    it.acks[#it.acks + 1] = { t = e.t, key = P.key, take = tk }
                elseif e.kv.err == "lost" then
                    counts.lost = counts.lost + 1
                    it.lost[#it.lost + 1] = { t = e.t, key = P.key, take = tk }
                else
                    counts.unknown = counts.unknown + 1
                    it.unsure = true
                end
            elseif e.ev == "wq_release" then
                settling[e.kv.n] = nil
                counts.releases = counts.releases + 1
            end
        end
        for _, it in pairs(settling) do
            it.unsure = true    -- the process ended inside its ack
        end
    end
    local left, listed = {}, false
    for _, e in ipairs(R.driver_events) do
        if e.ev == "wq_final" then
            left[e.kv.data] = (left[e.kv.data] or 0) + 1
        elseif e.ev == "wq_final_done" then
            listed = true
        end
    end
    if not listed then
        R:violation("work_queue: no final listing", "the driver could not list the items left")
    end

    local never = 0
    for data, it in pairs(items) do
        -- (An item whose ack answered "lost" is judged by that rule below.)
        if it.put and it.put.ok and #it.acks == 0 and not left[data] and not it.unsure
                and #it.lost == 0 then
            R:violation("work_queue: item lost",
                        format("%s put at %.3f by %s: never acked, not in the queue at the end "
                               .. "(taken %d times, acks reported lost %d)", data, it.put.t,
                               it.put.key, #it.takes, #it.lost))
        end
        if it.put and it.put.ok and #it.takes == 0 then
            never = never + 1
        end
        if it.maybe_twice then
            counts.twice = counts.twice + 1
        elseif #it.acks > 1 then
            R:violation("work_queue: acked twice",
                        format("%s acked by %s at %.3f and %s at %.3f", data, it.acks[1].key,
                               it.acks[1].t, it.acks[2].key, it.acks[2].t))
        end
        for _, a in ipairs(it.acks) do
            for _, tk in ipairs(it.takes) do
                if tk.t0 > a.t and not it.maybe_twice then
                    R:violation("work_queue: acked item came back",
                                format("%s acked (done) by %s at %.3f, taken by %s from %.3f",
                                       data, a.key, a.t, tk.key, tk.t0))
                end
            end
            if left[data] and not it.maybe_twice then
                R:violation("work_queue: acked item still queued",
                            format("%s acked (done) by %s at %.3f, in the queue at the end",
                                   data, a.key, a.t))
            end
        end
        for _, l in ipairs(it.lost) do
            local back = left[data] ~= nil
            for _, tk in ipairs(it.takes) do
                if l.take and tk ~= l.take and tk.t > l.take.t0 then back = true end
            end
            if not back and not it.unsure and #it.acks == 0 then
                R:violation("work_queue: ack reported lost was applied",
                            format("%s: ack by %s at %.3f answered \"lost\", yet the item was "
                                   .. "never taken again nor left in the queue (taken at %.3f)",
                                   data, l.key, l.t, l.take and l.take.t or -1))
            end
        end
        local put_failed = it.put and not it.put.ok and not errors.unknown_outcome[it.put.err]
        if put_failed and (#it.takes > 0 or left[data]) then
            R:violation("work_queue: phantom item",
                        format("%s: put by %s answered %s, yet the item was taken or left", data,
                               it.put.key, tostring(it.put.err)))
        end
    end
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "work queue: an item lost, acked twice, an ack done not applied or a lost one "
            .. "applied, a phantom item",
        prefix = "work_queue: ", name = "work_queue", figures = counts,
        details = format("puts %d (true %d), takes %d, acks done %d, \"lost\" %d, other errors %d, "
                         .. "releases %d; items never taken %d; puts whose session ended in "
                         .. "flight (sent again, maybe twice: not judged twice) %d", counts.puts,
                         counts.put_ok, counts.takes, counts.acks, counts.lost, counts.unknown,
                         counts.releases, never, counts.twice) }
end

return _M
