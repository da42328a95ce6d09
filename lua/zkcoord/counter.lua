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
-- in a saturating loop one process did nearly every add and a loser gave up
-- after max_tries. So under contention adds take turns: an add that lost a
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
-- line: better for adds that come one at a time). See _add_in_line. With
-- fair = false the loser backs off
-- (jittered, exponential) and reads again, as before: faster in a
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
-- error ("connectionloss", "sessionexpired", "timeout") with a detail
-- saying the outcome is unknown. set() returns that error at once. Never a
-- blind second write. A waiting add whose entry went with its session
-- returns "sessionexpired" with that detail (a head may have served it).
local type, error, pairs, tostring, tonumber, setmetatable, getmetatable, select =
    type, error, pairs, tostring, tonumber, setmetatable, getmetatable, select
local format, match, byte, char = string.format, string.match, string.byte, string.char
local floor, min, max = math.floor, math.min, math.max
local core = require "zkcoord.core"
local random = core.random
local ipairs, sort = ipairs, table.sort

-- Lua 5.3+: values as integers (math.tointeger is not in every VM).
local tointeger = rawget(math, "tointeger") or function(v) return v end

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }

local MAX = 2 ^ 53 - 1
local INT32_MIN, INT32_MAX = -2 ^ 31, 2 ^ 31 - 1
local TWO32 = 2 ^ 32

local OPT_KEYS = { initial = "number", max_tries = "number", base_delay = "number",
                   max_delay = "number", format = "string", fair = "boolean",
                   timeout = "number", turn = "number" }

