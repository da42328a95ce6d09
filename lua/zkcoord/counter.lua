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
-- version exactly one wins. Every successful add is a distinct step in
-- ZooKeeper's total order of writes: add() is linearizable and returns a
-- value no other add returns. The version of our last reply is reused, so
-- an uncontended add is one round trip, not a read and a write.
--
-- Fairness (opts.fair, default true). Reusing the version of one's own
-- reply lets the last winner write again at once while the losers read:
-- in a saturating loop one process would do nearly every add and a loser
-- would give up after max_tries. So under contention adds take turns: an add that lost a
-- race queues as an ephemeral-sequential child of the counter's node
-- ("_c_<uuid>-d<delta>-add-<seq>"); every set reply carries the node's
-- number of children, so a writer learns of waiting adds for free and its
-- next add queues behind them. The head of the line (no entry before it)
-- reads the counter and starts its turn with one multi: the versioned set
-- and its entry marked "t". For `turn` seconds (default 0.02) its adds are
-- single versioned sets from the version of its last reply, as the fast
-- path; its first add after that also deletes its entry, and the next in
-- line is the head. The next in line ends a turn whose holder stopped
-- adding (the counter still for turn / 2) by deleting its entry. So turns
-- go round in line order, each as fast as the uncontended counter. With
-- turn = 0 the head instead writes, in one multi, its own delta and every
-- delta queued behind it and marks those entries with their values
-- ("=<value>"); they read it and delete their entry (one write serves the
-- line: better for adds that come one at a time). With fair = false the
-- loser backs off (jittered, exponential) and reads again: faster in a
-- saturating loop, unfair. Writers outside the line (fair = false, kazoo,
-- Curator) are not ordered by it: the head retries against them with
-- backoff, max_tries times. compare_and_set never queues.
--
-- Node layout: <path> holds the value in opts.format:
--   "text"  (default) a decimal integer string ("42", "-7"), readable with
--           zkCli, kazoo's Counter default; -(2^53-1) .. 2^53-1
--   "int32" 4 bytes, big-endian two's complement: Curator's SharedCount;
--           -2^31 .. 2^31-1
--   "int64" 8 bytes, big-endian two's complement: Curator's
--           DistributedAtomicLong; only -(2^53-1) .. 2^53-1 (exact in a Lua
--           number): a stored long beyond that reads as nil, "invalid"
-- Empty data counts as `initial`. The node (and missing parents,
-- persistent) is created on first use with `initial`. A result outside the
-- format's range is nil, "invalid" (nothing written); data of another shape
-- is nil, "invalid" with a detail naming the path.
--
-- Reads (get) are ZooKeeper reads: sequentially consistent, possibly a
-- little behind another client's latest write; writes are linearizable.
--
-- Connection loss during a write: we cannot tell at once whether it was
-- applied. add and compare_and_set then sync and read once: if the node is
-- still at the version we wrote against, or moved on by one write that is
-- not ours, ours did not happen and we retry; otherwise they return the
-- error ("connectionloss", "sessionexpired", or "unknown" for our own
-- timeout) with a detail saying the outcome is unknown. set() returns that
-- error at once. Never a blind second write. A waiting add whose entry went with its session
-- returns "sessionexpired" with that detail (a head may have served it).
-- A write the server turned away ("sessionmoved", "throttledop": not
-- applied) is sent again after a backoff (base_delay .. max_delay, once
-- connected), up to max_tries times.
--
-- Modules: this one owns the public methods, their argument checks and
-- the combining of concurrent adds on one object (one write in flight per
-- object, the adds that queue meanwhile ride on the next);
-- zkcoord.counter.format the encodings, zkcoord.counter.write the
-- versioned writes to the node (the fast path), zkcoord.counter.line the
-- fair line and turns. They share the counter object's fields, listed in
-- new(); nothing outside them reads those.

local args = require "zkcoord.util.args"
local fmt = require "zkcoord.counter.format"
local write = require "zkcoord.counter.write"
local line = require "zkcoord.counter.line"
local unknown_outcome = require("zkcoord.errors").unknown_outcome
local contract = require "zkcoord.contract"

