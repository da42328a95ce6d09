--- zkcoord.line.order: a line's order in a listing (internal).
--
-- `parse` turns a children() listing into the line's entries, sorted as
-- every client sorts them; `scan` answers a built-in rule from the listing
-- in one pass; `seq_of` reads our node's sequence number; `index_of` finds
-- a name among parse's entries; `sorted` is parse's answer made cheaper
-- for a listing many joins read. The others take a driver
-- zkcoord.line.driver compiled (its name patterns, key and scan).
local type, ipairs, tonumber, setmetatable = type, ipairs, tonumber, setmetatable
local sort, match = table.sort, string.match
local byte, sub = string.byte, string.sub

local _M = {}

-- The parent's sequence counter is a signed 32-bit int.
local SEQ_WRAP = 4294967296


-- Equal sequence numbers (only names made by hand can share one) go by
-- name: one order every client agrees on, and the scan's.
local function by_seq(a, b)
    if a.seq ~= b.seq then
        return a.seq < b.seq
    end
    return a.name < b.name
end

local function by_key(a, b)
    if a.key ~= b.key then
        return a.key < b.key
    end
    return by_seq(a, b)
end


-- The sequence number in a name, as a sort key: the parent's counter is a
-- signed 32-bit int, past 2^31-1 it goes negative, and those nodes are the
-- newest.
local function seq_key(text)
    local seq = tonumber(text)
    return seq < 0 and seq + SEQ_WRAP or seq
end


