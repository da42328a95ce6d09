--- zkcoord.line.driver: what a line is made of, checked once (internal).
--
-- A driver says how the engine (zkcoord.line) names, sorts and judges the
-- nodes of one line; the fields are documented in zkcoord.line's header
-- and the README ("line: write your own recipe"). `compile` checks a driver
-- table and returns a frozen copy with its name patterns built, so a
-- recipe compiles its driver once and every position reuses it (a lock
-- acquire checks nothing again). `parse` turns a children() listing into
-- the line's entries; `scan` answers a built-in rule from the listing in
-- one pass, when the driver's rule has a scan (zkcoord.line.rules) and no
-- key. Checks return nil, message: the public entry points in
-- zkcoord.line raise with their own function name and level.
local client_mod = require "zkcoord.client"
local rules = require "zkcoord.line.rules"

local type, pairs, ipairs, tostring, tonumber, setmetatable, getmetatable =
    type, pairs, ipairs, tostring, tonumber, setmetatable, getmetatable
local sort, match, gsub, find = table.sort, string.match, string.gsub, string.find
local byte, sub = string.byte, string.sub
local array_length = client_mod.array_length

local _M = {}

local DRIVER_MT = { __metatable = "zkcoord.line.driver" }

local SEQ_WRAP = 4294967296

-- ZooKeeper keeps a TTL in 40 bits of milliseconds (EphemeralType.MAX_TTL).
local MAX_TTL = (2 ^ 40 - 1) / 1000

local MODES = { ephemeral = true, persistent = true, ttl = true }
local PARENT_MODES = { container = true, persistent = true }

