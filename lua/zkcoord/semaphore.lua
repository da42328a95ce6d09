--- zkcoord.semaphore: at most n holders at once, across processes.
--
--   local sem = client:semaphore("/limits/db-backup", 2)
--   local lease, err = sem:acquire(10)       -- nil: wait forever, 0: try once
--   if lease then backup() lease:release() end
--
-- Algorithm (Curator's InterProcessSemaphoreV2, two drivers on
-- zkcoord.line): two lines. A contender first takes an internal fair lock (<path>/locks, the
-- lock recipe's rule: it watches only the node below its own), then joins
-- the lease line (<path>/leases) and, while the line holds more than n
-- entries, waits for any change of that line (line.ANY). Then it gives
-- the internal lock back. Only the lock holder ever watches the lease
-- line, so a release wakes one process, never the herd; and it wakes on
-- ANY holder leaving, so no lease stays free while someone waits. Leases
-- are granted in the order of the internal lock: arrival order.
--
-- Node layout (Curator's, so a Java service using InterProcessSemaphoreV2
-- on the same path shares the leases): <path>/locks/_c_<uuid>-lock-<seq>
-- and <path>/leases/_c_<uuid>-lease-<seq>, data = opts.data (default
-- "<hostname>:<pid>"). <path> holds max_leases as its data (decimal text),
-- written by the first user; a user with another max is refused with
-- "invalid" (kazoo's check; data that is not a number is ignored, so a
-- Curator peer's empty node is claimed). All three are container nodes:
-- the server removes them some time after the last lease went.
--
-- opts.layout = "kazoo": kazoo's Semaphore instead (zkcoord.layout.kazoo):
-- <path> (persistent) holds max_leases the same way; the internal lock is
-- a kazoo Lock at <path>-__lock__ (<uuid hex>__lock__<seq>), and its holder
-- creates its lease <path>/<uuid hex> (ephemeral, data = opts.data) while
-- fewer than max_leases children of <path> are there, else waits for the
-- children to change (zkcoord.layout.kazoo_lease). A Python service using
-- kazoo's Semaphore on the same path shares the leases. kazoo's lease
-- node is not ours to count as Curator's: the layouts do not mix.
--
-- Connection loss ("suspended"): leases stay held; the session may still
-- be alive. Session loss ("lost", or suspended for the whole session
-- timeout), or a lease node deleted by someone else: lease:held() turns
-- false at once and the lease's on_lost callbacks run; another process may
-- hold that lease now. A waiting acquire() joins the line again by itself.
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"
local args = require "zkcoord.util.args"
local deadlines = require "zkcoord.util.deadline"
local reads = require "zkcoord.util.reads"
local retries = require "zkcoord.util.retry"
local callbacks = require "zkcoord.util.callbacks"
local holds = require "zkcoord.util.held"
local ids = require "zkcoord.util.ids"
local errors = require "zkcoord.errors"
local kazoo = require "zkcoord.layout.kazoo"
local kazoo_lease = require "zkcoord.layout.kazoo_lease"
local contract = require "zkcoord.contract"

local type, tonumber, setmetatable, ipairs = type, tonumber, setmetatable, ipairs
local match = string.match
local min = math.min
local remaining, argerror = deadlines.remaining, args.argerror

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }

local Lease = {}
local lease_mt = { __index = Lease }
local lease_lost    -- below, with the leases

local check_self = args.self_checker(mt, "semaphore", "sem")
local check_lease = args.self_checker(lease_mt, "lease", "lease")

local OPT_KEYS = { "data", "layout" }
-- The internal lock's line (the lock recipe's rule: it watches only the
-- node below its own); the lease line's driver is per semaphore (its max).
local LOCK_DRIVER = line.driver { marker = "lock-", rule = rules.first }


-- The internal lock's on_lost: leave the lease line (static: the lease
-- line's position travels as the argument).
local function leave_line(_, q)
    q:interrupt()
end


-- One reply of `fut`, waited for until what is left of the deadline; a
-- try-once (timeout 0) waits for the round trip itself, but only while the
-- connection lives (contract.wait_once), as zkcoord.line does.
local function reply(client, fut, deadline, try)
    if try then
        return contract.wait_once(client, fut)
    end
    return fut:wait(remaining(deadline))
end


---@class zkcoord.semaphore_opts
---@field data string? data of our lease nodes (default "<hostname>:<pid>")
---@field layout "curator"|"kazoo"|nil node names: Curator's InterProcessSemaphoreV2 (default) or kazoo's

