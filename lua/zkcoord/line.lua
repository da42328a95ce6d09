--- zkcoord.line: a place in a line of sequential nodes, the engine of every
--- waiting recipe (lock, rwlock, semaphore, election ...) and of your own.
--
--   local line = require "zkcoord.line"
--   local ONE = line.driver { marker = "job-", rule = line.rules.first }
--   local q = line.new(client, "/jobs/nightly", ONE, "host-a")
--   if q:enter(5) then run() q:leave() end     -- nil: wait forever, 0: once
--
-- enter() creates our sequential node and lists the line in one round
-- trip, asks the driver's rule, and waits on the one node the rule names
-- (no herd effect) or on any change of the line (line.ANY); the steps are
-- told in zkcoord.line.enter, and docs/ARCHITECTURE.md walks them.
--
-- The driver (Curator's LockInternalsDriver) is everything a recipe says
-- about its line, a table checked once by line.driver{...}:
--
--   marker   string, required. The name part before the sequence number
--            ("lock-", Curator's "__READ__"/"__WRIT__", "lease-", "latch-").
--            Our node is _c_<uuid>-<marker><seq>: the _c_<uuid>- prefix is
--            the engine's default (protection, below; Curator's protected
--            names; see prefix).
--   markers  every marker whose nodes take part (default { marker }): an
--            rwlock's readers and writers share one line. A name takes the
--            first marker of the list it ends with (list a longer marker
--            before one it ends with); a name with none is not in the line.
--   rule     function(entries, me, q) -> true | an entry | line.ANY,
--            required. `entries` is the line in order, each { name =, path
--            =, seq =, marker = } (and key = when the driver has a key);
--            `me` our index in it. zkcoord.line.rules has the recipes' rules.
--   key      function(entry) -> number, optional: the sort key (default the
--            sequence number; ties go by sequence number).
--   mode     "ephemeral" (default): the node goes with our session;
--            "persistent": it stays until leave() or someone's delete (work
--            items); "ttl": persistent, and the server deletes it once it
--            has not been written for `ttl` seconds (servers need
--            zookeeper.extendedTypesEnabled=true): a lease that outlives a
--            crashed holder for a while (examples/ttl_lease.lua).
--   ttl      seconds, with mode "ttl".
--   data     the nodes' data by default (line.new's 4th argument wins).
--   parents  "container" (default): missing parents are created as
--            container nodes; "persistent".
--   prefix   function(uuid) -> string, optional: the name part before the
--            marker, from a fresh uuid per create (default Curator's
--            "_c_" .. uuid .. "-"; zkcoord.layout.kazoo's: the uuid's 32
--            hex digits). It must differ for each uuid: after a lost
--            create reply our node is the child named <prefix><marker>...
--
-- Ownership: an ephemeral node is ours while the session that created it
-- lives (its ephemeral owner); a persistent or TTL node is ours by the uuid
-- in its name, across sessions. A recipe that decides more per acquire
-- (rwlock's downgrade node, its refused upgrade) does it before it makes a
-- position: zkcoord.lock's `pick` hook.
--
-- Protection: see zkcoord.line.node (creating and finding our own node).
-- Connection loss (suspended) keeps our node: the session may still live.
-- Session loss removes an ephemeral node: a waiting enter() joins the line
-- again (kazoo's choice), a position already through reports `on_lost`. A
-- node that outlives sessions stays: it goes only by leave(), someone's
-- delete, or its TTL.
--
-- Files: this one (positions), line/enter.lua (enter and enter_step),
-- line/wait.lua (verdicts and waits), line/driver.lua (checking drivers),
-- line/order.lua (a listing in line order), line/rules.lua (rules,
-- verdicts), line/node.lua (our own node), line/walk.lua (a waiter's way
-- down what it saw), line/join.lua (joins sharing a listing).
-- zkcoord.queue is an alias of this module.
-- An argument error raised inside a rule (a rule maker passed uncalled)
-- climbs through enter() and line/wait.lua's decide; util.raise passes over the frames
-- of every library file, line/*.lua included (util.SUBDIRS), so it blames
-- the caller wherever the engine's parts live.
local core = require "zkcoord.core"
local drivers = require "zkcoord.line.driver"
local rules = require "zkcoord.line.rules"
local order = require "zkcoord.line.order"
local node = require "zkcoord.line.node"
local enter = require "zkcoord.line.enter"
local contract = require "zkcoord.contract"

local args = require "zkcoord.util.args"
local deadlines = require "zkcoord.util.deadline"
local reads = require "zkcoord.util.reads"
local retries = require "zkcoord.util.retry"
local errors = require "zkcoord.errors"

local remaining, argerror = deadlines.remaining, args.argerror
local type, ipairs, setmetatable, getmetatable = type, ipairs, setmetatable, getmetatable
local CLIENT_MT = contract.mt
local ANY = rules.ANY
local UNTIL_DEADLINE = retries.UNTIL_DEADLINE
local index_of = order.index_of

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }



local check_self = args.self_checker(mt, "line position", "q")


--- The verdict "wait until the line changes" (rules.ANY).
_M.ANY = ANY

--- The rules (zkcoord.line.rules), also under the rule_<name> aliases.
_M.rules = rules
_M.rule_first = rules.first
_M.rule_always = rules.always
_M.rule_fewer_than = rules.fewer_than
_M.rule_none_below = rules.none_below


--- A random version-4 UUID (36 characters, as Curator's protected names use),
-- from the kernel's random source: never math.random, whose sequence is
-- the application's.
-- @function uuid
_M.uuid = core.uuid


--- Checks a driver table (see the header) once; the result is what
--- line.new takes, shared by every position made with it.
---@return table driver
function _M.driver(d)
    local compiled, err = drivers.compile(d)
    if not compiled then
        argerror(1, "line.driver", err)
    end
    return compiled
end


--- Is `d` a driver line.driver made?
_M.is_driver = drivers.is_driver


--- Creates a position object (no server state until enter()): a place in
--- the line of `driver` under `parent`. `driver` is what line.driver made,
--- or (zkcoord.queue's form) an options table { marker =, markers =, rule
--- =, data =, parents =, persistent = } made into a driver here.
---@param client table
---@param parent string the line's parent node
---@param driver table what line.driver made, or an options table
---@param data string? our node's data (default driver.data)
function _M.new(client, parent, driver, data)
    if getmetatable(client) ~= CLIENT_MT then
        argerror(1, "line.new", "zkcoord client expected, got " .. type(client))
    end
    contract.check_path(parent, "line.new", 2)
    if not drivers.is_driver(driver) then
        local err
        driver, err = drivers.from_opts(driver)
        if not driver then
            argerror(3, "line.new", err)
        end
    end
    if data ~= nil and type(data) ~= "string" then
        argerror(4, "line.new", "data must be a string, got " .. type(data))
    end
    if data == nil then
        data = driver.data
    end
    return setmetatable({
        client = client,
        path = parent,
        driver = driver,
        data = data,
        rule = driver.rule,
        persistent = driver.outlives,   -- the node outlives our session
        _node = nil,      -- full path of our node
        _name = nil,      -- its last segment
        _stat = nil,      -- its create stat (czxid = fencing token)
        _serial = nil,    -- client session serial that created it
        _through = false,
        _lost_fns = {},
        _epoch = 0,       -- bumped by interrupt(): an enter() running meanwhile stops
        _wait_ev = nil,   -- the event enter() waits on (interrupt() sets it)
        _below = nil,     -- while waiting: paths below the watched entry (line.walk)
        _below_cut = false,   -- more were below than _below holds
        _line_size = nil, -- children at the last listing (line.walk's WALK_LINE)
        _passed = nil,    -- the node at which we got through (line.walk's proof)
        _passed_below = nil,
        _mine = nil,      -- our node, while its watch (line.walk's _watch_mine) is ours
        _mine_state = nil,    -- "asked", "armed", "gone" or "off"
        _mine_conn = nil,     -- the client's connection() when it was armed
        _step_watch = nil,    -- { path, wake } the last enter_step() set
    }, mt)
end


--- Participants under the parent, sorted by sequence number (or the
--- driver's key).
---@return table[] entries { name =, path =, seq =, marker = }
function _M:parse(names)
    check_self(self, "parse")
    if type(names) ~= "table" then
        argerror(1, "parse", "names must be an array of strings, got " .. type(names))
    end
    local out, i = drivers.parse(self.driver, self.path, names)
    if not out then
        argerror(1, "parse", "names[" .. i .. "] must be a string")
    end
    return out
end


--- The current participants (one children() round trip).
function _M:entries()
    check_self(self, "entries")
    local names, err = reads.children(self.client, self.path)
    if not names then
        return nil, err
    end
    return self:parse(names)
end


--- The data of every participant, in line order (the list, then every
--- participant's data in one pipelined round trip). A participant that
--- left meanwhile is skipped.
---@return string[]|nil data, string? err
function _M:participants()
    check_self(self, "participants")
    local entries, err = self:entries()
    if not entries then
        return nil, err
    end
    local paths = {}
    for i, e in ipairs(entries) do
        paths[i] = e.path
    end
    return reads.present_data(self.client, paths)
end


local EMPTY = {}


--- fn(entries, me, q) now and after every change of the line, until
--- w:cancel(): the participants in order and our index among them
--- (nil while we are not in the line). Re-armed by itself, also in a new
--- session (client:watch's rules); an empty line while the parent is
--- missing. Needs no node of our own: an observer can watch a line.
---@return table|nil w, string? err
function _M:watch_line(fn)
    check_self(self, "watch_line")
    args.check_fn(fn, "watch_line")
    return self.client:watch(self.path, function(names)
        local entries = self:parse(names or EMPTY)
        fn(entries, self._name and index_of(entries, self._name), self)
    end, { kind = "children" })
end


--- Deletes our node (if any) without waiting: the delete is ordered before
--- this session's next request, and retried until it succeeds or the
--- session that owns the node ends. An enter() waiting meanwhile joins the
--- line again (interrupt() ends it instead).
function _M:leave()
    check_self(self, "leave")
    local mine = self:_owns_node()
    enter.unwatch_step(self)
    local n = node.forget(self)
    if n and mine then
        self.client:delete_guaranteed(n, nil, self.persistent)
    end
    return true
end


-- Is our node still ours? An ephemeral node lives as long as the session
-- that created it; one that outlives sessions until someone deletes it.
function _M:_owns_node()
    return self.persistent or self._serial == contract.serial(self.client)
end


--- Leaves (leave()) and ends an enter() waiting on this position
--- (another coroutine's, or one whose callbacks call this): it returns
--- nil, "interrupted" instead of joining the line again.
function _M:interrupt()
    check_self(self, "interrupt")
    self._epoch = self._epoch + 1
    local ev = self._wait_ev
    if ev then
        self._wait_ev = nil
        ev:set()
    end
    return self:leave()
end


--- Is our node alive and through, in the current session (or, for a node
--- that outlives sessions, while the client is open)? What already reached
--- the process is taken first (contract.current_state(client): queued records,
--- the clock rule, queued callbacks): a loss is reported to on_lost before
--- this answers false ("closed" once the client is closed: close() asks
--- every position that owns a node, so on_lost hears it then).
function _M:is_through()
    check_self(self, "is_through")
    if not self._through then
        return false
    end
    local c = self.client
    local st = contract.current_state(c)
    if self.persistent then
        return self._through and st ~= "closed"
    end
    if self._serial ~= contract.serial(c) or st == "lost" then
        node.lost(self, "sessionexpired")    -- told before the answer, whatever the waiter
    elseif st == "closed" then
        node.lost(self, "closed")            -- client:close() ended the session with our node
    end
    return self._through
end


--- The full path of our node (nil while not in the line).
function _M:node()
    check_self(self, "node")
    return self._node
end


--- Our node's sequence number (nil while not in the line).
function _M:seq()
    check_self(self, "seq")
    return self._name and drivers.seq_of(self.driver, self._name)
end


--- Our node's create stat (stat.czxid: a fencing token; nil while not in
--- the line).
function _M:stat()
    check_self(self, "stat")
    return self._stat
end


--- The fencing token of a position through: its node's czxid (as
--- lock:token()); else nil, "notheld".
---@return number|nil token, string? err
function _M:token()
    check_self(self, "token")
    if not self:is_through() then
        return nil, "notheld"
    end
    return self._stat.czxid
end


--- fn(reason, arg) is called when a position that was through is lost:
--- "sessionexpired" (the session ended) or "deleted" (someone removed our
--- node, or its TTL ran out). The watch on our node that notices a delete
--- is set only while someone listens (a request per grant saved
--- otherwise): register before enter(), or it is set now if we are
--- through already.
function _M:on_lost(fn, arg)
    check_self(self, "on_lost")
    args.check_fn(fn, "on_lost")
    local fns = self._lost_fns
    if arg == nil then
        arg = false    -- keep the fn/arg pairs dense
    end
    fns[#fns + 1] = fn
    fns[#fns + 1] = arg
    if #fns == 2 and self._through and self._node then
        node.watch_own(self)
    end
end


-- ---------------------------------------------------------------------------
-- enter() and enter_step() (line/enter.lua), and how their waits are
-- bounded (line/node.lua, line/walk.lua and line/wait.lua ask these).

-- One reply of `fut`, waited for until what is left of the deadline; a
-- try-once (timeout 0) waits for the round trip itself, but only while the
-- connection lives (contract.wait_once): "once" means not waiting for others.
function _M:_reply(fut, deadline)
    if self._try then
        return contract.wait_once(self.client, fut)
    end
    return fut:wait(remaining(deadline))
end


-- The timeout of a wait a try-once never makes (the join batch's shared
-- listing, the walk's reads): what is left of the deadline.
function _M:_reply_wait(deadline)
    if self._try then
        return nil     -- not reached: a try-once reads its own listing (_reply)
    end
    return remaining(deadline)
end


-- The retry policy of enter()'s steps: until the deadline, or for a
-- try-once the one try's result (a connection loss reported as such).
function _M:_policy()
    return self._try and errors.TRY_ONCE or UNTIL_DEADLINE
end


-- The deadline of a read (retried after a connection loss): the caller's,
-- except for a try-once, whose reads are bounded by the retry policy.
function _M:_read_deadline(deadline)
    if self._try then
        return nil
    end
    return deadline
end


--- Joins the line (if not already in it) and waits until the rule lets us
--- through, at most `timeout` seconds (nil: no limit; 0: decide now).
--- interrupt() while it waits ends it: nil, "interrupted".
---@return true|nil ok, string? err  "timeout" | "closed" | "interrupted" | a ZooKeeper code
function _M:enter(timeout)
    check_self(self, "enter")
    args.check_timeout(timeout, "enter", 1)
    return enter.enter(self, timeout)
end


--- enter() in steps, for a caller that must not wait for others (the
--- election's rejoin runs in the client's callbacks): joins the line if not
--- in it (again if our node went), asks the rule, and answers true when
--- through. Otherwise it sets one watch on what the rule waits for, whose
--- event calls wake(), and answers false: step again then (or at any time:
--- the step before's watch is removed). Only its round trips wait, at most
--- `timeout` seconds (nil: no limit); an error leaves our node in the line
--- (leave() ends the position).
---@param wake function called when the line may have moved
---@param timeout number? seconds for the step's round trips (nil: no limit)
---@return boolean|nil through, string? err "timeout" | "closed" | a ZooKeeper code
function _M:enter_step(wake, timeout)
    check_self(self, "enter_step")
    args.check_fn(wake, "enter_step", 1)
    args.check_timeout(timeout, "enter_step", 2)
    return enter.step(self, wake, timeout)
end


_M.mt = mt
return _M
