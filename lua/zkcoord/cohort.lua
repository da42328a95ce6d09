--- zkcoord.cohort: one node per process for a lock's owners (lock
--- cohorting, Dice, Marathe and Shavit 2012), behind client:lock(path,
--- { cohort = true }).
--
-- The owners of one client that want the same lock (same path, same line
-- driver), through any lock object made with `cohort = true`, share one
-- node in the line. The first joins the line as without a cohort; the
-- others queue here, in arrival order, each bounded by its own timeout.
-- When the holder releases and a local owner waits, that owner holds at
-- once, with no request to the server (a "local handoff"), while:
--   * fewer than `cohort_handoffs` (default 16) local handoffs and less
--     than `cohort_time` (default 0.01 s) passed since the node was
--     granted; or
--   * no remote waiter is in line: the cohort's node is the last one. A
--     children watch on the line, set when the first local owner queues
--     (not before: an uncontended lock pays nothing), tells; until its
--     reply, a remote waiter is assumed. A remote waiter that arrives is
--     seen by the watch, so it waits at most one bound;
-- and always fewer than LOCAL_MAX handoffs per node (the token's range).
-- Otherwise the node is deleted and the first local waiter joins the
-- line again with a new node, behind the remote waiters.
--
-- Loss: when the node is lost (session ended, node deleted: the node is
-- watched once a local owner waits, or on_lost is registered), the holder's
-- on_lost callbacks run, its release() answers "lost", and the first local
-- waiter joins the line at once with a new node (as a waiting acquire
-- without a cohort joins again): no owner is ever handed a lost node.
-- A local grant (a handoff, a reader joining a read node) is made only
-- once the node's loss watch is known set on the live node: an exists
-- sent right after it found the node (one session's requests are answered
-- in order). From then on a loss comes as an event, the window a holder
-- without the cohort has, which fencing covers. The owner handed a node
-- waits for that answer (at most once per node, bounded by its timeout);
-- a node lost or not confirmed before its acquire returns is not its: it
-- joins the line itself, and on_lost is not told.
--
-- Revocation (Curator's "__REVOKE__" in the node, zkcoord.lock.revoke):
-- the node's data is watched once a holder whose lock has on_revoke
-- callbacks holds it (re-armed across local handoffs). A request reaches
-- the holders of the node at that time (an rwlock's readers: each), with
-- their own owners; a revoked node is never passed on locally (nor joined
-- by readers): its last release deletes it and the next local owner joins
-- the line again, behind the one that asked.
--
-- Fencing: grant n (0 for the node's first, then 1, 2 ... for each local
-- handoff) of the node with create zxid czxid has the token pair
-- (czxid, n). Grants of one lock follow the order of their nodes' czxids,
-- and of n within a node, so pairs compared lexicographically (czxid
-- first, then n) grow strictly with every grant, across processes.
-- number(czxid, n) = czxid * 2^12 + n is the same order as one number,
-- exact while czxid < 2^41 (ZooKeeper epochs below 512); it returns nil
-- beyond that, where a resource must keep the pair.
--
-- A lock whose pick hook returns another driver for an acquire (rwlock's
-- downgrade) makes that owner's node without the cohort. An rwlock's
-- readers share a node: a reader joins a held read node at once (no
-- request) within the same bound (with a writer's node behind it, the
-- writer may be waiting), else it opens a new read node, behind that
-- writer; readers that come while a read node is entered all hold when it
-- is through; the node goes with its last reader.
--
-- Layout: a lock takes its positions from a factory (positions() below):
-- a line position (zkcoord.line) without the cohort, a seat
-- (zkcoord.cohort.seat) with it, both answering the same interface. All
-- seats go one path, under a capacity policy that is data
-- (seat.POLICIES): `capacity`, how many seats hold a node at once (1 for
-- a lock, any number for an rwlock's readers; writers are not cohorted),
-- and `join_held`, whether an arrival joins a held node at once (readers,
-- within the bound; one that may not opens a new "generation": a new
-- node) or queues. The cohort of a client's seats on one line
-- (cohort/registry.lua) has one local queue, in arrival order, and one
-- generation arrivals go to (a node being entered, or held, by the seats
-- that hold it together). cohort/seat.lua has the queue, the bound and
-- the grants of a node; cohort/node.lua the node's lifetime (the join
-- that makes it, who leads it, its loss) and its watches (confirmation,
-- remote waiters, revocation); cohort/step.lua the seat's enter_step;
-- cohort/tie.lua nginx's tie of a seat to its request.
local line = require "zkcoord.line"
local util = require "zkcoord.util"
local seat = require "zkcoord.cohort.seat"

local argerror = util.argerror
local type, ipairs, setmetatable, math_floor = type, ipairs, setmetatable, math.floor

local _M = { _VERSION = require("zkcoord.version") }
local POLICIES = seat.POLICIES

local LOCAL_BITS, LOCAL_MAX = seat.LOCAL_BITS, seat.LOCAL_MAX
local EXACT = 2 ^ 53

_M.DEFAULT_HANDOFFS = seat.DEFAULT_HANDOFFS
_M.DEFAULT_TIME = seat.DEFAULT_TIME


--- The token pair (czxid, n) as one number, in the same order; nil when it
--- is not exact in a double (czxid >= 2^41). czxid is an integer >= 0 and
--- n one of a node's grant numbers (0 .. 4095): anything else raises (a
--- NaN or an n out of range would compare wrongly, silently).
function _M.number(czxid, n)
    if type(czxid) ~= "number" or czxid < 0 or czxid % 1 ~= 0 then  -- NaN, huge: % 1 is NaN
        argerror(1, "number", "czxid must be an integer >= 0")
    end
    if type(n) ~= "number" or not (n >= 0 and n <= LOCAL_MAX) or n % 1 ~= 0 then  -- luacheck: ignore 581
        argerror(2, "number", ("n must be an integer from 0 to %d"):format(LOCAL_MAX))
    end
    local t = czxid * 2 ^ LOCAL_BITS + n
    if t >= EXACT then
        return nil
    end
    return t
end


-- The options that only mean something with cohort = true.
local TUNING = { "cohort_handoffs", "cohort_time" }


--- Checks the cohort options of a lock's or rwlock's opts (argument #2 of
--- `fname`; raises on a bad one): cohort a boolean or nil, and the tuning
--- options only with cohort = true (ignored silently, they hid a
--- cohort left off).
function _M.check_opts(opts, fname)
    local on = opts.cohort
    if on ~= nil and type(on) ~= "boolean" then
        argerror(2, fname, "cohort must be a boolean")
    end
    if on ~= true then
        for _, k in ipairs(TUNING) do
            if opts[k] ~= nil then
                argerror(2, fname, k .. " needs cohort = true")
            end
        end
        return
    end
    local h = opts.cohort_handoffs
    if h ~= nil and (type(h) ~= "number" or h < 0 or h ~= math_floor(h)) then
        argerror(2, fname, "cohort_handoffs must be an integer >= 0")
    end
    if opts.cohort_time ~= nil then
        util.check_seconds(opts.cohort_time, "cohort_time", fname, 2, true)
    end
end


local SHARED = setmetatable({}, { __mode = "k" })   -- drivers of shared lines

--- Makes the lines of `driver` shared (readers hold together).
function _M.shared(driver)
    SHARED[driver] = true
end


-- A line position for one acquire (no cohort).
local function line_position(client, path, driver, opts)
    return line.new(client, path, driver, opts.data)
end


--- The position factory of a lock with options `opts` over the line of
--- `driver`: function(client, path, d, opts) -> a position for one
--- acquire. With cohort = true a seat for `driver`'s line (shared if the
--- driver is, else exclusive), a line position for any other driver (a
--- pick hook's: rwlock's downgrade); without, a line position.
function _M.positions(opts, driver)
    if opts.cohort ~= true then
        return line_position
    end
    return function(client, path, d, o)
        if d ~= driver then
            return line_position(client, path, d, o)
        end
        return seat.new(client, path, d, o, SHARED[d] and POLICIES.shared or POLICIES.exclusive)
    end
end


return _M
