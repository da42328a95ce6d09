-- chaos.check.lease: the lease's promise (README): another holder obtains
-- it only once the term it found has ended, so no two holders believe they
-- hold it at the same time. A holder believes it holds from the return of
-- its obtain() (w1, os.time(): the lease's clock, one machine here) to the
-- end of its term (ack ends=, whole seconds); two such spans of different
-- holders ("c<ID>", every incarnation of a contender is one holder: it
-- renews) must not intersect. Faults do not excuse anything: the lease
-- needs no session. Every try ends (the rules' outcome check).
local rules = require "chaos.check.rules"

local format = string.format

local _M = {}

--- The terms obtained by operation `op`: { holder =, slot =, from = w1,
--- to = ends, key =, n = }.
function _M.terms(R, op)
    local out = {}
    for key, P in pairs(R.procs) do
        for _, e in ipairs(P.events) do
            if e.ev == "ack" and e.kv.op == op and e.kv.ends then
                out[#out + 1] = { holder = "c" .. P.id, slot = e.kv.slot, from = tonumber(e.kv.w1),
                                  to = tonumber(e.kv.ends), key = key, n = tonumber(e.kv.n) }
            end
        end
    end
    table.sort(out, function(a, b) return a.from < b.from end)
    return out
end

--- Violations `kind` for terms of different holders (of one slot) that
--- both ran at some second; returns how many pairs were compared.
function _M.judge(R, terms, kind)
    local pairs_seen = 0
    for i, a in ipairs(terms) do
        for j = i + 1, #terms do
            local b = terms[j]
            if b.from >= a.to then break end      -- sorted by from: none later overlaps a
            if a.holder ~= b.holder and a.slot == b.slot and b.to > b.from and a.to > a.from then
                pairs_seen = pairs_seen + 1
                R:violation(kind, format("%s (%s op %d) held [%d, %d), %s (%s op %d) [%d, %d)%s",
                                         a.holder, a.key, a.n, a.from, a.to, b.holder, b.key, b.n,
                                         b.from, b.to, a.slot and (" slot " .. a.slot) or ""))
            end
        end
    end
    return pairs_seen
end

function _M.run(R)
    local terms = _M.terms(R, "lease")
    _M.judge(R, terms, "lease: two holders at once")
    local s = rules.opstat(R, "lease")
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "lease: two holders at once", prefix = "lease: ", name = "lease",
        figures = { tries = s.tries, granted = #terms },
        details = format("obtain tries %d, obtained %d, refused (held) %d", s.tries, #terms,
                         s.fail.held or 0) }
end

return _M