--- client:semaphore(path, max_leases, opts) -> semaphore (no server state
--- until acquire()).
---@param client table
---@param path string
---@param max_leases integer how many may hold a lease at once (>= 1)
---@param opts zkcoord.semaphore_opts?
function _M.new(client, path, max_leases, opts)
    contract.check_path(path, "semaphore", 1)
    if type(max_leases) ~= "number" or max_leases % 1 ~= 0 or max_leases < 1
            or max_leases > 2147483647 then
        argerror(2, "semaphore", "max_leases must be an integer >= 1")
    end
    opts = args.check_opts(opts, OPT_KEYS, "semaphore", 3)
    if opts.data ~= nil and type(opts.data) ~= "string" then
        argerror(3, "semaphore", "data must be a string")
    end
    local is_kazoo = args.check_layout(opts.layout, "semaphore", 3) == "kazoo"
    return setmetatable({
        client = client,
        path = path,
        base = path == "/" and "" or path,
        max_leases = max_leases,
        -- Through while the lease line holds at most n entries, ours
        -- included (Curator's count); else wait for any change of it.
        _leases = line.driver { marker = "lease-", rule = rules.at_most(max_leases) },
        data = opts.data or ids.default_id(),
        _kazoo = is_kazoo,
    }, mt)
end


-- One try of making sure <path> exists and holds our max (writing it if
-- nobody did), for util.retry: create and get are pipelined, one round
-- trip when all is well. "nonode" / "badversion": someone else's create or
-- write came between ours (raced).
local function check_max_once(self, deadline, try)
    local client, path, want = self.client, self.path, self.max_leases
    local text = ("%d"):format(want)   -- "2", not "2.0" on Lua 5.3+
    -- kazoo's parents are persistent (its ensure_path), and its lease
    -- count and max check need <path> for as long as it runs
    local fc = client:send("create", path, text, self._kazoo and { parents = true }
                                                 or { container = true, parents = "container" })
    local fg = client:send("get", path)
    local created, cerr = reply(client, fc, deadline, try)
    local data, stat = reply(client, fg, deadline, try)
    if created then
        return true
    elseif cerr ~= "nodeexists" then
        return nil, cerr
    elseif data == nil then
        return nil, stat            -- "nonode": the container went meanwhile
    end
    local n = tonumber(match(data, "^%s*(%d+)%s*$"))
    if n == want then
        return true
    elseif n then
        return nil, "invalid", ("%s is a semaphore of %d leases, not %d"):format(path, n, want)
    elseif data ~= "" then
        return true       -- not ours to judge: someone else's data (kazoo)
    end
    -- Created without data (a bare create): claim it, unless someone else
    -- does first.
    return reply(client, client:send("set", path, text, stat.version), deadline, try)
end


-- Makes sure <path> exists and holds our max: each try retried through
-- the connection's losses until the deadline, again while it races.
function _M:_check_max(deadline, try)
    local ok, err, detail
    for _ = 1, retries.MAX_RACES do
        ok, err, detail = retries.retry(self.client, deadline, retries.UNTIL_DEADLINE, check_max_once,
                                     self, deadline, try)
        if ok then
            return true
        elseif err ~= "nonode" and err ~= "badversion" then
            return nil, err, detail
        end
    end
    return nil, "timeout"
end


--- Waits for a lease.
---@param timeout number? seconds; nil waits as long as it takes, 0 tries once
---@return table|nil lease, string? err "timeout" | "invalid" | "closed" | a ZooKeeper code
function _M:acquire(timeout)
    check_self(self, "acquire")
    args.check_timeout(timeout, "acquire", 1)
    local client = self.client
    if client:state() == "closed" then
        return nil, "closed"
    end
    local down = timeout == 0 and errors.of_state(client:state())
    if down then
        return nil, down    -- try once: no round trip can go out now
    end
    local deadline = deadlines.deadline(timeout)
    local ok, err, detail
    if not self._max_checked then     -- once per semaphore object: a round trip saved
        ok, err, detail = self:_check_max(deadline, timeout == 0)
        if not ok then
            return nil, err, detail
        end
        self._max_checked = true
    end
    -- The internal lock: one contender at a time watches the lease line.
    local lock, q
    if self._kazoo then
        lock = line.new(client, kazoo.semaphore_lock_path(self.path), kazoo.lock, self.data)
        q = kazoo_lease.new(client, self.path, self.max_leases, self.data)
    else
        lock = line.new(client, self.base .. "/locks", LOCK_DRIVER, self.data)
        q = line.new(client, self.base .. "/leases", self._leases, self.data)
    end
    -- Waiting in the lease line is the lock holder's only: a lock lost
    -- meanwhile (its session ended, its node deleted) lets the next
    -- contender in too, and rules.at_most then counts one waiter too many
    -- for both of them (a free lease stays unused). So its loss leaves the
    -- lease line (q:enter answers "interrupted") and we take the lock again.
    lock:on_lost(leave_line, q)
    repeat
        ok, err = lock:enter(remaining(deadline))
        if not ok then
            return nil, err
        end
        ok, err = q:enter(remaining(deadline))
    until ok or err ~= "interrupted"
    lock:leave()
    if not ok then
        return nil, err
    end
    local lease = setmetatable({ semaphore = self, _q = q, _lost_fns = {} }, lease_mt)
    q:on_lost(lease_lost, lease)
    return lease
end


--- Runs fn(lease, ...) holding a lease: acquire(timeout), fn protected,
--- the lease released whatever fn did. fn's results; nil, err when the
--- acquire failed or the lease was lost while fn ran ("lost"); an error in
--- fn is raised again after the release, with its traceback.
---@return any ... fn's results, or nil, err
function _M:run(fn, timeout, ...)
    check_self(self, "run")
    return holds.acquire_run(self, Lease.release, true, fn, timeout, ...)
end


--- How many leases are held now (one children() round trip).
---@return integer|nil count, string? err
function _M:leases()
    check_self(self, "leases")
    if self._kazoo then
        -- kazoo counts every child of <path>
        local names, err = reads.children(self.client, self.path)
        if not names then
            return nil, err
        end
        return min(#names, self.max_leases)
    end
    local probe = line.new(self.client, self.base .. "/leases", self._leases)
    local entries, err = probe:entries()
    if not entries then
        return nil, err
    end
    return min(#entries, self.max_leases)
end


--- The data of every participant, holders first, then waiters in order.
---@return string[]|nil data, string? err
function _M:participants()
    check_self(self, "participants")
    if self._kazoo then
        return self:_kazoo_participants()
    end
    return line.new(self.client, self.base .. "/leases", self._leases):participants()
end


-- kazoo's layout: the holders (kazoo's lease_holders(), in name order: a
-- lease has no place in a line), then the waiters in the order of the
-- lock they queue on.
function _M:_kazoo_participants()
    local client = self.client
    local names, err = reads.children(client, self.path)
    if not names then
        return nil, err
    end
    table.sort(names)
    local paths = {}
    for i, name in ipairs(names) do
        paths[i] = self.base .. "/" .. name
    end
    local holders, herr = reads.present_data(client, paths)
    if not holders then
        return nil, herr
    end
    local waiters, werr = line.new(client, kazoo.semaphore_lock_path(self.path),
                                   kazoo.lock):participants()
    if not waiters then
        return nil, werr
    end
    for _, data in ipairs(waiters) do
        holders[#holders + 1] = data
    end
    return holders
end


-- ---------------------------------------------------------------------------
-- Leases.

-- The position of a lease reported a loss (a lost session or a deleted
-- node): tell the lease's callbacks, once, unless it was released.
-- Static: the lease travels as the position's on_lost argument.
lease_lost = function(reason, self)
    if self._q == nil or self._lost_done then
        return
    end
    self._lost_done = true
    callbacks.call_all(self.semaphore.client, self._lost_fns, "semaphore on_lost", reason)
end


--- Gives the lease back (the node is deleted without waiting, ordered
--- before this session's next request, retried until done).
---@return true|nil ok, string? err "notheld" (released already) | "lost" | "closed" (client
---   closed while held)
function Lease:release()
    check_lease(self, "release")
    local q = self._q
    if not q then
        return nil, "notheld"
    end
    local held = q:is_through()     -- first: a loss found now reaches on_lost
    self._q = nil
    q:leave()
    if not held then
        return nil, contract.is_closed(self.semaphore.client) and "closed" or "lost"
    end
    return true
end


--- Is the lease held, in a live session?
function Lease:held()
    check_lease(self, "held")
    local q = self._q
    return q ~= nil and q:is_through()
end


--- The fencing token of the lease: its node's czxid (as lock:token()), while
--- held; it grows with every lease granted under this semaphore.
---@return number|nil token, string? err "notheld" (released or lost)
function Lease:token()
    check_lease(self, "token")
    if not self:held() then
        return nil, "notheld"
    end
    return self._q:stat().czxid
end


--- The path of the lease node.
function Lease:node()
    check_lease(self, "node")
    local q = self._q
    return q and q:node()
end


--- fn(reason) runs when a held lease is lost: "sessionexpired", "deleted" or
--- "closed" (client:close(), in it).
function Lease:on_lost(fn)
    check_lease(self, "on_lost")
    return args.add_fn(self._lost_fns, fn, "on_lost")
end


_M.mt = mt
_M.lease_mt = lease_mt
return _M
