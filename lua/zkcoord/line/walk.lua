--- zkcoord.line.walk: a waiter's way down the listing it already has
--- (internal part of zkcoord.line).
--
-- A built-in scan rule (zkcoord.line.rules: first, none_below,
-- first_none_above) watches the nearest entry below ours whose marker its
-- `below` set takes. Sequence numbers only grow within one parent (and our
-- node keeps the parent alive), so no entry can appear below ours: when
-- the watched one goes, the next one to watch is among those the waiter
-- saw below it, nearest first. The waiter keeps a few of them (KEEP: a
-- waiter's memory stays small with thousands in line) and, when its entry
-- is reported deleted, reads in one round trip, without watches: our own
-- node (deleted meanwhile by another client: join again, as a listing
-- would have shown), the entry reported gone (an event is checked, not
-- trusted: under a leader failover a chaos run saw a waiter woken with
-- "deleted" for a node that was still there), and the kept entries it must
-- still ask about; then it watches the nearest one still there (one watch
-- per waiter, set by a get as before), or is through when none is.
--   * When the entry that went was a position of this process that got
--     through with a rule whose `below` covers ours and has since let
--     that node go (its release: no event is needed to know it), nothing
--     it could wait for is left below it. The waiter also watched its own
--     node while it waited on such an entry (one `exists`, sent with its
--     `get`); ZooKeeper tells a client of changes in their order, so if no
--     delete of our node came before that entry's, our node was there
--     then: through without any request (a line of coroutines or nginx
--     requests hands over from one to the next like this); else the walk
--     reads our own node only. After a reconnection the two events may
--     come in either order, so the proof holds only on the connection our
--     own watch was set on (contract.connection(client)): after another, the walk
--     reads our own node. A kept entry with that proof ends the walk at it.
--   * When more were below than it kept, it lists the line as before: one
--     listing beats many reads.
-- A rule with an `above` set (rwlock's writer: a downgraded reader that
-- joined after us) lists the line once nothing is left below. Rules of
-- the user's, keyed drivers (the order is not the sequence number, so an
-- entry may appear before ours) and ANY rules (semaphore's at_most,
-- fewer_than: every change of the line matters) list every time. A
-- hand-made name with a smaller number than ours, created while we wait,
-- is not seen until the waiter lists again.
-- Functions of a position (zkcoord.line calls them as walk.walk(q, ...)), not methods.
local errors = require "zkcoord.errors"
local contract = require "zkcoord.contract"

local setmetatable, pairs, ipairs = setmetatable, pairs, ipairs
local errname = errors.name

local _M = {}

--- How many entries below the watched one a waiter keeps.
_M.KEEP = 4

--- Without a proof (below), a waiter walks only a line that had more than
--- this many children at its last listing: a short listing costs the
--- server less than the walk's few reads (16 processes on one lock handed
--- over 15-25 % slower walking than listing), a long one far more.
_M.WALK_LINE = 32

-- The most entries a walk over a shared listing passes over (others'
-- markers) looking for ours to keep: the rest is cut.
local SKIP = 64

-- Node path -> the position of this process that made it, while it lives:
-- the proof "it got through" travels from one waiter to the next.
local LOCAL = setmetatable({}, { __mode = "v" })


