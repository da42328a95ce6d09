--- zkcoord.line.enter: a position joins its line and gets through
--- (internal part of zkcoord.line: q:enter() and q:enter_step()).
--
--   1. create  <parent>/_c_<uuid>-<marker><seq>  (sequential; ephemeral
--      unless the driver says otherwise; its prefix may replace the
--      _c_<uuid>-) and list <parent>'s children in the same round trip
--      (one session runs its requests in order, so the list already holds
--      our node); the joins of one client that run together share that
--      listing (line/node.lua, line/join.lua);
--   2. sort the participants (children carrying one of the driver's
--      markers; anything else under the parent is ignored) by sequence
--      number (equal numbers, only hand-made names have them, by name), or
--      by the driver's key;
--   3. ask the driver's rule: `true` means we are through, an entry means
--      "wait until this one node changes" (exactly one: no herd effect),
--      `line.ANY` means "wait until the line changes" (any create or
--      delete under the parent: for rules no single node can answer).
--      Steps 2 and 3 are one pass over the names, with no table per name
--      and no sort, when the rule is rules.first, none_below or
--      first_none_above and the driver has no key (the same verdict:
--      zkcoord.line.rules' scans);
--   4. watch that node with get() (a watch on a missing node is never set,
--      so none leaks, Curator's choice), or list the line again with a
--      watch and ask the rule about that very listing; wait, go back to 2.
--      With a scan, a waiter whose node goes walks down the entries it saw
--      below it instead of listing again (line/walk.lua): a handoff sends
--      no listing.
-- Steps 2 to 4 are line/wait.lua's. `step` is enter() for a caller that
-- must not wait (the election's rejoin): where enter() would wait it sets
-- one watch and returns false.
-- Functions of a position (zkcoord.line calls them as enter.enter(q, ...)),
-- not methods.
local rules = require "zkcoord.line.rules"
local node = require "zkcoord.line.node"
local walk = require "zkcoord.line.walk"
local wait = require "zkcoord.line.wait"
local contract = require "zkcoord.contract"
local deadlines = require "zkcoord.util.deadline"
local retries = require "zkcoord.util.retry"
local errors = require "zkcoord.errors"

local remaining = deadlines.remaining
local decide, wait_verdict, disarm = wait.decide, wait.wait_verdict, wait.disarm
local read_line, read_entry = wait.read_line, wait.read_entry
local ANY = rules.ANY
local UNTIL_DEADLINE = retries.UNTIL_DEADLINE

local _M = {}


-- Leaves when enter() gives up at its deadline, and returns once the
-- delete is applied (as kazoo's lock does): another session that looks
-- right after sees no node of ours. Requests of one session run in order,
-- so the reply of a read sent after the delete comes after it; waited for
-- while the connection lives, at most the request timeout, as a try-once
-- waits (contract.wait_once): a link silent for a few round trips is a
-- loaded machine as often as a lost link, and skipping the read there let
-- another session still see our node (lock_spec, at load). On a lost link
-- the delete goes out once connected, as leave()'s always does.
local function give_up(self)
    local path, mine = self._node, self:_owns_node()
    self:leave()
    local client = self.client
    if path and mine and client:state() == "connected" then
        client:send("exists", path):wait(contract.request_timeout(client))
    end
end


-- Through: what enter() returns, and what the holder's watches need.
local function pass(self)
    self._through = true
    walk.passed_here(self)
    if #self._lost_fns > 0 then
        node.watch_own(self)
    end
    return true
end


--- q:enter(timeout), its arguments checked: joins the line (if not already
--- in it) and waits until the rule lets us through (zkcoord.line's enter).
function _M:enter(timeout)
    local client = self.client
    local deadline = deadlines.deadline(timeout)
    self._try = timeout == 0
    if contract.is_closed(client) then
        return nil, "closed"
    end
    if self._try then
        local down = errors.of_state(client:state())
        if down then
            return nil, down    -- try once: no round trip can go out now
        end
    end
    local names, joined, armed, batch   -- armed: { ev =, wake = } while a line watch is set
    local epoch = self._epoch
    while true do
        if self._epoch ~= epoch then
            -- interrupt() came while we waited: the node is not to be made again
            -- (a missing node would otherwise read as "join again").
            disarm(self, armed)
            self:leave()     -- a node created after it
            return nil, "interrupted"
        end
        if self._node and not self:_owns_node() then
            node.forget(self)    -- the session that owned it ended: join again
        end
        if not self._node then
            -- Joining again (our node went) only while there is time left.
            if joined and not self._try and remaining(deadline) == 0 then
                disarm(self, armed)
                return nil, "timeout"
            end
            joined = true
            local ok, res
            ok, res, batch = node.create(self, deadline)
            if not ok then
                disarm(self, armed)
                return nil, res
            end
            names = res
            if not names then
                batch = nil    -- the batch's listing failed: ours, below, is not its
            end
        end
        if not names then
            local err
            names, err = retries.retry(client, deadline, self:_policy(), read_line, self, deadline)
            if not names then
                disarm(self, armed)
                if err == "timeout" then give_up(self) else self:leave() end
                return nil, err    -- "timeout", "closed", a ZooKeeper code
            elseif names == true then
                names = nil        -- our node went with the session: join again
            end
        end
        if names and self._epoch == epoch then
            local how, verdict, entries, me
            how, verdict, armed, entries, me = decide(self, names, armed, batch)
            names, batch = nil, nil
            if how == "through" then
                return pass(self)
            elseif how ~= "again" then
                if how == "judged" then
                    rules.check_verdict(self, verdict, entries, me)
                end
                -- The listing must not stay alive for the whole wait: with N
                -- waiters that is N listings of N entries (10,000 requests
                -- waiting in one nginx worker ran it out of memory).
                entries, me = nil, nil    -- luacheck: ignore 311
                local ok, err, through
                ok, err, names, armed, through = wait_verdict(self, verdict, armed, deadline, epoch)
                if not ok then
                    if err == "timeout" then give_up(self) else self:leave() end
                    return nil, err
                elseif through then
                    return pass(self)
                end
            end
        end
    end
end


--- Removes the watch the last step() set (fire and forget).
function _M:unwatch_step()
    local w = self._step_watch
    if w then
        self._step_watch = nil
        if not contract.is_closed(self.client) then
            self.client:remove_watches(w[1], w[2])
        end
    end
end
local unwatch_step = _M.unwatch_step


--- q:enter_step(wake, timeout), its arguments checked: one step of enter()
--- that never waits for others (zkcoord.line's enter_step).
function _M:step(wake, timeout)
    local client = self.client
    if contract.is_closed(client) then
        return nil, "closed"
    end
    unwatch_step(self)
    self._try = false
    local deadline = deadlines.deadline(timeout)
    local names, batch, armed
    for _ = 1, retries.MAX_RACES do
        if self._node and not self:_owns_node() then
            node.forget(self)    -- the session that owned it ended: join again
        end
        if not self._node then
            local ok
            ok, names, batch = node.create(self, deadline)
            if not ok then
                disarm(self, armed)
                return nil, names
            end
        end
        local err
        if not names then
            batch = nil
            names, err = retries.retry(client, deadline, UNTIL_DEADLINE, read_line, self, deadline)
        end
        if names == nil then
            disarm(self, armed)
            return nil, err
        elseif names ~= true then
            local how, verdict, entries, me
            how, verdict, armed, entries, me = decide(self, names, armed, batch)
            names, batch = nil, nil
            self._below = nil    -- no walk: the next step lists
            if how == "through" then
                return pass(self)
            elseif how == "judged" then
                rules.check_verdict(self, verdict, entries, me)
            end
            if how == "again" then
                disarm(self, armed)
                armed = nil
            elseif verdict == ANY and armed then
                self._step_watch = { self.path, armed.wake }    -- set by the listing judged
                return false
            elseif verdict == ANY then
                -- List with the watch, and judge that very listing.
                armed = { wake = wake }
                names, err = retries.retry(client, deadline, UNTIL_DEADLINE, read_line, self,
                                        deadline, wake)
                if names == nil and err == "nonode" then
                    names = {}     -- the parent went, and our node with it: join again
                elseif names == nil then
                    client:remove_watches(self.path, wake)
                    return nil, err
                end
            else
                disarm(self, armed)
                armed = nil
                local data, rerr = retries.retry(client, deadline, UNTIL_DEADLINE, read_entry, self,
                                              deadline, verdict.path, wake)
                if data ~= nil and data ~= true then
                    self._step_watch = { verdict.path, wake }
                    return false
                elseif data == nil then
                    client:remove_watches(verdict.path, wake)
                    if rerr ~= "nonode" then
                        return nil, rerr
                    end
                end    -- it went (or our node did): judge a new listing
            end
        end
        if names == true then
            names = nil    -- our node went with the session: join again
        end
    end
    disarm(self, armed)
    return nil, "timeout"    -- the line moved under every try (bounded)
end


return _M