-- The keys of a driver table, and the smaller set the options form of
-- line.new (zkcoord.queue's) takes.
local DRIVER_KEYS = { marker = true, markers = true, rule = true, data = true, parents = true,
                      mode = true, ttl = true, key = true, prefix = true }
local OPT_KEYS = { marker = true, markers = true, rule = true, data = true, parents = true,
                   persistent = true }
_M.OPT_KEYS = OPT_KEYS


local function escape(s)
    return (gsub(s, "[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"))
end


-- A marker is part of a node name: a non-empty string, no '/', no control
-- character.
local function valid_marker(m)
    return type(m) == "string" and m ~= "" and not find(m, "[/%c]")
end

local MARKER_MSG = "marker must be a non-empty string without '/' or control characters"


-- Curator's protected prefix (CURATOR-498), the engine's default: the
-- name part before the marker, made of a fresh uuid per create.
local function curator_prefix(id)
    return "_c_" .. id .. "-"
end

-- Two different uuids a driver's prefix is tried with once: each answer
-- must be a valid name part, and the two must differ (the prefix is how a
-- create finds its node after a lost reply, so it must hold the uuid).
local SAMPLE_IDS = { "00000000-0000-4000-8000-000000000000",
                     "ffffffff-ffff-4fff-bfff-ffffffffffff" }
local PREFIX_MSG = "prefix must return a non-empty string without '/' or control characters, "
                   .. "a different one for each uuid"

local function check_prefix(prefix)
    if type(prefix) ~= "function" then
        return nil, "prefix must be a function or nil, got " .. type(prefix)
    end
    local a, b = prefix(SAMPLE_IDS[1]), prefix(SAMPLE_IDS[2])
    if not (valid_marker(a) and valid_marker(b)) or a == b then
        return nil, PREFIX_MSG
    end
    return true
end


-- The markers of a line, checked, as name patterns. Returns the patterns
-- or nil, message.
local function patterns_of(marker, markers)
    if not valid_marker(marker) then
        return nil, MARKER_MSG
    end
    markers = markers or { marker }
    local n = type(markers) == "table" and array_length(markers)
    if not n or n == 0 then
        return nil, "markers must be a non-empty array of strings, without holes"
    end
    local found, seen, patterns = false, {}, {}
    for i = 1, n do
        local m = markers[i]
        if not valid_marker(m) then
            return nil, "markers[" .. i .. "] must be a non-empty string without '/' or control "
                        .. "characters"
        end
        if seen[m] then
            return nil, "markers must be distinct: '" .. m .. "' is there twice"
        end
        seen[m] = true
        found = found or m == marker
        -- greedy .* takes the LAST marker, as Curator's sorter does; the
        -- bytes are the same pattern for the scan (classify below)
        local bytes = {}
        for k = 1, #m do
            bytes[k] = byte(m, k)
        end
        patterns[i] = { marker = m, pattern = "^.*" .. escape(m) .. "(%-?%d+)$",
                        bytes = bytes, digit_end = find(m, "%d$") ~= nil }
    end
    if not found then
        -- Our own node would never be recognised: enter() would create
        -- nodes for ever.
        return nil, "opts.marker must be one of opts.markers"
    end
    return patterns
end


-- What the engine keeps of a checked driver. `outlives` is true when the
-- node outlives the session that created it (persistent and TTL nodes):
-- such a node is ours by the uuid in its name alone, never registered with
-- the client, and its guaranteed delete goes on in later sessions. `scan`
-- is the rule's one-pass form, chosen here once: a key orders the line
-- by something only the whole listing gives, so a keyed line is parsed.
local function freeze(d, patterns, mode)
    local create = { sequential = true }
    if mode == "ephemeral" then
        create.ephemeral = true
    elseif mode == "ttl" then
        create.ttl = d.ttl
    end
    return setmetatable({
        marker = d.marker,
        patterns = patterns,
        rule = d.rule,
        data = d.data,
        mode = mode,
        ttl = d.ttl,
        key = d.key,
        scan = not d.key and rules.scan_of(d.rule) or nil,
        outlives = mode ~= "ephemeral",
        prefix = d.prefix or curator_prefix,
        create_flags = create,
        parents = d.parents or "container",
    }, DRIVER_MT)
end


-- Checks the fields both forms share. Returns the name patterns, or nil
-- and a message.
local function check_common(d)
    local patterns, err = patterns_of(d.marker, d.markers)
    if not patterns then
        return nil, err
    end
    if type(d.rule) ~= "function" then
        return nil, "rule must be a function, got " .. type(d.rule)
    end
    if d.data ~= nil and type(d.data) ~= "string" then
        return nil, "data must be a string, got " .. type(d.data)
    end
    if d.parents ~= nil and not PARENT_MODES[d.parents] then
        return nil, "parents must be 'container' or 'persistent'"
    end
    return patterns
end


--- Checks the options table line.new also takes (marker, markers,
--- rule, data, parents, persistent). Returns the driver or nil, message.
function _M.from_opts(opts)
    if type(opts) ~= "table" then
        return nil, "opts must be a table with a marker and a rule function, got " .. type(opts)
    end
    for k in pairs(opts) do
        if not OPT_KEYS[k] then
            local hint = DRIVER_KEYS[k] and "; '" .. k .. "' is a field of line.driver{...}" or ""
            return nil, "unknown option '" .. tostring(k)
                        .. "' (marker, markers, rule, data, parents, persistent)" .. hint
        end
    end
    local patterns, err = check_common(opts)
    if not patterns then
        return nil, err
    end
    if opts.persistent ~= nil and type(opts.persistent) ~= "boolean" then
        return nil, "persistent must be a boolean, got " .. type(opts.persistent)
    end
    return freeze(opts, patterns, opts.persistent and "persistent" or "ephemeral")
end


--- Checks a driver table. Returns the frozen driver or nil, message.
function _M.compile(d)
    if type(d) ~= "table" then
        return nil, "driver must be a table, got " .. type(d)
    end
    for k in pairs(d) do
        if not DRIVER_KEYS[k] then
            return nil, "unknown driver field '" .. tostring(k)
                        .. "' (marker, markers, rule, data, parents, mode, ttl, key, prefix)"
        end
    end
    local patterns, err = check_common(d)
    if not patterns then
        return nil, err
    end
    local mode = d.mode or "ephemeral"
    if not MODES[mode] then
        return nil, "mode must be 'ephemeral', 'persistent' or 'ttl', got " .. tostring(mode)
    end
    if mode == "ttl" then
        local ttl = d.ttl
        if type(ttl) ~= "number" or not (ttl > 0 and ttl <= MAX_TTL) then  -- luacheck: ignore 581
            return nil, "ttl must be a positive number of seconds, at most " .. MAX_TTL
        end
    elseif d.ttl ~= nil then
        return nil, "ttl is for mode 'ttl' only"
    end
    if d.key ~= nil and type(d.key) ~= "function" then
        return nil, "key must be a function or nil, got " .. type(d.key)
    end
    if d.prefix ~= nil then
        local ok, perr = check_prefix(d.prefix)
        if not ok then
            return nil, perr
        end
    end
    return freeze(d, patterns, mode)
end


--- Is `d` a driver `compile` made?
function _M.is_driver(d)
    return getmetatable(d) == DRIVER_MT.__metatable
end


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