local DEFAULTS = { initial = 0, max_tries = 100, base_delay = 0.005, max_delay = 0.25,
                   format = "text", fair = true, timeout = 60, turn = 0.02 }

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
---@field turn number?        seconds the head of the line keeps writing at once (default 0.02;
---                           0: one write per turn)
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
    if not (o.turn >= 0 and o.turn <= 10) then
        error("bad argument #2 to 'counter' (turn must be 0 .. 10 seconds)", 2)
    end
    return setmetatable({
        client = client,
        path = path,
        _opts = o,
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
function _M:_update_fast(compute, no_line)
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
                if o.fair and not no_line then
                    return nil, nil, "line"
                end
                if try < o.max_tries then
                    delay = backoff(self, delay)
                end
            elseif UNKNOWN[serr] and not client:is_closed() then
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


-- The line of waiting adds: ephemeral-sequential children of the counter's
-- node, "_c_<uuid>-d<delta>-add-<seq>", data "d<delta>" while waiting and
-- "=<value>" once a head wrote that add.
local ENTRY_NAME = "_c_%s-d%s-add-"
local ENTRY_PARTS = "^_c_.*%-d(%-?%d+)%-add%-(%d+)$"

local function by_seq(x, y)
    return x.seq < y.seq
end

-- The watch's upvalue must not live on the waiting coroutine's stack.
-- The blocking waiter resumes a spawned coroutine twice when its event is
-- set in the same turn of run() in which its timed wait falls due (the
-- second time inside its next wait, which then reports a timeout): our
-- timed waits (a turn's idle check) are common, so the waker marks the
-- coroutine woken first, as that waiter's own timeout does.
local function waker(ev)
    return function()
        local co, w = rawget(ev, "co"), rawget(ev, "waiter")
        local tasks = type(w) == "table" and rawget(w, "tasks")
        if co and type(tasks) == "table" and type(tasks[co]) == "table" then
            tasks[co] = true
        end
        ev:set()
    end
end


-- Our entry was written by a head: its value is ours. Deletes the entry.
function _M:_consumed(node, data)
    local v = tointeger(tonumber(data:sub(2)))
    self.client:delete_guaranteed(node)
    self._version = nil          -- we did not see the counter's version
    self._contended = true
    return v
end


-- Leaves the line without our add, unless a head wrote it meanwhile.
function _M:_leave(node, err, detail)
    local client = self.client
    local ok, derr = client:delete(node, 0)      -- only while not written
    if ok or derr == "nonode" then
        return nil, err, detail
    end
    if derr == "badversion" then
        local data = client:get(node)
        if data and data:sub(1, 1) == "=" then
            return self:_consumed(node, data)
        end
    end
    client:delete_guaranteed(node, 0)
    return nil, err, "the add may or may not have been applied"
end


-- The fair add under contention. Each waiting add is an entry in the line,
-- its delta in its name. The head (no entry before it) reads the counter
-- and lists the line (one round trip) and writes in one multi: the counter
-- (a versioned set) and its own entry marked "t" (its turn: see
-- _add_in_turn). With turn = 0 it writes the counter moved by its own delta
-- and every delta queued behind it, marks each of those entries with its
-- value ("=<value>", a set at version 0: an entry served or gone fails the
-- multi, nothing is counted twice) and deletes its own; the ones it served
-- wake on their entry's change, read their value and delete their entry.
-- A waiter watches its predecessor only.
function _M:_add_in_line(delta)
    local client, o, st, path = self.client, self._opts, self._stats, self.path
    local w = client:waiter()
    local deadline = w:now() + o.timeout
    local function left()
        return max(0, deadline - w:now())
    end
    local dtext = format("%d", delta)
    local node, err
    for _ = 1, 3 do
        node, err = client:create(path .. "/" .. ENTRY_NAME:format(core.uuid(), dtext),
                                  "d" .. dtext, { ephemeral = true, sequential = true })
        if node or err ~= "nonode" then
            break
        end
        local v, rerr, rdetail = self:_read()          -- creates the counter's node
        if v == nil then
            return nil, rerr, rdetail
        end
    end
    if not node then
        if UNKNOWN[err] then
            return nil, err, "the add may or may not have been applied"
        end
        return nil, err
    end
    local name = node:match("[^/]+$")
    local myseq = tonumber(select(2, match(name, ENTRY_PARTS)))
    local delay, tries = o.base_delay, 0
    local pred              -- the entry just before ours, from the last listing
    local listed            -- that listing: entries in sequence order
    local idle = max(0.005, o.turn / 2)
    local idle_since, idle_version, idle_pred    -- a predecessor in its turn, seen still
    -- Nobody ahead moves (a dead process's waiting entry, until its session
    -- expires; or a slow one): after `stall` seconds of a still counter we
    -- go on as the head. Versioned writes keep the counter exact whoever
    -- writes; only the order bends, and only then.
    local stall = max(0.1, 5 * o.turn)
    local stall_since, stall_version, stall_pred
    while true do
        local ev = w:event()
        local wake = waker(ev)
        local fnames = client:send("children", path)
        local fcounter = client:send("get", path)
        local fmine = client:send("get", node, wake)
        local fpred = pred and client:send("get", pred.path, wake)
        local names, cerr = fnames:wait()
        local data, vstat = fcounter:wait()
        local mine, mstat = fmine:wait()
        local pdata = fpred and fpred:wait()
        if mine and mine:sub(1, 1) == "=" then
            return self:_consumed(node, mine)
        elseif not mine then
            -- our entry went without our delete: our session ended
            return nil, mstat == "nonode" and "sessionexpired" or mstat,
                   "the add may or may not have been applied"
        elseif not names then
            return self:_leave(node, cerr)
        elseif not data then
            return self:_leave(node, vstat)
        end
        listed = {}
        local newpred
        for _, n in ipairs(names) do
            local d, seq = match(n, ENTRY_PARTS)
            if seq and n ~= name then
                local e = { name = n, seq = tonumber(seq), delta = tonumber(d),
                            path = path .. "/" .. n }
                listed[#listed + 1] = e
                if e.seq < myseq and (not newpred or e.seq > newpred.seq) then
                    newpred = e
                end
            end
        end
        sort(listed, by_seq)
        -- We are the head when no entry is before us. Otherwise we wait for
        -- our predecessor (read with a watch: a new one is read first): a
        -- waiting one ("d") or a served one ("=", its owner deletes it) until
        -- it changes; one in its turn ("t") until it changes or the counter
        -- stays still for `idle` seconds (its owner stopped adding): then we
        -- delete its entry and go on.
        local same = pred and newpred and newpred.name == pred.name
        if newpred == nil then
            idle_since = nil
        elseif not same or not pdata then
            pred = newpred     -- look again now, with a watch on it
            idle_since = nil
        elseif pdata == "t" then
            local t = w:now()
            if idle_since and idle_version == vstat.version and idle_pred == pred.name
                    and t - idle_since >= idle then
                client:delete(pred.path, 1)          -- still in that turn: ended
                idle_since = nil
            else
                if not (idle_since and idle_version == vstat.version
                        and idle_pred == pred.name) then
                    idle_since, idle_version, idle_pred = t, vstat.version, pred.name
                end
                ev:wait(min(idle, left()))
            end
        else
            local t = w:now()
            if stall_since and stall_version == vstat.version and stall_pred == pred.name
                    and t - stall_since >= stall then
                newpred, stall_since = nil, nil      -- on as the head
            else
                if not (stall_since and stall_version == vstat.version
                        and stall_pred == pred.name) then
                    stall_since, stall_version, stall_pred = t, vstat.version, pred.name
                end
                if left() == 0 then
                    return self:_leave(node, "timeout", "waited too long for our turn")
                end
                ev:wait(min(stall, left()))
            end
        end
        if newpred == nil then      -- the head
            local cur, derr, ddetail = decode(self, data)
            if cur == nil then
                return self:_leave(node, derr, ddetail)
            end
            local mine_v = cur + delta
            local why = not is_int(mine_v) and "leaves the integer range"
                        or out_of_range(self, mine_v)
            if why then
                return self:_leave(node, "invalid", ("counter %s: %s + %s: %s"):format(
                    path, format("%d", cur), dtext, why))
            end
            local ops = { { op = "set", path = path, version = vstat.version } }
            local running = mine_v
            for _, e in ipairs(listed) do
                if e.seq > myseq and o.turn == 0 then   -- a turn serves only its own
                    local nv = e.delta and running + e.delta
                    if not (nv and is_int(nv) and not out_of_range(self, nv)) then
                        break            -- that one finds out itself, as head
                    end
                    running = nv
                    ops[#ops + 1] = { op = "set", path = e.path,
                                      data = "=" .. format("%d", nv), version = 0 }
                end
            end
            local served = #ops - 1
            ops[1].data = encode(self, running)
            if o.turn > 0 then
                -- our turn begins: our next adds for `turn` seconds write at once
                ops[#ops + 1] = { op = "set", path = node, data = "t", version = 0 }
            else
                ops[#ops + 1] = { op = "delete", path = node, version = 0 }
            end
            st.cas_attempts = st.cas_attempts + 1
            local res, merr, results = client:multi(ops)
            if res then
                local stat = res[1].stat
                self._value, self._version = running, stat.version
                if o.turn > 0 then
                    self._turn = { node = node, ends = w:now() + o.turn }
                    self._contended = true
                else
                    -- still others waiting (beyond us and those we served)?
                    self._contended = (stat.num_children or 0) > served + 1
                end
                return tointeger(mine_v)
            end
            local cas_err = results and results[1] and results[1].err
            if cas_err == "badversion" then
                -- a writer outside the line (fair = false, another library)
                st.cas_failures = st.cas_failures + 1
                tries = tries + 1
                if tries >= o.max_tries then
                    return self:_leave(node, "timeout",
                                       ("gave up after %d attempts"):format(o.max_tries))
                end
                delay = backoff(self, delay)
            elseif UNKNOWN[merr] and not client:is_closed() then
                if self:_applied(vstat.version, ops[1].data) ~= false then
                    client:delete_guaranteed(node, 0)
                    return nil, merr, "the write may or may not have been applied"
                end
            elseif not (results and results[1]) or (cas_err and cas_err ~= "runtimeinconsistency") then
                return self:_leave(node, merr)
            end
            -- else an entry behind us left or was served (two heads after
            -- a leave), or ours was served: look again
        end
        if left() == 0 then
            return self:_leave(node, "timeout", "waited too long for our turn")
        end
    end
end


-- An add in our turn: a versioned set from the version of our last reply;
-- the first after the turn's end also deletes our entry (the next in line
-- is the head then). `nil, nil, "line"`: the turn was lost (ended by the
-- next in line, or a writer outside the line): queue again.
function _M:_add_in_turn(compute)
    local client, st, turn = self.client, self._stats, self._turn
    local new, err, detail = checked(self, compute(self._value))
    if not new then
        return nil, err, detail          -- nothing written; the turn goes on
    end
    local data, version = encode(self, new), self._version
    st.cas_attempts = st.cas_attempts + 1
    local merr, cas_err
    if client:waiter():now() < turn.ends then
        local stat
        stat, merr = client:set(self.path, data, version)
        if stat then
            self._value, self._version = new, stat.version
            return new
        end
        cas_err = merr
    else
        local res, results
        res, merr, results = client:multi {
            { op = "set", path = self.path, data = data, version = version },
            { op = "delete", path = turn.node, version = 1 },
        }
        if res then
            self._turn = nil
            self._value, self._version = new, res[1].stat.version
            self._contended = (res[1].stat.num_children or 0) > 1
            return new
        end
        cas_err = results and results[1] and results[1].err
    end
    self._turn, self._version = nil, nil
    client:delete_guaranteed(turn.node, 1)    -- if it is still there, in our turn
    if cas_err == "badversion" then
        st.cas_failures = st.cas_failures + 1
    elseif UNKNOWN[merr] and not client:is_closed() then
        if self:_applied(version, data) ~= false then
            return nil, merr, "the write may or may not have been applied"
        end
    elseif cas_err ~= "runtimeinconsistency" and cas_err ~= "nonode" then
        return nil, merr
    end
    return nil, nil, "line"
end


-- add: the fast write, or the line under contention.
function _M:_add(total)
    local function compute(cur)
        local new = cur + total
        if not is_int(new) then
            return nil, "invalid", ("%s + %s leaves the integer range"):format(
                format("%d", cur), format("%d", total))
        end
        return new
    end
    if self._turn then
        local v, err, detail = self:_add_in_turn(compute)
        if not (v == nil and err == nil and detail == "line") then
            return v, err, detail
        end
    elseif not (self._opts.fair and self._contended) then
        local v, err, detail = self:_update_fast(compute)
        if not (v == nil and err == nil and detail == "line") then
            return v, err, detail
        end
    end
    if not is_int(total) then
        return nil, "invalid", "the adds' sum leaves the integer range"
    end
    local v, err, detail = self:_add_in_line(total)
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
    local v, err, detail = self:_add(total)
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
    local bound = o.timeout + o.max_tries * (self.client:request_timeout() + o.max_delay)
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
    local v, err, detail = self:_update_fast(function(cur)
        return cur == old and new
    end, true)
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
