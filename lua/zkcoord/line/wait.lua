--- zkcoord.line.wait: a position's verdicts and waits (internal part of
--- zkcoord.line).
--
-- `decide` asks the driver's rule about a fresh listing (in one pass for
-- a built-in scan rule, over a join batch's shared listing when several
-- joined together, else over the parsed and sorted entries);
-- `wait_verdict` waits as the verdict says: on the one entry named (its
-- delete walks down what the waiter kept, line/walk.lua) or, for
-- line.ANY, on the next change of the line, listed again with its watch so
-- that the rule judges exactly the listing the watch starts from.
-- `read_line` and `read_entry` are the two reads, one try each for
-- util.retry. An interrupt() (the position's _epoch moves) sets the event
-- a wait is on.
-- Functions of a position (zkcoord.line.enter calls them as
-- wait.decide(q, ...)), not methods.
local rules = require "zkcoord.line.rules"
local order = require "zkcoord.line.order"
local drivers = require "zkcoord.line.driver"
local node = require "zkcoord.line.node"
local walk = require "zkcoord.line.walk"
local join = require "zkcoord.line.join"
local contract = require "zkcoord.contract"
local deadlines = require "zkcoord.util.deadline"
local retries = require "zkcoord.util.retry"
local callbacks = require "zkcoord.util.callbacks"

local remaining, waker, index_of = deadlines.remaining, callbacks.waker, order.index_of
local error, pcall, tostring = error, pcall, tostring
local ANY = rules.ANY

local _M = {}


--- Stops waiting for a change of the line (fire and forget).
function _M:disarm(armed)
    if armed then
        self.client:remove_watches(self.path, armed.wake)
    end
end
local disarm = _M.disarm


-- Our node is not in a listing sent after it was made: gone (deleted, or
-- its session ended). We join again, at the end of the line: said in the
-- log, since the waiters that came after us are now served first.
local function missing(self)
    self.client:log("warn", ("line %s: our node %s is missing from the line: joining again, "
                             .. "at its end"):format(self.path, tostring(self._name)))
    node.forget(self)
end


-- Waits on ev for what is left of the deadline; interrupt() may set it.
-- An interrupt() during the round trip before (the watch's request) was
-- not seen by ev: no wait then.
local function wait_event(self, ev, deadline, epoch)
    if self._epoch ~= epoch then
        return
    end
    self._wait_ev = ev
    ev:wait(remaining(deadline))
    if self._wait_ev == ev then
        self._wait_ev = nil
    end
end


-- The reads of enter(), one try each for util.retry (UNTIL_DEADLINE: after
-- a session expiry they go on in the new session). Both answer true
-- instead when our node went with an ended session: enter() joins again
-- rather than wait on a line we are no longer in.

--- Lists the line (with watch `wake`, if any).
function _M:read_line(deadline, wake)
    if self._node and not self:_owns_node() then
        return true
    end
    return contract.read_until(self.client, self:_read_deadline(deadline), "children", self.path, wake)
end
local read_line = _M.read_line

--- Reads the node at `path` with watch `wake`.
function _M:read_entry(deadline, path, wake)
    if not self:_owns_node() then
        return true
    end
    return contract.read_until(self.client, self:_read_deadline(deadline), "get", path, wake)
end
local read_entry = _M.read_entry


--- Asks the rule about a fresh listing. Returns "through"; "again" (our
--- node is gone: join again), nil, the armed line watch; or "judged" (the
--- verdict still to be checked) or "scanned" (the driver's one-pass scan
--- gave it: nothing to check), the verdict, the armed watch, and for
--- "judged" the entries and our index. A raising rule leaves no node behind.
--- With a scan, what is below the verdict is kept for the walk (line.walk);
--- `b`, a join batch (line.join) of more than one join, gives the listing
--- parsed once for all of them; a join alone scans it in one pass.
function _M:decide(names, armed, b)
    local d = self.driver
    if d.scan and b and b.n > 1 then
        local v = join.view(b, d, names)
        local me = v.index[self._name]
        if not me then
            missing(self)
            return "again", nil, armed
        end
        local verdict = self.rule(v.entries, me, self)    -- a built-in: reads only
        if verdict == true then
            disarm(self, armed)
            return "through"
        end
        self._below, self._below_cut = walk.keep_entries(v.entries, verdict, me, d.scan.below)
        self._line_size = #names
        return "scanned", verdict, armed
    elseif d.scan then
        local verdict, kept, cut = drivers.scan(d, self.path, names, self._name, walk.KEEP)
        if verdict == nil then
            missing(self)
            return "again", nil, armed
        elseif verdict == true then
            disarm(self, armed)
            return "through"
        end
        self._below, self._below_cut, self._line_size = kept, cut, #names
        return "scanned", verdict, armed
    end
    local entries = self:parse(names)
    local me = index_of(entries, self._name)
    if not me then
        missing(self)
        return "again", nil, armed
    end
    local rok, verdict = pcall(self.rule, entries, me, self)
    if not rok then
        disarm(self, armed)
        self:leave()
        error(verdict, 0)
    end
    if verdict == true then
        disarm(self, armed)
        return "through"
    end
    return "judged", verdict, armed, entries, me
end


-- The rule said ANY. If a watch on the line is set already (the rule
-- just saw the listing that set it), wait for it to fire; then list the
-- line again with a new watch, so the rule's next answer is about exactly
-- the listing the watch starts from: no change can slip between the two.
-- Returns true, the new listing and the armed watch (or nil, err).
local function wait_line(self, armed, deadline, epoch)
    local client = self.client
    if armed then
        wait_event(self, armed.ev, deadline, epoch)
        if self._epoch ~= epoch then
            disarm(self, armed)
            return true, nil, nil, nil     -- left meanwhile: enter() stops
        elseif not armed.ev.is_set then
            disarm(self, armed)
            return nil, contract.is_closed(client) and "closed" or "timeout"
        end
    end
    -- One closure per wait (util.waker): a watch is removed by its function.
    local ev = client:waiter():event()
    local wake = waker(ev)
    local names, err = retries.retry(client, deadline, self:_policy(), read_line, self, deadline,
                                  wake)
    if names == true then
        return true, nil, nil, nil      -- our node went with the session: join again
    elseif names then
        return true, nil, names, { ev = ev, wake = wake }
    elseif err == "nonode" then
        return true, nil, {}, nil      -- the parent went, and our node with it: join again
    end
    client:remove_watches(self.path, wake)   -- a reply after our wait ran out may set it
    return nil, err, nil, nil
end


-- Waits until `entry` changes or goes. Returns true to re-check the line
-- (list it), or true, nil, nil, nil, true when the walk down what we kept
-- found us through (line.walk). A data change (revocation's request)
-- watches the same entry again; a delete walks down to the next one.
local function wait_for(self, entry, deadline, epoch)
    local client = self.client
    local path = entry.path
    local from = walk.source(path)    -- kept alive: its proof is read when it goes
    local ev, box, wake
    while true do
        if not ev then
            ev, box = client:waiter():event(), {}
            wake = walk.typed_waker(ev, box)
            if from and self._below and self:_owns_node() then
                walk.watch_mine(self)    -- its delete may let us through without a request
            end
            local data, err = retries.retry(client, deadline, self:_policy(), read_entry, self,
                                         deadline, path, wake)
            if data == true then
                return true    -- our node went with the session: join again
            elseif data == nil then
                client:remove_watches(path, wake)   -- a reply after our wait ran out may set it
                if err ~= "nonode" then
                    return nil, err
                end
                box.type = "deleted"
                ev:set()
            end
        end
        wait_event(self, ev, deadline, epoch)
        if self._epoch ~= epoch then
            client:remove_watches(path, wake)
            return true     -- left meanwhile: enter() stops
        elseif not ev.is_set then
            client:remove_watches(path, wake)
            if contract.is_closed(client) then
                return nil, "closed"
            end
            return nil, "timeout"
        end
        if box.type == "changed" then
            ev = nil    -- watch it again
        elseif box.type ~= "deleted" then
            return true
        else
            local nxt, nfrom = walk.walk(self, path, from, deadline)
            if nxt == true then
                return true, nil, nil, nil, true
            elseif not nxt then
                return true
            end
            path, from, ev = nxt, nfrom, nil    -- watch the one the walk found
        end
    end
end


--- Waits as the rule's verdict says. Returns true, nil, the next listing
--- (or nil), the armed line watch and true when the walk found us through
--- (line.walk), or nil, err.
function _M:wait_verdict(verdict, armed, deadline, epoch)
    if remaining(deadline) == 0 then
        disarm(self, armed)
        return nil, "timeout"
    end
    if verdict == ANY then
        return wait_line(self, armed, deadline, epoch)
    end
    disarm(self, armed)
    return wait_for(self, verdict, deadline, epoch)
end


return _M
