--- zkcoord.counter: a shared integer counter on one node.
--
--   local c = client:counter("/stats/jobs", { initial = 0 })
--   local n, err = c:add(1)                 -- the new value, unique to this add
--   local v = c:get()
--   local ok = c:compare_and_set(v, v + 10) -- false: someone changed it first
--
-- Algorithm (optimistic concurrency, as kazoo's Counter and Curator's
-- DistributedAtomicLong): read value and version, write value + delta with
-- set(path, data, version). ZooKeeper applies a versioned set only if the
-- node is still at that version, so of several adders racing from the same
-- version exactly one wins; the others get "badversion", back off (jittered,
-- exponential), read the fresh value and version once, and try again. Every
-- successful add is a distinct step in ZooKeeper's total order of writes:
-- add() is linearizable and returns a value no other add returns. The
-- version of our last reply is reused, so an uncontended add is one round
-- trip, not a read and a write.
--
-- Node layout: <path> holds the value as a decimal integer string ("42",
-- "-7"), readable with zkCli. Empty data counts as `initial`. The node (and
-- missing parents, persistent) is created on first use with `initial`.
-- Values are integers in -(2^53-1) .. 2^53-1 (exact in a Lua number).
-- NOTE: not Curator's DistributedAtomicLong format (8-byte big-endian).
--
-- Reads (get) are ZooKeeper reads: sequentially consistent, possibly a
-- little behind another client's latest write; writes are linearizable.
--
-- Connection loss during a write: we cannot tell at once whether it was
-- applied. add and compare_and_set then sync and read once: if the node is
-- still at the version we wrote against, or moved on by one write that is
-- not ours, ours did not happen and we retry; otherwise they return the
-- error ("connectionloss", "sessionexpired", "timeout") with a detail
-- saying the outcome is unknown. set() returns that error at once. Never a
-- blind second write.
-- Session expiry changes nothing else: the node is persistent.
local type, error, pairs, tostring, tonumber, setmetatable, getmetatable =
    type, error, pairs, tostring, tonumber, setmetatable, getmetatable
local format, match, byte, char = string.format, string.match, string.byte, string.char
local floor, min, max = math.floor, math.min, math.max
local random = require("zkcoord.core").random
local queue = require "zkcoord.queue"

-- Lua 5.3+: values as integers (math.tointeger is not in every VM).
local tointeger = rawget(math, "tointeger") or function(v) return v end

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }

local MAX = 2 ^ 53 - 1
local INT32_MIN, INT32_MAX = -2 ^ 31, 2 ^ 31 - 1
local TWO32 = 2 ^ 32

local OPT_KEYS = { initial = "number", max_tries = "number", base_delay = "number",
                   max_delay = "number", format = "string", fair = "boolean",
                   timeout = "number" }

local DEFAULTS = { initial = 0, max_tries = 100, base_delay = 0.005, max_delay = 0.25,
                   format = "text", fair = true, timeout = 60 }

-- The marker of a waiting add's node under the counter's node.
local LINE_MARKER = "add-"

-- Outcome of a write whose reply was lost is to be found out.
local UNKNOWN = { connectionloss = true, operationtimeout = true, timeout = true,
                  sessionexpired = true, sessionmoved = true }


local function is_int(v)
    return type(v) == "number" and v == v and v % 1 == 0 and v >= -MAX and v <= MAX
end


local function check_self(self, name)
    if getmetatable(self) ~= mt then
        error(("'%s' must be called on a counter (use c:%s(...))"):format(name, name), 3)
    end
end


-- The formats: range (lo..hi), encode(v) -> data, decode(data) -> v | nil, detail.
-- Big-endian two's complement as Java's ByteBuffer writes ints and longs,
-- with string.byte/char arithmetic (exact in doubles: every value is within
-- 2^53).

local function decode_text(data)
    local v = match(data, "^%s*(%-?%d+)%s*$") and tonumber(data)
    if not is_int(v) then
        return nil, "holds no integer in -(2^53-1)..2^53-1: " .. format("%q", data:sub(1, 40))
    end
    return v
end


local function encode_int32(v)
    if v < 0 then
        v = v + TWO32
    end
    return char(floor(v / 16777216) % 256, floor(v / 65536) % 256, floor(v / 256) % 256, v % 256)
end


