--- zkcoord.layout.kazoo_lease: a lease of kazoo's Semaphore (internal).
--
-- kazoo's Semaphore (recipe/lock.py) is not a line: while holding the
-- semaphore's lock, a contender lists the children of <path> with a
-- watch, creates its lease "<path>/<uuid hex>" (ephemeral, data = the
-- identifier) while fewer than max_leases children are there, and
-- otherwise waits for the listing to change. Every child of <path> counts.
-- zkcoord.semaphore's layout = "kazoo" runs this in place of its lease
-- line: the object answers what the semaphore asks of a line position
-- (enter, interrupt, is_through, node, on_lost, leave) and what the client
-- asks of an owned node (node, is_through, leave: client:own_node).
--
-- The lease is a zkcoord.owned_node: ours only as created in this session
-- (a lost create reply finds it by its name, which only we know), watched
-- while held (on_lost), deleted only while ours.
local core = require "zkcoord.core"
local deadlines = require "zkcoord.util.deadline"
local callbacks = require "zkcoord.util.callbacks"
local errors = require "zkcoord.errors"
local owned_node = require "zkcoord.owned_node"
local contract = require "zkcoord.contract"

local setmetatable, ipairs = setmetatable, ipairs
local gsub = string.gsub
local remaining = deadlines.remaining
local transient, unknown_outcome = errors.transient, errors.unknown_outcome

local _M = {}
local mt = { __index = _M }


-- The owned node lost our lease ("deleted", "sessionexpired"): tell.
local function gone(self)
    return function(reason)
        contract.disown_node(self.client, self.node_path)
        local fns = self._lost_fns
        for i = 1, #fns, 2 do
            callbacks.call(self.client, fns[i], "kazoo lease on_lost", reason, fns[i + 1])
        end
    end
end


--- A lease of the kazoo semaphore at `path` (no server state until enter()).
function _M.new(client, path, max_leases, data)
    -- kazoo's name: uuid4().hex, 32 hex digits
    local node_path = (path == "/" and "" or path) .. "/" .. gsub(core.uuid(), "%-", "")
    local self = setmetatable({
        client = client,
        path = path,
        node_path = node_path,
        max_leases = max_leases,
        _lost_fns = {},
        _epoch = 0,         -- bumped by interrupt(): an enter() running meanwhile stops
        _wait_ev = nil,     -- the event enter() waits on (interrupt() sets it)
        _maybe = nil,       -- a create's outcome is unknown: our lease may exist
    }, mt)
    -- parents = false: <path> is made (persistent, with the max) before
    self._owned = owned_node.new(client, node_path, { data = data, parents = false,
                                                      on_gone = gone(self) })
    return self
end


local function contains(names, name)
    for _, n in ipairs(names) do
        if n == name then
            return true
        end
    end
    return false
end


-- One look: lists <path> with watch `wake` and creates our lease when
-- fewer than max are there (or when ours is there already: a create whose
-- reply was lost; owned_node adopts it only if it is our session's).
-- Returns true (held), false (full: wait), or nil, err.
local function try_lease(self, deadline, wake)
    local client = self.client
    local names, err = contract.read_until(client, deadline, "children", self.path, wake)
    if not names then
        return nil, err
    end
    local mine = self.node_path:match("[^/]+$")
    if #names >= self.max_leases and not contains(names, mine) then
        return false
    end
    local ok, cerr = self._owned:create()
    if ok then
        client:remove_watches(self.path, wake)
        contract.own_node(client, self.node_path, self)
        return true
    elseif ok == false then
        return false        -- not ours there (cannot be: our uuid), or gone meanwhile: look again
    end
    if unknown_outcome[cerr] then
        self._maybe = true  -- our lease may be there: the next look finds it, giving up deletes it
    end
    return nil, cerr
end


-- enter() gives up: a create of ours whose outcome we never learned may
-- have made our lease, which would hold a lease nobody uses until our
-- session ends. Its name is ours alone: delete it (guaranteed: once
-- connected, until done or the session ends).
local function give_up(self, ...)
    if self._maybe then
        self._maybe = nil
        self.client:delete_guaranteed(self.node_path)
    end
    return ...
end


--- Waits for a lease: true, or nil, err ("timeout", "interrupted",
--- "closed", a ZooKeeper code). timeout 0 looks once. A connection loss
--- looks again once connected (the read waits for it), until the deadline.
function _M:enter(timeout)
    local client = self.client
    local deadline = deadlines.deadline(timeout)
    local try = timeout == 0
    local epoch = self._epoch
    while self._epoch == epoch do
        local ev = client:waiter():event()
        local wake = callbacks.waker(ev)
        local ok, err = try_lease(self, not try and deadline or nil, wake)
        if ok then
            self._maybe = nil
            return true
        end
        local left = remaining(deadline)
        if ok == false and not try and left ~= 0 and self._epoch == epoch then
            -- full: wait for a change of the listing (or interrupt())
            self._wait_ev = ev
            ev:wait(left)
            self._wait_ev = nil
        else
            client:remove_watches(self.path, wake)
            if ok == false or left == 0 then
                return give_up(self, nil, "timeout")
            elseif try or not (transient[err] or err == "sessionexpired") then
                return give_up(self, nil, err)
            end
        end
    end
    return give_up(self, nil, "interrupted")
end


--- Ends an enter() waiting now: it answers nil, "interrupted". A lease
--- already held stays held: unlike a line's node, it does not depend on
--- the lock it was taken under.
function _M:interrupt()
    self._epoch = self._epoch + 1
    local ev = self._wait_ev
    if ev then
        ev:set()
    end
end


--- Is our lease there, in a live session?
function _M:is_through()
    return self._owned:held()
end


--- The path of our lease node while held.
function _M:node()
    return self._owned:held() and self.node_path or nil
end


--- fn(reason, arg) when a held lease is lost: "deleted" or "sessionexpired".
function _M:on_lost(fn, arg)
    local fns = self._lost_fns
    fns[#fns + 1] = fn
    fns[#fns + 1] = arg == nil and false or arg
end


--- Deletes our lease if it is still ours (one round trip: owned_node's
--- delete reads the stat first; one that fails on the connection is
--- finished once connected, or goes with the session).
function _M:leave()
    contract.disown_node(self.client, self.node_path)
    return self._owned:delete()
end


return _M
