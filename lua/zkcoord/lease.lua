--- zkcoord.lease: a time-bound exclusive lease that needs no session to
--- stay held (kazoo's NonBlockingLease, same nodes and data).
--
--   local lease = client:lease("/leases/hourly-cleanup", 70 * 60,
--                              { identifier = "db cleanup on " .. host })
--   local ok, err = lease:obtain()   -- true: ours until lease:ends()
--   if ok then cleanup() end         -- false: someone else's; nil, err: failed
--
-- A lease is a record, not a node of a session: the holder and the end of
-- its term, written by the holder's clock. It stays held after the holder
-- closes its client or dies, until the end passes; the same identifier
-- obtains it again (renews it) at any time, another one only after the end.
-- A job that must run on one host, keeping to the same host while it lives
-- (kazoo's example), obtains with the host's identifier and a duration
-- longer than its period.
--
-- Node layout (kazoo's, so kazoo processes and ours share leases both ways):
--   <path>/lease_holder   the record, JSON as Python's json.dumps writes it:
--                         {"version": 1, "holder": "<identifier>",
--                          "end": "%Y-%m-%dT%H:%M:%S"} (UTC); see
--                         zkcoord.lease.format
--   <path>/<uuid hex>__lock__<seq>
--                         kazoo's Lock on <path> (ours by the line engine,
--                         named as kazoo's; both sort by the number after "__lock__"),
--                         held only while one contender reads and writes
--
-- Algorithm (kazoo's): take the lock on <path>; read the record; refuse
-- (false) if it has another version (a newer kazoo's format: let it be), or
-- another holder whose end is still ahead of our clock; else write our
-- record with end = now + duration; release the lock. kazoo deletes and
-- creates the record; we do both in one transaction that checks the version
-- we read, so a record is never missing (a crash between the two) and a
-- writer the lock did not exclude (its session ended inside the lock) is
-- never overwritten: we answer false then.
--
-- Clocks: the end is the writer's wall clock (UTC) plus the duration, and
-- every reader compares it with its own clock. A reader whose clock runs
-- ahead by s seconds takes the lease s seconds early, a holder whose clock
-- lags sees held() s seconds too long; a reader behind takes it late.
-- Exclusion therefore holds only as far as the clients' clocks agree
-- (keep them synchronised, and choose durations much longer than the
-- skew). Where the holder can keep a session, a zkcoord lock (held while
-- the session lives, judged by the server alone) is the safer choice.
--
-- Connection loss: obtain() fails with nil, err and nothing is lost: a
-- write whose reply was lost is read back (our bytes there: true; not
-- there: its error, nothing changed; no answer within the request
-- timeout: "unknown"). held() answers from the clock alone: the term we
-- were granted has not ended.
local line = require "zkcoord.line"
local kazoo = require "zkcoord.layout.kazoo"
local util = require "zkcoord.util"
local errors = require "zkcoord.errors"
local format = require "zkcoord.lease.format"

local type, setmetatable, floor, huge = type, setmetatable, math.floor, math.huge
local now = require("zkcoord.core").now
local argerror, remaining = util.argerror, util.remaining
local ostime = os.time

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }

local OPT_KEYS = { "identifier", "timeout", "clock" }

--- The record's name under the lease's path (kazoo's).
_M.HOLDER = "lease_holder"

-- kazoo's Lock: <uuid hex>__lock__<seq>, first in sequence order holds,
-- named as kazoo names its own (zkcoord.layout.kazoo). Persistent parents:
-- the record lives under the lease's node.
local KAZOO_LOCK = kazoo.lock

--- The zkcoord.line driver of kazoo's Lock on a lease's path, which
--- obtain() holds while it reads and writes the record.
_M.LOCK = KAZOO_LOCK

local check_self = util.self_checker(mt, "lease", "lease")


-- The host's name: kazoo's default identifier (socket.gethostname()), so a
-- job restarted on the same host renews its lease.
local function hostname()
    return (util.default_id():match("^(.*):%d+$"))
end


---@class zkcoord.lease_opts
---@field identifier string? the holder's name; the same one renews (default: the host's name)
---@field timeout number? seconds to wait for kazoo's lock on the path (default: request_timeout)
---@field clock function? UTC seconds since the epoch (default os.time; for tests, as kazoo's utcnow)

--- Checks a lease's arguments for `fname` (duration is argument #nd,
--- opts #no); raises on a bad one. Returns the options, filled in.
--- @local
function _M.check_args(client, path, duration, opts, fname, nd, no)
    client.check_path(path, fname, 1)
    if path == "/" then
        argerror(1, fname, "the root cannot be a lease")   -- its nodes go under it
    end
    if type(duration) ~= "number" or not (duration > 0 and duration < huge) then  -- luacheck: ignore 581
        argerror(nd, fname, "duration must be a positive number of seconds")
    end
    opts = util.check_opts(opts, OPT_KEYS, fname, no)
    local id = opts.identifier
    if id ~= nil and (type(id) ~= "string" or id == "" or not format.utf8_ok(id)) then
        argerror(no, fname, "identifier must be a non-empty UTF-8 string")
    end
    util.check_timeout(opts.timeout, fname, no)
    if opts.clock ~= nil and type(opts.clock) ~= "function" then
        argerror(no, fname, "clock must be a function")
    end
    return {
        identifier = id or hostname(),
        timeout = opts.timeout or client:request_timeout(),
        clock = opts.clock or ostime,
    }
end


--- client:lease(path, duration, opts) -> lease (no server state until obtain()).
---@param client table
---@param path string the lease's node
---@param duration number seconds a term lasts from each obtain()
---@param opts zkcoord.lease_opts?
function _M.new(client, path, duration, opts)
    opts = _M.check_args(client, path, duration, opts, "lease", 2, 3)
    return setmetatable({
        client = client,
        path = path,
        duration = duration,
        identifier = opts.identifier,
        _holder_path = path .. "/" .. _M.HOLDER,
        _timeout = opts.timeout,
        _clock = opts.clock,
        _ends = nil,       -- the end of the term we were last granted
    }, mt)
end


-- The record (a table; its node's version second), false for none, or
-- nil, err, detail. One read, bounded by a request timeout.
local function read_record(self)
    local client = self.client
    local data, stat = client:read_until(now() + client:request_timeout(), "get",
                                         self._holder_path)
    if data == nil then
        if stat == "nonode" then
            return false
        end
        return nil, stat
    end
    local record, why = format.decode(data)
    if not record then
        return nil, "invalid", self._holder_path .. ": " .. why
    end
    return record, stat.version
end


-- Under the lock: judge the record and write ours. true, or false and the
-- record that refused us, or nil, err, detail.
local function judge_and_write(self, q)
    local client = self.client
    local record, zk_version, detail = read_record(self)
    if record == nil then
        return nil, zk_version, detail
    end
    local t = self._clock()
    if record then
        if record.version ~= format.VERSION then
            return false, record     -- another format's record: not ours to judge
        end
        if record.holder ~= self.identifier and t < record.ends then
            return false, record
        end
    end
    if not q:is_through() then
        return nil, "lost"           -- our session, and our place in the lock, ended
    end
    local ends = floor(t + self.duration)
    local data = format.encode(format.VERSION, self.identifier, ends)
    local hp = self._holder_path
    local ops = { { op = "create", path = hp, data = data } }
    if record then
        ops = { { op = "delete", path = hp, version = zk_version }, ops[1] }
    end
    local ok, err = client:multi(ops)
    if ok then
        return true, ends
    end
    if errors.unknown_outcome[err] then
        -- Find out, never guess: our bytes there mean the write happened.
        local got, gerr = client:read_until(now() + client:request_timeout(), "get", hp)
        if got == data then
            return true, ends
        elseif got == nil and gerr ~= "nonode" then
            return nil, "unknown"     -- it may or may not have happened
        end
        -- It did not: someone else's running term, or nothing changed.
        local theirs = got and format.decode(got)
        if theirs and theirs.holder ~= self.identifier
                and (theirs.version ~= format.VERSION or t < theirs.ends) then
            return false, theirs
        end
        return nil, err
    end
    if err == "badversion" or err == "nonode" or err == "nodeexists" then
        -- Written meanwhile by someone the lock did not exclude: theirs.
        return false, (read_record(self)) or nil
    end
    return nil, err
end


--- Obtains the lease, or renews it for our identifier: true when it is
--- ours until `lease:ends()` (now + duration); false, record when another
--- holder's term has not ended by our clock, or the record has another
--- version (record: { version =, holder =, ends = }, ends in UTC seconds);
--- nil, err on failure ("timeout" waiting for kazoo's lock, "invalid" for a
--- record that is not a lease's, "lost" when our session ended inside the
--- lock, "unknown" when the write's reply was lost and reading it back got
--- no answer either, a ZooKeeper code). Bounded: the timeout option (the
--- path and the lock) plus a request timeout for each of the read, the
--- write and the read-back of a write whose reply was lost.
---@return boolean|nil ok, table|string|nil record_or_err
function _M:obtain()
    check_self(self, "obtain")
    local client = self.client
    if client:is_closed() then
        return nil, "closed"
    end
    local deadline = now() + self._timeout
    local ok, err = client:ensure_path(self.path, { timeout = remaining(deadline) })
    if not ok then
        return nil, err
    end
    local q = line.new(client, self.path, KAZOO_LOCK, self.identifier)
    ok, err = q:enter(remaining(deadline))
    if not ok then
        return nil, err
    end
    local res, a, b = judge_and_write(self, q)
    q:leave()
    if res then
        self._ends = a
        return true
    elseif res == false then
        self._ends = nil
    end
    return res, a, b
end


--- Is the term we were last granted still running by our clock? (false
--- after a refused obtain; a failed one changes nothing).
function _M:held()
    check_self(self, "held")
    return self._ends ~= nil and self._clock() < self._ends
end


--- The end of the term we were last granted, in UTC seconds since the
--- epoch (what the record holds), or nil.
function _M:ends()
    check_self(self, "ends")
    return self._ends
end


--- The record as stored now: { version =, holder =, ends = } (ends nil
--- for another version's record), false when there is none, or nil, err.
function _M:read()
    check_self(self, "read")
    local record, err, detail = read_record(self)
    if record then
        return record
    end
    return record, err, detail
end


return _M