local function decode_int32(data)
    if #data ~= 4 then
        return nil, ("holds %d bytes, not a 4-byte int (format int32)"):format(#data)
    end
    local b1, b2, b3, b4 = byte(data, 1, 4)
    local v = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
    if b1 >= 128 then
        v = v - TWO32
    end
    return tointeger(v)
end


local function encode_int64(v)
    local hi = floor(v / TWO32)            -- -2^21 .. 2^21-1
    local lo = v - hi * TWO32              -- 0 .. 2^32-1
    if hi < 0 then
        hi = hi + TWO32
    end
    return encode_int32(hi) .. encode_int32(lo)
end


local function decode_int64(data)
    if #data ~= 8 then
        return nil, ("holds %d bytes, not an 8-byte long (format int64)"):format(#data)
    end
    local b1, b2, b3, b4, b5, b6, b7, b8 = byte(data, 1, 8)
    local hi = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
    local lo = ((b5 * 256 + b6) * 256 + b7) * 256 + b8
    if b1 >= 128 then
        hi = hi - TWO32
    end
    -- |hi| < 2^21 keeps hi * 2^32 + lo exact; the range check does the rest.
    local v = (hi >= -2097152 and hi < 2097152) and hi * TWO32 + lo
    if not (v and v >= -MAX and v <= MAX) then
        return nil, ("holds a long beyond what a Lua number represents exactly, "
                     .. "+-(2^53-1): 0x%02x%02x%02x%02x%02x%02x%02x%02x")
                    :format(b1, b2, b3, b4, b5, b6, b7, b8)
    end
    return tointeger(v)
end


local FORMATS = {
    text = { lo = -MAX, hi = MAX, range = "-(2^53-1)..2^53-1",
             encode = function(v) return format("%d", v) end, decode = decode_text },
    int32 = { lo = INT32_MIN, hi = INT32_MAX, range = "-2^31..2^31-1",
              encode = encode_int32, decode = decode_int32 },
    int64 = { lo = -MAX, hi = MAX, range = "-(2^53-1)..2^53-1",
              encode = encode_int64, decode = decode_int64 },
}

-- For tests and tools: the formats' encoders and decoders.
_M.formats = FORMATS


local function check_int(v, fname, n, what)
    if not is_int(v) then
        error(("bad argument #%d to '%s' (%s must be an integer in -(2^53-1)..2^53-1, got %s)")
              :format(n, fname, what, type(v) == "number" and format("%.17g", v) or type(v)), 3)
    end
    return v
end


-- A value the format cannot store: nil, "invalid", detail (a runtime
-- condition: the value may come from the server, as `cur + delta`).
local function out_of_range(self, v)
    local f = self._format
    if v < f.lo or v > f.hi then
        return ("%s is outside format %s's range %s"):format(format("%d", v), self._opts.format,
                                                            f.range)
    end
end


local function encode(self, v)
    return self._format.encode(v)
end


---@class zkcoord.counter_opts
---@field initial integer?    value of a counter created on first use (default 0)
---@field format string?      "text" (default: decimal text, kazoo's), "int32" (Curator's
---                           SharedCount) or "int64" (Curator's DistributedAtomicLong)
---@field fair boolean?       under contention adds take turns in a line (default true);
---                           false: the last winner may write again at once (faster, unfair)
---@field timeout number?     seconds an add may wait for its turn in the line (default 60)
---@field max_tries integer?  write attempts per call before giving up with "timeout" (default 100)
---@field base_delay number?  first backoff after a lost race, seconds (default 0.005)
---@field max_delay number?   longest backoff, seconds (default 0.25)

--- client:counter(path, opts) -> counter (no server state until first use).
---@param client table a zkcoord client
---@param path string the counter's node
---@param opts zkcoord.counter_opts?
---@return table counter
function _M.new(client, path, opts)
    opts = opts or {}
    if type(opts) ~= "table" then
        error("bad argument #2 to 'counter' (opts must be a table)", 2)
    end
    for k, v in pairs(opts) do
        local want = OPT_KEYS[k]
        if not want then
            error("bad argument #2 to 'counter' (unknown option '" .. tostring(k) .. "')", 2)
        end
        if type(v) ~= want then
            error("bad argument #2 to 'counter' (option '" .. k .. "' must be a " .. want .. ")", 2)
        end
    end
    client.check_path(path, "counter", 1)
    local o = {}
    for k, v in pairs(DEFAULTS) do o[k] = v end
    for k, v in pairs(opts) do o[k] = v end
    local f = FORMATS[o.format]
    if not f then
        error("bad argument #2 to 'counter' (format must be \"text\", \"int32\" or \"int64\", got "
              .. format("%q", o.format) .. ")", 2)
    end
    if not (is_int(o.initial) and o.initial >= f.lo and o.initial <= f.hi) then
        error(("bad argument #2 to 'counter' (initial must be an integer in %s for format %s)")
              :format(f.range, o.format), 2)
    end
    if o.max_tries < 1 or o.max_tries % 1 ~= 0 then
        error("bad argument #2 to 'counter' (max_tries must be an integer >= 1)", 2)
    end
    -- finite: a backoff of math.huge would sleep forever after one lost race
    if not (o.base_delay >= 0 and o.max_delay >= 0 and o.base_delay < 1e9 and o.max_delay < 1e9)
            or o.max_tries >= 1e9 then
        error("bad argument #2 to 'counter' (delays must be finite non-negative seconds, "
              .. "max_tries below 1e9)", 2)
    end
    if not (o.timeout >= 0 and o.timeout < 1e9) then
        error("bad argument #2 to 'counter' (timeout must be finite non-negative seconds)", 2)
    end
    return setmetatable({
        client = client,
        path = path,
        _opts = o,
        _format = f,
        _value = nil,       -- value and version of our last reply
        _version = nil,
        _contended = false, -- our last write saw adds waiting in the line
        _line = nil,        -- our place in the line (a zkcoord.queue position)
        _stats = { adds = 0, cas_attempts = 0, cas_failures = 0 },
        _writing = false,   -- an add of this object is writing now
        _joiners = {},      -- adds waiting for the next write, in order
    }, mt)
end


-- Parses node data; empty data is the initial value.
local function decode(self, data)
    if data == "" then
        return self._opts.initial
    end
    local v, detail = self._format.decode(data)
    if v == nil then
        return nil, "invalid", "counter " .. self.path .. " " .. detail
    end
    return v
end


-- Reads value and version (creating the node with `initial` if missing).
function _M:_read()
    local client, path = self.client, self.path
    for _ = 1, 3 do
        local data, stat = client:get(path)
        if data then
            local v, err, detail = decode(self, data)
            if not v then
                return nil, err, detail
            end
            self._value, self._version = v, stat.version
            return v, stat
        end
        if stat ~= "nonode" then
            return nil, stat
        end
        local ok, err = client:create(path, encode(self, self._opts.initial), { parents = true })
        if not ok and err ~= "nodeexists" then
            return nil, err
        end
    end
    return nil, "nonode"   -- deleted as fast as we create it
end


-- After a write whose reply was lost: did it happen? false means surely
-- not (retry), nil means we cannot tell. sync() first: after a reconnect
-- our server may lag behind the leader, and a stale "not yet" would make
-- us apply the same add twice.
function _M:_applied(expected_version, data)
    local client = self.client
    if not client:sync(self.path) then
        return nil
    end
    local cur, stat = client:get(self.path)
    if not cur then
        return nil
    end
    if stat.version == expected_version
            or (stat.version == expected_version + 1 and cur ~= data) then
        return false
    end
    return nil
end


-- Backs off after a lost race: jittered, doubling up to max_delay.
local function backoff(self, delay)
    self.client:waiter():sleep(delay * (0.5 + random()))
    return min(delay * 2, self._opts.max_delay)
end


-- Checks a computed value against the format; nil, "invalid", detail if
-- it cannot be stored.
local function checked(self, new, err, detail)
    if new then
        local why = out_of_range(self, new)
        if why then
            return nil, "invalid", "counter " .. self.path .. ": " .. why
        end
    end
    return new, err, detail
end


-- The fast write loop of add and compare_and_set (opts.fair = false, or
-- no line seen). compute(value) returns the value to write, false to stop
-- without writing (compare_and_set: not the expected value), or nil, err,
-- detail. In fair mode a lost race sends the call to the line
-- (returns `nil, nil, "line"`).
function _M:_update_fast(compute)
    local client, o, st = self.client, self._opts, self._stats
    local delay = o.base_delay
    -- Has the value been read from the server during this call? A value
    -- from an earlier reply is good enough to try a versioned write with
    -- (a badversion tells us it was old news), not to refuse one.
    local fresh = false
    for try = 1, o.max_tries do
        if self._version == nil then
            local v, err, detail = self:_read()
            if v == nil then
                return nil, err, detail
            end
            fresh = true
        end
        local new, err, detail = checked(self, compute(self._value))
        if not new and not fresh then
            self._version = nil
        elseif not new then
            return new, err, detail
        else
            local data, version = encode(self, new), self._version
            st.cas_attempts = st.cas_attempts + 1
            local stat, serr = client:set(self.path, data, version)
            if stat then
                self._value, self._version = new, stat.version
                -- Adds waiting in the line (children of our node): our
                -- next add queues behind them instead of overtaking them.
                self._contended = o.fair and (stat.num_children or 0) > 0
                return new
            end
            self._version = nil
            if serr == "badversion" then
                st.cas_failures = st.cas_failures + 1
                if o.fair then
                    return nil, nil, "line"
                end
                if try < o.max_tries then
                    delay = backoff(self, delay)
                end
            elseif UNKNOWN[serr] and not client._closed then
                if self:_applied(version, data) ~= false then
                    return nil, serr, "the write may or may not have been applied"
                end
            elseif serr ~= "nonode" then   -- nonode: deleted, the next read creates it
                return nil, serr
            end
        end
    end
    return nil, "timeout", ("gave up after %d attempts"):format(o.max_tries)
end


-- The fair write under contention: take a place in the line (an
-- ephemeral-sequential child of the counter's node, zkcoord.queue, first
-- in line is through), read, and write the value and delete our place in
-- one multi, so the next in line is woken by our write itself.
function _M:_update_in_line(compute)
    local client, o, st, path = self.client, self._opts, self._stats, self.path
    local q = self._line
    if not q then
        q = queue.new(client, path, { marker = LINE_MARKER, rule = queue.rule_first,
                                      parents = "persistent" })
        self._line = q
    end
    local deadline = client:waiter():now() + o.timeout
    local delay = o.base_delay
    for try = 1, o.max_tries do
        if not q:node() or not q:is_through() then
            local ok, err = q:enter(max(0, deadline - client:waiter():now()))
            if not ok then
                return nil, err, err == "timeout" and "waited too long for our turn" or nil
            end
        end
        local v, err, detail = self:_read()
        if v == nil then
            q:leave()
            return nil, err, detail
        end
        local new
        new, err, detail = checked(self, compute(v))
        if not new then
            q:leave()
            return new, err, detail
        end
        local data, version = encode(self, new), self._version
        st.cas_attempts = st.cas_attempts + 1
        local res, merr, results = client:multi {
            { op = "set", path = path, data = data, version = version },
            { op = "delete", path = q:node() },
        }
        if res then
            q:_forget()
            local stat = res[1].stat
            self._value, self._version = new, stat.version
            -- our own place counted too, deleted after the set
            self._contended = (stat.num_children or 0) > 1
            return new
        end
        self._version = nil
        local serr = results and results[1] and results[1].err
        if serr == "badversion" then
            -- a writer outside the line (fair = false, another library)
            st.cas_failures = st.cas_failures + 1
            if try < o.max_tries then
                delay = backoff(self, delay)
            end
        elseif serr == "nonode" or (results and results[2] and results[2].err == "nonode") then
            q:_forget()        -- our place went (a new session, or with the node): queue again
        elseif UNKNOWN[merr] and not client._closed then
            if self:_applied(version, data) ~= false then
                q:leave()
                return nil, merr, "the write may or may not have been applied"
            end
        else
            q:leave()
            return nil, serr or merr
        end
    end
    q:leave()
    return nil, "timeout", ("gave up after %d attempts"):format(o.max_tries)
end


-- add and compare_and_set: the fast write, or the line under contention.
function _M:_update(compute)
    if not (self._opts.fair and self._contended) then
        local v, err, detail = self:_update_fast(compute)
        if not (v == nil and err == nil and detail == "line") then
            return v, err, detail
        end
    end
    local v, err, detail = self:_update_in_line(compute)
    if v == nil and err ~= nil then
        self._contended = false   -- a failure: the next call starts afresh
    end
    return v, err, detail
end


--- The current value (read from the server; creates the node if missing).
---@return integer|nil value, string? err, string? detail
function _M:get()
    check_self(self, "get")
    local v, err, detail = self:_read()
    if v == nil then
        return nil, err, detail
    end
    return v
end


-- Writes one compare-and-set for `slots` (ours first, then those that
-- queued while the previous write was in flight), gives each its own value
-- in order, wakes them, and hands the lead to the first that queued since
-- (a `solo` write, outside the line, hands nothing on).
function _M:_lead(slots, solo)
    local total = 0
    for _, slot in ipairs(slots) do
        slot.taken = true
        total = total + slot.delta
    end
    local v, err, detail = self:_update(function(cur)
        local new = cur + total
        if not is_int(new) then
            return nil, "invalid", ("%s + %s leaves the integer range"):format(
                format("%d", cur), format("%d", total))
        end
        return new
    end)
    if v ~= nil then
        -- The one write moved the value by `total`: as if the adds ran one
        -- after another at that instant, each sees its own step.
        local running = v - total
        for _, slot in ipairs(slots) do
            running = running + slot.delta
            slot.value = running
        end
        self._stats.adds = self._stats.adds + #slots
    else
        for _, slot in ipairs(slots) do
            slot.err, slot.detail = err, detail
        end
    end
    local queued = self._joiners
    if solo then
        return slots[1].value, slots[1].err, slots[1].detail
    elseif #queued > 0 then
        self._joiners = {}
        queued[1].lead = queued      -- the next write is theirs
        queued[1].ev:set()
    else
        self._writing = false
    end
    for i = 2, #slots do
        slots[i].ev:set()
    end
    return slots[1].value, slots[1].err, slots[1].detail
end


--- Adds `delta` (may be negative) and returns the new value: no other
--- add() anywhere returns the same step. Concurrent adds on this object
--- (coroutines, nginx requests) share one compare-and-set: while a write is
--- in flight the next ones queue, and the following write carries their sum.
---@param delta integer? default 1
---@return integer|nil value, string? err "timeout" | "invalid" | a ZooKeeper code, string? detail
function _M:add(delta)
    check_self(self, "add")
    if delta == nil then
        delta = 1
    end
    check_int(delta, "add", 1, "delta")
    if not self._writing then
        self._writing = true
        return self:_lead({ { delta = delta } })
    end
    local w = self.client:waiter()
    if not (w.yields and w:yields()) then
        -- Waiting here would block the thread that the write in flight
        -- needs to finish (a callback run inside its wait, or the main
        -- thread while a spawned coroutine writes): write on our own.
        return self:_lead({ { delta = delta } }, true)
    end
    local slot = { delta = delta, ev = w:event() }
    local queued = self._joiners
    queued[#queued + 1] = slot
    local o = self._opts
    local bound = o.timeout + o.max_tries * (self.client._request_timeout + o.max_delay)
    while not slot.ev:wait(bound) do
        if not slot.taken then
            -- Never written: leave the queue, nothing happened.
            for i, s in ipairs(self._joiners) do
                if s == slot then
                    table.remove(self._joiners, i)
                    break
                end
            end
            return nil, "timeout", "waited too long for this process's previous add"
        end
    end
    if slot.lead then
        return self:_lead(slot.lead)
    end
    return slot.value, slot.err, slot.detail
end


--- Sets the value, whatever it was.
---@param value integer
---@return true|nil ok, string? err, string? detail
function _M:set(value)
    check_self(self, "set")
    check_int(value, "set", 1, "value")
    local why = out_of_range(self, value)
    if why then
        return nil, "invalid", "counter " .. self.path .. ": " .. why
    end
    local client, path = self.client, self.path
    local stat, err = client:set(path, encode(self, value))
    if err == "nonode" then
        local ok
        ok, err = client:create(path, encode(self, value), { parents = true })
        if ok then
            self._value, self._version = value, 0
            return true
        end
        if err == "nodeexists" then
            stat, err = client:set(path, encode(self, value))
        end
    end
    if not stat then
        self._version = nil
        if UNKNOWN[err] then
            return nil, err, "the write may or may not have been applied"
        end
        return nil, err
    end
    self._value, self._version = value, stat.version
    return true
end


--- Sets `new` if the value is `old` now. false: it is not (nothing written).
---@param old integer
---@param new integer
---@return boolean|nil swapped, string? err, string? detail
function _M:compare_and_set(old, new)
    check_self(self, "compare_and_set")
    check_int(old, "compare_and_set", 1, "old")
    check_int(new, "compare_and_set", 2, "new")
    local v, err, detail = self:_update(function(cur)
        return cur == old and new
    end)
    if v == nil then
        return nil, err, detail
    end
    return v ~= false
end


--- Attempt counts since this object was made: successful adds, versioned
--- writes tried, and writes that lost a race ("badversion").
---@return table stats { adds =, cas_attempts =, cas_failures = }
function _M:stats()
    check_self(self, "stats")
    local s = self._stats
    return { adds = s.adds, cas_attempts = s.cas_attempts, cas_failures = s.cas_failures }
end


_M.mt = mt
return _M