local type, pairs, setmetatable = type, pairs, setmetatable
local ipairs = ipairs
local format = string.format
local argerror = args.argerror
local is_int, FORMATS = fmt.is_int, fmt.formats
local MAYBE = write.MAYBE
local read, encode, out_of_range, update_fast = write.read, write.encode, write.out_of_range,
                                                write.update_fast
local send = write.send
local add_in_line, add_in_turn = line.add_in_line, line.add_in_turn

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = args.self_checker(mt, "counter", "c")

local OPT_KEYS = { "initial", "format", "fair", "timeout", "turn", "max_tries", "base_delay",
                   "max_delay" }
-- The type of each option but timeout (util.check_timeout checks that one).
local OPT_TYPES = { initial = "number", max_tries = "number", base_delay = "number",
                    max_delay = "number", format = "string", fair = "boolean", turn = "number" }

local DEFAULTS = { initial = 0, max_tries = 100, base_delay = 0.005, max_delay = 0.25,
                   format = "text", fair = true, timeout = 60, turn = 0.02 }


-- For tests and tools: the formats' encoders and decoders.
_M.formats = FORMATS


local function check_int(v, fname, n, what)
    if not is_int(v) then
        argerror(n, fname, ("%s must be an integer in -(2^53-1)..2^53-1, got %s")
                           :format(what, type(v) == "number" and format("%.17g", v) or type(v)))
    end
    return v
end