--- `q` made its node `path` (zkcoord.line.node's _adopt).
function _M.register(path, q)
    LOCAL[path] = q
end


--- The position of this process that made node `path`, if any.
function _M.source(path)
    return LOCAL[path]
end


-- Driver -> the markers its rule waits for below ours, as a set: the
-- scan's `below`, or (true: any) every marker of the driver. Two drivers
-- on one parent may know different markers (a lock's "lock-" and a rule
-- of the user's over "lock-" and "x-"): "any" means any of its own.
local BELOW = setmetatable({}, { __mode = "k" })

local function below_of(d)
    local set = BELOW[d]
    if not set then
        set = d.scan.below
        if set == true then
            set = {}
            for _, p in ipairs(d.patterns) do
                set[p.marker] = true
            end
        end
        BELOW[d] = set
    end
    return set
end


-- Does `theirs` take every marker `mine` takes (sets of below_of)?
local function covers(theirs, mine)
    if theirs == mine then
        return true
    end
    for m in pairs(mine) do
        if not theirs[m] then
            return false
        end
    end
    return true
end


-- Through now: remember at which node, for the waiter that watches it.
function _M:passed_here()
    local d = self.driver
    if d.scan then
        self._passed, self._passed_below = self._node, below_of(d)
    end
    self._below = nil
end


-- Did this position get through at node `path` with a rule whose below set
-- covers `set`, and has it let that node go since? Then nothing `set`
-- takes was below `path` then, nor since. (A position that still holds
-- the node has not released it, whatever an event said.)
function _M:passed_at(path, set)
    return self._passed == path and self._node ~= path and covers(self._passed_below, set)
end


--- From a parsed listing: the paths of up to KEEP entries below `verdict`
--- (entries[me]'s verdict, below ours) that `set` takes, nearest first, and
--- whether more may be there. nil when the verdict is not below ours.
function _M.keep_entries(entries, verdict, me, set)
    local j = me - 1
    while j >= 1 and entries[j] ~= verdict do
        j = j - 1
    end
    if j < 1 then
        return nil
    end
    local kept, skipped = {}, 0
    for i = j - 1, 1, -1 do
        local e = entries[i]
        if set == true or set[e.marker] then
            if #kept == _M.KEEP then
                return kept, true
            end
            kept[#kept + 1] = e.path
        else
            skipped = skipped + 1
            if skipped > SKIP then
                return kept, true
            end
        end
    end
    return kept, false
end


-- Our own node's watch while we wait (_watch_mine): "gone" when it was
-- deleted, "off" after any other event (the walk asks again then).
local function mine_fired(ev, self)
    if self._mine == ev.path and not self._through then
        self._mine_state = ev.type == "deleted" and "gone" or "off"
    end
end


local function mine_reply(p, ctx)
    local self, node = ctx.q, ctx.node
    if self._mine ~= node or self._mine_state ~= "asked" then
        return
    end
    if p.rc == 0 then
        self._mine_state = "armed"
        self._mine_conn = contract.connection(self.client)    -- the order of events holds on it
    else
        -- Gone already (an exists on a missing node would wait for its
        -- creation: remove that watch), or not asked: the walk asks.
        self._mine_state = errname(p.rc) == "nonode" and "gone" or "off"
        self.client:remove_watches(node, mine_fired)
    end
end


--- While waiting on an entry a position of this process made: watch our
--- own node, once per node (sent without waiting, before the entry's get).
function _M:watch_mine()
    local node = self._node
    if self._mine == node and self._mine_state ~= "off" then
        return
    end
    self._mine, self._mine_state = node, "asked"
    local f = self.client:send("exists", node, mine_fired, self)
    if not f:on_late(mine_reply, { q = self, node = node }) then
        self._mine_state = "off"
    end
end


-- One watch closure per walk, made outside the frames that wait: it
-- records the kind of event (deleted, changed ...) in `box`.
function _M.typed_waker(ev, box)
    return function(e)
        box.type = e and e.type
        ev:set()
    end
end


-- Nothing left below: through (true), or list (nil) for a rule that also
-- looks above ours, or when our node went with the session.
function _M:walk_end()
    if self.driver.scan.above or not self:_owns_node() then
        return nil
    end
    return true
end


--- The node we watched, `gone`, was reported deleted; `from` is the
--- position of this process that made it (or nil). Returns true (through),
--- nil (list the line), or the next path to watch (its watch still to be
--- set) and the position of this process that made it, if any. The walk
--- reads without watches (exists), `gone` again among them: the one watch
--- a waiter has is set by its caller on the entry the walk found.
function _M:walk(gone, from, deadline)
    local kept = self._below
    if not kept then
        return nil
    end
    local set = below_of(self.driver)
    local n, whole, proved, sources = #kept, not self._below_cut, false, {}
    local short = (self._line_size or 0) <= _M.WALK_LINE
    if from and _M.passed_at(from, gone, set) then    -- same class
        n, whole, proved, short = 0, true, true, false
    else
        for i = 1, #kept do
            local src = LOCAL[kept[i]]
            sources[i] = src
            if src and _M.passed_at(src, kept[i], set) then    -- same class
                n, whole, short = i, true, false    -- nothing below this one: what we kept is all
                break
            end
        end
    end
    if not whole or short then
        return nil    -- more were below than we kept, or a short line: a listing is cheaper
    end
    if not self:_owns_node() then
        return nil    -- our node went with the session: enter() joins again
    end
    if self._mine == self._node then
        local st = self._mine_state
        if st == "gone" then
            return nil    -- deleted while we waited: the listing shows it, enter() joins again
        elseif st == "armed" and proved and self._mine_conn == contract.connection(self.client) then
            -- nothing to ask: on one connection the order of events told
            -- us (after a reconnection the read below decides)
            return _M.walk_end(self)
        end
    end
    local client = self.client
    local mine = client:send("exists", self._node)
    local again = not proved and client:send("exists", gone) or nil
    local fs = {}
    for i = 1, n do
        fs[i] = client:send("exists", kept[i])
    end
    local wait = self:_reply_wait(deadline)
    local still, failed, found = false, false, nil
    if again then
        local st = again:wait(wait)
        still, failed = st and true or false, st == nil
    end
    for i = 1, n do
        local st = fs[i]:wait(wait)
        if st == nil then
            failed = true
        elseif st and not found then
            found = i
        end
    end
    local stat = mine:wait(wait)
    if failed or not stat then
        -- A connection loss, the deadline, or our node is gone: the listing
        -- (with its retries) decides.
        return nil
    end
    if still then
        return gone, from    -- the event was not its delete: watch it again
    elseif not found then
        return _M.walk_end(self)
    end
    local rest = {}
    for i = found + 1, n do
        rest[#rest + 1] = kept[i]
    end
    self._below, self._below_cut = rest, false
    return kept[found], sources[found]
end


return _M