--- The index of the entry named `name` in `entries` (parse's), or nil.
function _M.index_of(entries, name)
    for i, e in ipairs(entries) do
        if e.name == name then
            return i
        end
    end
    return nil
end


--- The participants among `names` (children of `parent`), in line order:
--- by the driver's key, else by sequence number. Returns the entries, or
--- nil, i when names[i] is not a string.
function _M.parse(d, parent, names)
    local out, pats, base = {}, d.patterns, parent == "/" and "" or parent
    for i, name in ipairs(names) do
        if type(name) ~= "string" then
            return nil, i
        end
        for _, p in ipairs(pats) do
            local seq = match(name, p.pattern)
            if seq then
                out[#out + 1] = { name = name, path = base .. "/" .. name, seq = seq_key(seq),
                                  marker = p.marker }
                break
            end
        end
    end
    local key = d.key
    if key then
        for _, e in ipairs(out) do
            e.key = key(e)
        end
        sort(out, by_key)
    else
        sort(out, by_seq)
    end
    return out
end


local DIGIT0, DIGIT9, MINUS = 48, 57, 45

-- Digits a double holds exactly, summed one by one: a longer number goes
-- through tonumber, as parse reads it.
local EXACT_DIGITS = 15


-- Does pattern `p`'s marker end in `name` just before index `q`?
local function marker_before(name, q, p)
    local bytes = p.bytes
    local at = q - #bytes - 1
    if at < 0 then
        return false
    end
    for k = #bytes, 1, -1 do
        if byte(name, at + k) ~= bytes[k] then
            return false
        end
    end
    return true
end


-- The sequence key of name[q..len]: -?digits, the digits from `a` on.
local function seq_at(name, q, a, len)
    if len - q >= EXACT_DIGITS then
        return seq_key(sub(name, q, len))
    end
    local n = 0
    for k = q < a and a or q, len do
        n = n * 10 + byte(name, k) - DIGIT0
    end
    if q < a then
        n = -n
    end
    return n < 0 and n + SEQ_WRAP or n
end


-- The sequence key and marker parse gives `name` (nil: not in the line),
-- read byte by byte: no string or table per name. parse takes the first
-- of `pats` whose "^.*<marker>(%-?%d+)$" matches; the greedy .* makes the
-- match end its marker at the highest index q from which the rest is
-- -?%d+ to the end, so q is in the name's trailing run of digits, or the
-- '-' just before that run. A marker that does not end with a digit can
-- only end just before the run (or that '-').
local function classify(name, pats)
    local len = #name
    local c = byte(name, len)
    if not c or c < DIGIT0 or c > DIGIT9 then
        return nil
    end
    local a = len
    while a > 1 do
        c = byte(name, a - 1)
        if c < DIGIT0 or c > DIGIT9 then
            break
        end
        a = a - 1
    end
    local minus = a > 1 and byte(name, a - 1) == MINUS
    for i = 1, #pats do
        local p = pats[i]
        for q = p.digit_end and len or a, a, -1 do
            if marker_before(name, q, p) then
                return seq_at(name, q, a, len), p.marker
            end
        end
        if minus and marker_before(name, a - 1, p) then
            return seq_at(name, a - 1, a, len), p.marker
        end
    end
    return nil
end


-- Puts (seq, name, marker) in the `n` nearest entries below ours kept in
-- `b` (b.seq[i], b.name[i], b.marker[i], nearest first, at most b.k):
-- the scan's candidates, without a table per name. Returns the new count;
-- b.cut is set when an entry below did not fit.
local function keep_below(b, n, seq, name, marker)
    local bs, bn, bm, k = b.seq, b.name, b.marker, b.k
    if n == k then
        local ls, ln = bs[n], bn[n]
        if seq < ls or (seq == ls and name < ln) then
            b.cut = true
            return n
        end
        b.cut = true    -- the last one falls out
    else
        n = n + 1
    end
    local i = n
    while i > 1 do
        local ps, pn = bs[i - 1], bn[i - 1]
        if seq < ps or (seq == ps and name < pn) then
            break
        end
        bs[i], bn[i], bm[i] = ps, pn, bm[i - 1]
        i = i - 1
    end
    bs[i], bn[i], bm[i] = seq, name, marker
    return n
end


--- The verdict of driver `d`'s rule on listing `names` of `parent` for our
--- node `mine`, in one pass (only for a driver with a scan, see freeze):
--- true (through), the entry to watch (a table like parse's), or nil when
--- our node is not in the line. The order is parse's, (seq, name): the
--- entry below ours nearest to it whose marker the scan's `below` takes
--- (true: any); else the lowest above ours whose marker is in `above`.
--- With `keep` (a number k >= 0) and a verdict below ours, also the next k
--- such entries below the verdict, nearest first, as names (a waiter walks
--- down them when the one it watches goes: zkcoord.line.walk), and true
--- when there were more than those.
function _M.scan(d, parent, names, mine, keep)
    local pats, how = d.patterns, d.scan
    local my = mine and classify(mine, pats)
    if not my then
        return nil
    end
    local below, above = how.below, how.above
    local found = false
    local b = { seq = {}, name = {}, marker = {}, k = (keep or 0) + 1, cut = false }
    local nb = 0
    local aname, aseq, amark = nil, nil, nil
    for i = 1, #names do
        local name = names[i]
        if name == mine then
            found = true
        else
            local seq, marker = classify(name, pats)    -- nil: not a participant
            if seq and (seq < my or (seq == my and name < mine)) then
                if below == true or below[marker] then
                    nb = keep_below(b, nb, seq, name, marker)
                end
            elseif seq and above and above[marker]
                   and (not aseq or seq < aseq or (seq == aseq and name < aname)) then
                aname, aseq, amark = name, seq, marker
            end
        end
    end
    if not found then
        return nil
    end
    local base = parent == "/" and "" or parent
    if nb == 0 then
        if not aname then
            return true
        end
        return { name = aname, path = base .. "/" .. aname, seq = aseq, marker = amark }
    end
    local verdict = { name = b.name[1], path = base .. "/" .. b.name[1], seq = b.seq[1],
                      marker = b.marker[1] }
    if not keep then
        return verdict
    end
    local kept = {}
    for i = 2, nb do
        kept[i - 1] = base .. "/" .. b.name[i]
    end
    return verdict, kept, b.cut
end


-- A name's index in its listing, packed under its sequence key in one
-- number (keys < 2^32, so key * SLOT + index < 2^52: exact).
local SLOT = 1048576


-- The entries of the names `keys` holds (packed, sorted) after `out`'s
-- first m; nil on an equal sequence number (parse orders those by name).
local function append(out, m, keys, k, names, markers, base)
    local with_path = { __index = function(e, field)
        if field == "path" then
            local path = base .. "/" .. e.name
            e.path = path
            return path
        end
    end }
    local last = m > 0 and out[m].seq or -1
    for j = 1, k do
        local key = keys[j]
        local i = key % SLOT
        local seq = (key - i) / SLOT
        if seq == last then
            return nil
        end
        last = seq
        out[m + j] = setmetatable({ name = names[i], seq = seq, marker = markers[i] }, with_path)
    end
    return out
end


-- The participants among `names` that `index` (name -> position) does not
-- hold, packed and sorted (see sorted); also which positions of `index`
-- are in `names`, and how many. nil when a new one is not above `top` (or
-- is not a number the parent's counter gives): the caller sorts them all.
local function newcomers(pats, names, index, top)
    local keys, markers, k, keep, kept = {}, {}, 0, {}, 0
    for i = 1, #names do
        local name = names[i]
        local at = index and index[name]
        if at then
            keep[at], kept = true, kept + 1
        elseif type(name) ~= "string" then
            return nil
        else
            local seq, marker = classify(name, pats)
            if seq then
                if seq <= top or seq < 0 or seq >= SEQ_WRAP then
                    return nil
                end
                k = k + 1
                keys[k] = seq * SLOT + i
                markers[i] = marker
            end
        end
    end
    sort(keys)
    return keys, k, markers, keep, kept
end


--- parse's answer for a driver with a scan (no key), for a listing that
--- many joins read (zkcoord.line.join's view): the same entries in the
--- same order, made cheaper: names read byte by byte (as scan reads
--- them), one sort of plain numbers (the sequence key with the name's
--- index under it) instead of one that calls a Lua comparison per step,
--- and each entry's path made when first read (the line's rules read one
--- or a few). With `before`, the entries and index (name -> position) of
--- an earlier answer for the same parent and driver, only the names it
--- does not hold are sorted: a node created after a listing has a higher
--- sequence number than every node in it (the parent's counter), so the
--- line is what is left of `before`, in its order, then the newcomers.
--- When a newcomer is not above all of `before` (a listing older than
--- `before`'s, a hand-made name), all are sorted. Equal sequence numbers
--- (only hand-made names have them, and they go by name) or numbers
--- outside the parent's 32-bit counter: parse.
function _M.sorted(d, parent, names, before)
    if #names >= SLOT then
        return _M.parse(d, parent, names)
    end
    local base, pats = parent == "/" and "" or parent, d.patterns
    local old = before and before.entries
    if old then
        local n_old = #old
        local keys, k, markers, keep, kept = newcomers(pats, names, before.index,
                                                       n_old > 0 and old[n_old].seq or -1)
        if keys then
            local out, m = {}, 0
            if kept == n_old then
                for j = 1, n_old do out[j] = old[j] end
                m = n_old
            else
                for j = 1, n_old do
                    if keep[j] then
                        m = m + 1
                        out[m] = old[j]
                    end
                end
            end
            local entries = append(out, m, keys, k, names, markers, base)
            if entries then
                return entries
            end
        end
    end
    local keys, k, markers = newcomers(pats, names, nil, -1)
    local entries = keys and append({}, 0, keys, k, names, markers, base)
    return entries or _M.parse(d, parent, names)
end


--- The sequence number of our node `name` (named with the driver's marker).
function _M.seq_of(d, name)
    for _, p in ipairs(d.patterns) do
        if p.marker == d.marker then
            local seq = match(name, p.pattern)
            return seq and seq_key(seq)
        end
    end
    return nil
end


return _M