---@class zkcoord.counter_opts
---@field initial integer?    value of a counter created on first use (default 0)
---@field format string?      "text" (default: decimal text, kazoo's), "int32" (Curator's
---                           SharedCount) or "int64" (Curator's DistributedAtomicLong)
---@field fair boolean?       under contention adds take turns in a line (default true);
---                           false: the last winner may write again at once (faster, unfair)
---@field timeout number?     seconds an add may wait for its turn in the line (default 60)
---@field turn number?        seconds the head of the line keeps writing at once (default 0.02;
---                           0: one write per turn)
---@field max_tries integer?  write attempts per call before giving up with "timeout" (default 100)
---@field base_delay number?  first backoff after a lost race or a write turned away,
---                           seconds (default 0.005)
---@field max_delay number?   longest backoff, seconds (default 0.25)

--- client:counter(path, opts) -> counter (no server state until first use).
---@param client table a zkcoord client
---@param path string the counter's node
---@param opts zkcoord.counter_opts?
---@return table counter
function _M.new(client, path, opts)
    opts = args.check_opts(opts, OPT_KEYS, "counter", 2)
    for k, v in pairs(opts) do
        local want = OPT_TYPES[k]
        if want and type(v) ~= want then
            argerror(2, "counter", "option '" .. k .. "' must be a " .. want)
        end
    end
    args.check_timeout(opts.timeout, "counter", 2)
    contract.check_path(path, "counter", 1)
    local o = {}
    for k, v in pairs(DEFAULTS) do o[k] = v end
    for k, v in pairs(opts) do o[k] = v end
    local f = FORMATS[o.format]
    if not f then
        argerror(2, "counter", "format must be \"text\", \"int32\" or \"int64\", got "
                               .. format("%q", o.format))
    end
    if not (is_int(o.initial) and o.initial >= f.lo and o.initial <= f.hi) then
        argerror(2, "counter", ("initial must be an integer in %s for format %s")
                               :format(f.range, o.format))
    end
    if o.max_tries < 1 or o.max_tries % 1 ~= 0 then
        argerror(2, "counter", "max_tries must be an integer >= 1")
    end
    -- finite: a backoff of math.huge would sleep forever after one lost race;
    -- above 600 s, milliseconds by mistake (the connect options' rule)
    args.check_seconds(o.base_delay, "base_delay", "counter", 2, true)
    args.check_seconds(o.max_delay, "max_delay", "counter", 2, true)
    if o.max_tries >= 1e9 then
        argerror(2, "counter", "max_tries must be below 1e9")
    end
    if not (o.turn >= 0 and o.turn <= 10) then
        argerror(2, "counter", "turn must be 0 .. 10 seconds")
    end
    return setmetatable({
        client = client,
        path = path,
        _opts = o,
        _policy = { max_tries = o.max_tries, base_delay = o.base_delay,
                    max_delay = o.max_delay },   -- retries of a write the server turned away
        _format = f,
        _value = nil,       -- value and version of our last reply
        _version = nil,
        _contended = false, -- our last write saw adds waiting in the line
        _turn = nil,        -- { node =, ends = } while our turn in the line lasts
        _stats = { adds = 0, cas_attempts = 0, cas_failures = 0 },
        _writing = false,   -- an add of this object is writing now
        _joiners = {},      -- adds waiting for the next write, in order
    }, mt)
end


-- One write of `total` (the adds riding on it): in our turn, else the fast
-- write, else (a lost race in fair mode, or adds seen waiting) the line.
local function add_total(self, total)
    local function compute(cur)
        local new = cur + total
        if not is_int(new) then
            return nil, "invalid", ("%s + %s leaves the integer range"):format(
                format("%d", cur), format("%d", total))
        end
        return new
    end
    if self._turn then
        local v, err, detail = add_in_turn(self, compute)
        if not (v == nil and err == nil and detail == "line") then
            return v, err, detail
        end
    elseif not (self._opts.fair and self._contended) then
        local v, err, detail = update_fast(self, compute)
        if not (v == nil and err == nil and detail == "line") then
            return v, err, detail
        end
    end
    if not is_int(total) then
        return nil, "invalid", "the adds' sum leaves the integer range"
    end
    local v, err, detail = add_in_line(self, total)
    if v == nil and err ~= nil then
        self._contended = false   -- a failure: the next call starts afresh
    end
    return v, err, detail
end


--- The current value (read from the server; creates the node if missing).
---@return integer|nil value, string? err, string? detail
function _M:get()
    check_self(self, "get")
    local v, err, detail = read(self)
    if v == nil then
        return nil, err, detail
    end
    return v
end


-- Writes one compare-and-set for `slots` (ours first, then those that
-- queued while the previous write was in flight), gives each its own value
-- in order, wakes them, and hands the lead to the first that queued since
-- (a `solo` write, outside the line, hands nothing on).
local function lead(self, slots, solo)
    local total = 0
    for _, slot in ipairs(slots) do
        slot.taken = true
        total = total + slot.delta
    end
    local v, err, detail = add_total(self, total)
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
        return lead(self, { { delta = delta } })
    end
    local w = self.client:waiter()
    if not (w.yields and w:yields()) then
        -- Waiting here would block the thread that the write in flight
        -- needs to finish (a callback run inside its wait, or the main
        -- thread while a spawned coroutine writes): write on our own.
        return lead(self, { { delta = delta } }, true)
    end
    local slot = { delta = delta, ev = w:event() }
    local queued = self._joiners
    queued[#queued + 1] = slot
    local o = self._opts
    local bound = o.timeout + o.max_tries * (contract.request_timeout(self.client) + o.max_delay)
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
        return lead(self, slot.lead)
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
    local stat, err = send(self, nil, client.set, path, encode(self, value))
    if err == "nonode" then
        local ok
        ok, err = send(self, nil, client.create, path, encode(self, value), { parents = true })
        if ok then
            self._value, self._version = value, 0
            return true
        end
        if err == "nodeexists" then
            stat, err = send(self, nil, client.set, path, encode(self, value))
        end
    end
    if not stat then
        self._version = nil
        if unknown_outcome[err] then
            return write.maybe(err, MAYBE)
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
    local v, err, detail = update_fast(self, function(cur)
        return cur == old and new
    end, true)
    if v == nil then
        return nil, err, detail
    end
    return v ~= false
end


--- Attempt counts since this object was made: successful adds, versioned
--- writes tried, and those that wrote nothing (a lost race, "badversion";
--- a turn the next in line ended; a lost reply found not applied).
---@return table stats { adds =, cas_attempts =, cas_failures = }
function _M:stats()
    check_self(self, "stats")
    local s = self._stats
    return { adds = s.adds, cas_attempts = s.cas_attempts, cas_failures = s.cas_failures }
end


_M.mt = mt
return _M
