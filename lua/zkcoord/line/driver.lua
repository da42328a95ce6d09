--- zkcoord.line.driver: what a line is made of, checked once (internal).
--
-- A driver says how the engine (zkcoord.line) names, sorts and judges the
-- nodes of one line; the fields are documented in zkcoord.line's header
-- and the README ("line: write your own recipe"). `compile` checks a driver
-- table and returns a frozen copy with its name patterns built, so a
-- recipe compiles its driver once and every position reuses it (a lock
-- acquire checks nothing again). `parse` turns a children() listing into
-- the line's entries (zkcoord.line.order); `scan` answers a built-in rule from the listing in
-- one pass, when the driver's rule has a scan (zkcoord.line.rules) and no
-- key. Checks return nil, message: the public entry points in
-- zkcoord.line raise with their own function name and level.
local rules = require "zkcoord.line.rules"
local contract = require "zkcoord.contract"

local type, pairs, tostring, setmetatable, getmetatable =
    type, pairs, tostring, setmetatable, getmetatable
local gsub, find = string.gsub, string.find
local byte = string.byte
local array_length = contract.array_length

local _M = {}

local DRIVER_MT = { __metatable = "zkcoord.line.driver" }

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


-- Reading a listing in line order (zkcoord.line.order), here too for the
-- engine's callers.
local order = require "zkcoord.line.order"
_M.parse, _M.scan, _M.seq_of, _M.sorted = order.parse, order.scan, order.seq_of, order.sorted


return _M
