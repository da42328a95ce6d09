--- zkcoord.counter.write: reading and writing a counter's node.
--
-- Owns the read of value and version (creating the node on first use),
-- the versioned set with its retries (the fast path of add and
-- compare_and_set), the sending of every write of the counter (send) and
-- the check after a write whose reply was lost.
-- Rules: every write is a set at the version last read or written, so of
-- several writers racing from one version exactly one wins; the version
-- of our last reply is reused, so an uncontended add is one round trip. A
-- write turned away by the server (errors.transient but not
-- errors.unknown_outcome: "sessionmoved", "throttledop") is sent again
-- through util.retry with the counter's policy. A write whose outcome is
-- unknown is never sent again blind: after a sync, the node must show it
-- did not happen. A lost race ("badversion") is not a transient error: the
-- same write can never succeed, so the fast path reads again and backs off
-- in a loop of its own, bounded by opts.max_tries. The hot path
-- (update_fast with a known version) makes no table or closure of its own.
-- Functions take the counter as `self`: this module is part of the
-- counter's class and reads its fields (zkcoord.counter documents them).
local core = require "zkcoord.core"
local retries = require "zkcoord.util.retry"
local unknown_outcome = require("zkcoord.errors").unknown_outcome
local contract = require "zkcoord.contract"

local format = string.format
local min = math.min
local random = core.random
local retry = retries.retry

local _M = {}

--- The detail of an error after which a write may or may not be applied.
_M.MAYBE = "the write may or may not have been applied"
local MAYBE = _M.MAYBE


--- nil, err, detail for a write whose outcome is unknown (detail: MAYBE or
--- the like). Our own "timeout" says nothing was changed (README, Errors):
--- for such a write it is "unknown".
function _M.maybe(err, detail)
    return nil, err == "timeout" and "unknown" or err, detail
end
local maybe = _M.maybe


--- The encoded data of value `v` in the counter's format.
function _M.encode(self, v)
    return self._format.encode(v)
end
local encode = _M.encode


--- Parses node data; empty data is the initial value.
---@return integer|nil value, string? err "invalid", string? detail
function _M.decode(self, data)
    if data == "" then
        return self._opts.initial
    end
    local v, detail = self._format.decode(data)
    if v == nil then
        return nil, "invalid", "counter " .. self.path .. " " .. detail
    end
    return v
end
local decode = _M.decode


--- Why `v` cannot be stored in the counter's format (nil: it can). A
--- runtime condition, not an argument error: `v` may come from the server,
--- as `cur + delta`.
function _M.out_of_range(self, v)
    local f = self._format
    if v < f.lo or v > f.hi then
        return ("%s is outside format %s's range %s"):format(format("%d", v), self._opts.format,
                                                            f.range)
    end
end
local out_of_range = _M.out_of_range


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
_M.checked = checked


-- One try of a write for util.retry: an error that leaves the outcome
-- unknown ends the retry (false, err): a blind second write could apply
-- it twice.
local function write_once(client, op, a, b, c)
    local r1, err, r3 = op(client, a, b, c)
    if r1 == nil and unknown_outcome[err] then
        return false, err, r3
    end
    return r1, err, r3
end


--- Sends the write client:op(a, b, c) (op: client.set, client.create or
--- client.multi), again while the server turns it away, with the
--- counter's retry policy, until `deadline` (a core.now() time; nil:
--- max_tries alone bounds it). Returns op's results, or nil, err, r3.
function _M.send(self, deadline, op, a, b, c)
    local client = self.client
    local r1, err, r3 = retry(client, deadline, self._policy, write_once, client, op, a, b, c)
    if r1 == false then
        return nil, err, r3
    end
    return r1, err, r3
end
local send = _M.send


--- Reads value and version into the counter (creating the node with
--- `initial` if missing).
---@return integer|nil value, table|string stat or err, string? detail
function _M.read(self)
    local client, path = self.client, self.path
    for _ = 1, retries.MAX_RACES do    -- again only when the node went between create and read
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
        -- A create that finds the node is as good as ours: it may be sent
        -- again whatever its outcome.
        local ok, err = retry(client, nil, self._policy, client.create, client, path,
                              encode(self, self._opts.initial), { parents = true })
        if not ok and err ~= "nodeexists" then
            return nil, err
        end
    end
    return nil, "nonode"   -- deleted as fast as we create it
end
local read = _M.read


-- After a write whose reply was lost: did it happen? false means surely
-- not (retry), nil means we cannot tell. sync() first: after a reconnect
-- our server may lag behind the leader, and a stale "not yet" would make
-- us apply the same add twice.
local function applied(self, expected_version, data)
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


--- After a versioned write of `data` at `version` failed with `err`: nil
--- when err is not a lost reply (or the client is closed: nothing to ask);
--- true when the write's outcome stays unknown; false when it surely did
--- not happen (the write may be tried again).
function _M.lost_reply(self, err, version, data)
    if not unknown_outcome[err] or contract.is_closed(self.client) then
        return nil
    end
    return applied(self, version, data) ~= false
end
local lost_reply = _M.lost_reply


--- Backs off after a lost race: jittered, doubling up to max_delay.
---@return number delay the next backoff
function _M.backoff(self, delay)
    self.client:waiter():sleep(delay * (0.5 + random()))
    return min(delay * 2, self._opts.max_delay)
end
local backoff = _M.backoff


--- The fast write loop of add and compare_and_set (opts.fair = false, or
--- no line seen). compute(value) returns the value to write, false to stop
--- without writing (compare_and_set: not the expected value), or nil, err,
--- detail. In fair mode a lost race sends the call to the line (returns
--- `nil, nil, "line"`) unless `no_line`.
function _M.update_fast(self, compute, no_line)
    local client, o, st = self.client, self._opts, self._stats
    local delay = o.base_delay
    -- Has the value been read from the server during this call? A value
    -- from an earlier reply is good enough to try a versioned write with
    -- (a badversion tells us it was old news), not to refuse one.
    local fresh = false
    for try = 1, o.max_tries do
        if self._version == nil then
            local v, err, detail = read(self)
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
            local stat, serr = send(self, nil, client.set, self.path, data, version)
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
            else
                local unknown = lost_reply(self, serr, version, data)
                if unknown then
                    return maybe(serr, MAYBE)
                elseif unknown == nil and serr ~= "nonode" then
                    return nil, serr   -- (nonode: deleted, the next read creates it)
                end
                st.cas_failures = st.cas_failures + 1    -- nothing written: again
            end
        end
    end
    return nil, "timeout", ("gave up after %d attempts"):format(o.max_tries)
end

return _M
