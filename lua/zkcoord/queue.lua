--- zkcoord.queue: a place in a line of ephemeral-sequential nodes.
--
-- The primitive every waiting recipe (lock, rwlock, semaphore, election ...)
-- is built from, and the one users script their own patterns with:
--
--   1. create  <parent>/_c_<uuid>-<marker><seq>  (ephemeral, sequential)
--      and list <parent>'s children in the same round trip (one session
--      runs its requests in order, so the list already holds our node);
--   2. sort the participants (children carrying a known marker; anything
--      else under the parent is ignored) by sequence number;
--   3. ask the recipe's rule: `true` means we are through, an entry means
--      "wait until this one node changes" (exactly one: no herd effect);
--   4. watch that node with get() (a watch on a missing node is never set,
--      so none leaks, Curator's choice), wait, and go back to 2.
--
-- Protection (Curator's protected mode, CURATOR-498): the uuid in our node
-- name lets us find our node when a create's reply was lost, and we adopt it
-- only if its ephemeral owner is our current session. Any wait that gives up
-- deletes our node (guaranteed: retried until it succeeds or the session
-- ends), and a create that completes after we stopped waiting for it is
-- deleted when its reply arrives.
--
-- Connection loss (suspended) keeps our node: the session may still live.
-- Session loss removes it: a waiting enter() joins the line again (kazoo's
-- choice), a position already through reports `on_lost`.
local core = require "zkcoord.core"
local errname = require("zkcoord.errors").name

local client_mod = require "zkcoord.client"

local now = core.now
local type, error, ipairs, setmetatable = type, error, ipairs, setmetatable
local pairs, tostring, getmetatable = pairs, tostring, getmetatable
local tonumber, sort, match, gsub, sub, format = tonumber, table.sort, string.match,
    string.gsub, string.sub, string.format
local find = string.find
local random, floor = math.random, math.floor
local array_length = client_mod.array_length
local CLIENT_MT = client_mod.mt

local _M = { _VERSION = "0.1.0" }
local mt = { __index = _M }


-- Every public method raises on a wrong self, whatever it is (a number, a
-- boolean, cdata): getmetatable never indexes it.
local function check_self(self, name)
    if getmetatable(self) ~= mt then
        error(("'%s' must be called on a queue position (use q:%s(...))"):format(name, name), 3)
    end
end

local SEQ_WRAP = 4294967296


-- Seed from the kernel once: node names must not collide across processes
-- that started in the same second.
do
    local f = io.open("/dev/urandom", "rb")
    local seed = os.time() + floor(os.clock() * 1e6)
    if f then
        local b = f:read(6) or ""
        f:close()
        for i = 1, #b do
            seed = (seed * 256 + b:byte(i)) % 2147483647   -- exact: entropy kept
        end
    end
    math.randomseed(seed % 2147483647)
    for _ = 1, 10 do random() end
end


--- A random version-4 UUID (36 characters, as Curator's protected names use).
function _M.uuid()
    return format("%08x-%04x-4%03x-%04x-%04x%08x",
                  random(0, 0xffffffff), random(0, 0xffff), random(0, 0xfff),
                  0x8000 + random(0, 0x3fff), random(0, 0xffff), random(0, 0xffffffff))
end


local function escape(s)
    return (gsub(s, "[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"))
end


---@class zkcoord.queue_opts
---@field marker string       name part before the sequence number, e.g. "lock-"
---@field markers string[]?   every marker whose nodes take part (default { marker })
---@field rule fun(entries: table[], me: integer, q: table): (true|table)
---@field data string?        our node's data
---@field parents string?     "container" (default) or "persistent" for missing parents

local OPT_KEYS = { marker = true, markers = true, rule = true, data = true, parents = true }
local PARENT_MODES = { container = true, persistent = true }


local function bad_opts(msg)
    error("bad argument #3 to 'queue.new' (" .. msg .. ")", 3)
end


-- A marker is part of a node name: a non-empty string, no '/', no control
-- character.
local function valid_marker(m)
    return type(m) == "string" and m ~= "" and not find(m, "[/%c]")
end


--- Creates a position object (no server state until enter()).
function _M.new(client, parent, opts)
    if getmetatable(client) ~= CLIENT_MT then
        error("bad argument #1 to 'queue.new' (zkcoord client expected, got " .. type(client)
              .. ")", 2)
    end
    client.check_path(parent, "queue.new", 2)
    if type(opts) ~= "table" then
        bad_opts("opts must be a table with a marker and a rule function, got " .. type(opts))
    end
    for k in pairs(opts) do
        if not OPT_KEYS[k] then
            bad_opts("unknown option '" .. tostring(k) .. "' (marker, markers, rule, data, parents)")
        end
    end
    if not valid_marker(opts.marker) then
        bad_opts("marker must be a non-empty string without '/' or control characters")
    end
    if type(opts.rule) ~= "function" then
        bad_opts("rule must be a function, got " .. type(opts.rule))
    end
    local markers = opts.markers or { opts.marker }
    local n = type(markers) == "table" and array_length(markers)
    if not n or n == 0 then
        bad_opts("markers must be a non-empty array of strings, without holes")
    end
    local found, seen = false, {}
    for i = 1, n do
        local m = markers[i]
        if not valid_marker(m) then
            bad_opts("markers[" .. i .. "] must be a non-empty string without '/' or control "
                     .. "characters")
        end
        if seen[m] then
            bad_opts("markers must be distinct: '" .. m .. "' is there twice")
        end
        seen[m] = true
        found = found or m == opts.marker
    end
    if not found then
        -- Our own node would never be recognised: enter() would create
        -- nodes for ever (found by fuzzing).
        bad_opts("opts.marker must be one of opts.markers")
    end
    local patterns = {}
    for i = 1, n do
        local m = markers[i]
        -- greedy .* takes the LAST marker, as Curator's sorter does
        patterns[i] = { marker = m, pattern = "^.*" .. escape(m) .. "(%-?%d+)$" }
    end
    if opts.data ~= nil and type(opts.data) ~= "string" then
        bad_opts("data must be a string, got " .. type(opts.data))
    end
    if opts.parents ~= nil and not PARENT_MODES[opts.parents] then
        bad_opts("parents must be 'container' or 'persistent'")
    end
    return setmetatable({
        client = client,
        path = parent,
        marker = opts.marker,
        patterns = patterns,
        rule = opts.rule,
        data = opts.data,
        parent_mode = opts.parents == "persistent" and true or "container",
        _node = nil,      -- full path of our node
        _name = nil,      -- its last segment
        _stat = nil,      -- its create stat (czxid = fencing token)
        _serial = nil,    -- client session serial that created it
        _through = false,
        _lost_fns = {},
    }, mt)
end


-- Static: a closure made per call would stop LuaJIT's trace (NYI: FNEW).
local function by_seq(a, b)
    return a.seq < b.seq
end


--- Participants under the parent, sorted by sequence number.
---@return table[] entries { name =, path =, seq =, marker = }
function _M:parse(names)
    check_self(self, "parse")
    if type(names) ~= "table" then
        error("bad argument #1 to 'parse' (names must be an array of strings, got "
              .. type(names) .. ")", 2)
    end
    local out, pats, base = {}, self.patterns, self.path == "/" and "" or self.path
    for i, name in ipairs(names) do
        if type(name) ~= "string" then
            error("bad argument #1 to 'parse' (names[" .. i .. "] must be a string)", 2)
        end
        for _, p in ipairs(pats) do
            local seq = match(name, p.pattern)
            if seq then
                seq = tonumber(seq)
                -- The parent's counter is a signed 32-bit int: past 2^31-1 it
                -- goes negative, and those nodes are the newest.
                local key = seq < 0 and seq + SEQ_WRAP or seq
                out[#out + 1] = { name = name, path = base .. "/" .. name, seq = key,
                                  marker = p.marker }
                break
            end
        end
    end
    sort(out, by_seq)
    return out
end


--- The current participants (one children() round trip).
function _M:entries()
    check_self(self, "entries")
    local names, err = self.client:children(self.path)
    if not names then
        if err == "nonode" then
            return {}
        end
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
    local client = self.client
    local entries, err = self:entries()
    if not entries then
        return nil, err
    end
    local fs, out = {}, {}
    for i, e in ipairs(entries) do
        fs[i] = client:send("get", e.path)
    end
    for _, f in ipairs(fs) do
        local data = f:wait()
        if data then
            out[#out + 1] = data
        end
    end
    return out
end


local function index_of(entries, name)
    for i, e in ipairs(entries) do
        if e.name == name then
            return i
        end
    end
    return nil
end


-- Forgets our node locally. The watch on it (if any) is left to fire on
-- the delete that follows, and is ignored then: no extra request.
function _M:_forget()
    local node = self._node
    self._node, self._name, self._stat, self._through = nil, nil, nil, false
    if node then
        self.client:_disown(node)
    end
    return node
end


--- Deletes our node (if any) without waiting: the delete is ordered before
--- this session's next request, and retried until it succeeds or the
--- session that owns the node ends.
function _M:leave()
    check_self(self, "leave")
    local serial = self._serial
    local node = self:_forget()
    if node and serial == self.client._serial then
        self.client:delete_guaranteed(node)
    end
    return true
end


--- Is our node alive and through, in the current session?
function _M:is_through()
    check_self(self, "is_through")
    local c = self.client
    return self._through and self._serial == c._serial
           and c._state ~= "lost" and c._state ~= "closed"
end


function _M:node()
    check_self(self, "node")
    return self._node
end


function _M:stat()
    check_self(self, "stat")
    return self._stat
end


--- fn(reason, arg) is called when a position that was through is lost:
--- "sessionexpired" (the session ended) or "deleted" (someone removed our node).
--- The watch on our node that notices a delete is set only while someone
--- listens (a request per grant saved otherwise): register before enter(),
--- or it is set now if we are through already.
function _M:on_lost(fn, arg)
    check_self(self, "on_lost")
    if type(fn) ~= "function" then
        error("bad argument #1 to 'on_lost' (function expected, got " .. type(fn) .. ")", 2)
    end
    local fns = self._lost_fns
    if arg == nil then
        arg = false    -- keep the fn/arg pairs dense
    end
    fns[#fns + 1] = fn
    fns[#fns + 1] = arg
    if #fns == 2 and self._through and self._node then
        self:_watch_own()
    end
end


function _M:_lost(reason)
    if not self._through then
        return
    end
    self:_forget()
    local fns = self._lost_fns
    for i = 1, #fns, 2 do
        fns[i](reason, fns[i + 1])
    end
end


-- Watch our own node while through: a delete by someone else, or the end of
-- the session, is reported to on_lost. Sent without waiting (no round trip
-- added), but its reply is not ignored: if ZooKeeper set no watch (the
-- connection dropped first), the session's end would go unreported.
-- Both handlers are static functions (no closure per acquire: LuaJIT does
-- not compile closure creation); their context travels with the request.
local function own_watch_fired(ev, self)
    if self._node ~= ev.path then
        return
    end
    if ev.type == "deleted" then
        self:_lost("deleted")
    elseif ev.type == "session" then
        self:_lost("sessionexpired")
    elseif ev.type == "changed" then
        self:_watch_own()    -- re-arm (data writes, e.g. revocation)
    end
end


local function own_watch_reply(p)
    local self, node = p.q, p.node
    if self._node ~= node or p.rc == 0 then
        return
    end
    local e = errname(p.rc)
    if e == "nonode" then
        self:_lost("deleted")          -- gone before the watch was set
    elseif p.lost or e == "sessionexpired" or e == "closed" then
        self:_lost("sessionexpired")
    else
        self:_rewatch_when_connected(node)
    end
end


function _M:_watch_own()
    local node = self._node
    local p = self.client:send("exists", node, own_watch_fired, self).entry
    if not p then
        return self:_rewatch_when_connected(node)
    end
    p.late, p.q, p.node = own_watch_reply, self, node
end


-- The watch request failed on a connection loss: set it again once
-- connected in the same session, or report the loss if the session ended.
function _M:_rewatch_when_connected(node)
    local client = self.client
    local listener
    listener = client:on_state(function(new)
        if new ~= "connected" and new ~= "lost" and new ~= "closed" then
            return
        end
        client:remove_listener(listener)
        if self._node ~= node then
            return
        end
        if new == "connected" and self._serial == client._serial then
            self:_watch_own()
        else
            self:_lost("sessionexpired")
        end
    end)
    if client._state == "connected" and self._serial == client._serial then
        -- Already back (or never left): no transition will come.
        client:remove_listener(listener)
        self:_watch_own()
    end
end


local function remaining(deadline)
    if not deadline then
        return nil
    end
    local left = deadline - now()
    return left > 0 and left or 0
end


-- How long to wait for one reply: what is left of the deadline, but a
-- try-once (timeout 0) still waits for the round trip itself (bounded by
-- the client's request timeout): "once" means not waiting for others.
function _M:_reply_wait(deadline)
    if self._try then
        return nil
    end
    return remaining(deadline)
end


-- The deadline of a read (retried after a connection loss): the caller's,
-- except for a try-once, whose reads are bounded by the retry policy.
function _M:_read_deadline(deadline)
    if self._try then
        return nil
    end
    return deadline
end


-- Creates the parents of our node (one pipelined round trip).
function _M:_create_parents()
    if self.path == "/" then
        return true
    end
    local container = self.parent_mode == "container"
    local ok, err = self.client:create(self.path, nil, { container = container or nil,
                                                         parents = container and "container"
                                                                   or true })
    if ok or err == "nodeexists" then
        return true
    end
    return nil, err
end


-- Protected mode: after a lost create reply, find our node by its uuid and
-- adopt it only if our current session owns it.
function _M:_find_own(prefix, deadline)
    local client = self.client
    deadline = self:_read_deadline(deadline)
    local names, err = client:_read_until(deadline, "children", self.path)
    if not names then
        return nil, err
    end
    local sid = client:session_id()
    for _, name in ipairs(names) do
        if sub(name, 1, #prefix) == prefix then
            local path = (self.path == "/" and "" or self.path) .. "/" .. name
            local stat, serr = client:_read_until(deadline, "exists", path)
            if stat and stat.ephemeral_owner == sid then
                return path, stat, names
            elseif stat == nil then
                return nil, serr
            elseif stat then
                client:delete_guaranteed(path)   -- an older session's: not ours to keep
            end
        end
    end
    return false
end


-- A create whose outcome we will never learn (its reply was lost to a
-- connection loss, or we had stopped waiting and the reply then was a
-- connection loss) may have made our node: nobody knows its name, and it
-- would block every other contender until our session ends. Find it by its
-- uuid prefix once connected again in the same session, and delete it if
-- our session owns it (Curator's findAndDeleteProtectedNodeInBackground).
-- Asynchronous (it may start from a late-reply callback, which must not
-- block); tried again at every state change until one listing succeeds or
-- the session ends (its ephemeral nodes go with it). Rare: a closure here
-- costs nothing on the hot path.
local UNKNOWN_OUTCOME = { connectionloss = true, operationtimeout = true }

function _M:_delete_by_prefix(prefix, serial)
    local client, parent = self.client, self.path
    local base = parent == "/" and "" or parent
    local listener, busy, done = nil, false, false
    local try
    local function finish()
        done = true
        if listener then
            client:remove_listener(listener)
            listener = nil
        end
    end
    local function listed(names, err)
        if not names then
            busy = false
            if err == "nonode" then
                return finish()
            end
            return try()    -- after a loss: again once connected (the listener)
        end
        -- Ours only if our session owns it (a uuid is random, not unique).
        local left, failed = 1, false
        local function one_done()
            left = left - 1
            if left == 0 then
                busy = false
                if failed then try() else finish() end
            end
        end
        for _, name in ipairs(names) do
            if sub(name, 1, #prefix) == prefix then
                local path = base .. "/" .. name
                left = left + 1
                client:send("exists", path):on_done(function(stat, serr)
                    if stat and client._serial == serial
                            and stat.ephemeral_owner == client:session_id() then
                        client:delete_guaranteed(path)
                    elseif stat == nil and serr ~= "nonode" then
                        failed = true
                    end
                    one_done()
                end)
            end
        end
        one_done()
    end
    try = function()
        if done or busy then
            return
        end
        if client._closed or client._serial ~= serial then
            return finish()
        end
        if client._state ~= "connected" then
            return    -- again at the next state change
        end
        busy = true
        client:send("children", parent):on_done(listed)
    end
    listener = client:on_state(function() try() end)
    try()
end


local function delete_late_create(p)
    if p.rc == 0 and p.value then
        p.client:delete_guaranteed(p.value)
    elseif not p.lost and UNKNOWN_OUTCOME[errname(p.rc)] then
        p.q:_delete_by_prefix(p.prefix, p.serial)
    end
end


--- Step 1: create our node, listing the parent in the same round trip.
function _M:_create(deadline)
    local client = self.client
    local base = self.path == "/" and "" or self.path
    local prefix = "_c_" .. _M.uuid() .. "-"
    local tries = 0
    while true do
        tries = tries + 1
        local fc = client:send("create", base .. "/" .. prefix .. self.marker, self.data,
                               { ephemeral = true, sequential = true })
        local fl = client:send("children", self.path)
        local serial = client._serial
        local e = fc.entry
        if e then
            -- A reply that arrives after we gave up: delete what it created,
            -- or what it may have created when the reply was lost.
            e.late, e.client, e.q, e.prefix = delete_late_create, client, self, prefix
        end
        local node, stat = fc:wait(self:_reply_wait(deadline))
        local names = fl:wait(self:_reply_wait(deadline))
        if node then
            self._node, self._stat, self._serial = node, stat, client._serial
            self._name = match(node, "[^/]+$")
            client:_own(node, self)
            return true, names
        end
        local err = stat
        if err == "nonode" and tries < 4 then
            local ok, perr = self:_create_parents()
            if not ok and perr ~= "nonode" then
                return nil, perr
            end
        elseif client._closed then
            return nil, "closed"
        elseif err == "timeout" then
            return nil, "timeout"
        elseif err == "connectionloss" or err == "sessionexpired" or err == "operationtimeout" then
            local left = remaining(deadline)
            if left == 0 or not client:_wait_state(function(st)
                        return st == "connected" or st == "closed" end, left) then
                if err ~= "sessionexpired" then
                    self:_delete_by_prefix(prefix, serial)   -- it may exist
                end
                return nil, "timeout"
            end
            if err ~= "sessionexpired" then
                local path, fstat, fnames = self:_find_own(prefix, deadline)
                if path then
                    self._node, self._stat, self._serial = path, fstat, client._serial
                    self._name = match(path, "[^/]+$")
                    client:_own(path, self)
                    return true, fnames
                elseif path == nil then
                    self:_delete_by_prefix(prefix, serial)   -- could not look: it may exist
                end
            end
            if not self._try and remaining(deadline) == 0 then
                return nil, "timeout"    -- no new create once the time is up
            end
            prefix = "_c_" .. _M.uuid() .. "-"
        else
            return nil, err
        end
        if tries > 1000 then
            return nil, "timeout"
        end
    end
end


--- Joins the line (if not already in it) and waits until the rule lets us
--- through, at most `timeout` seconds (nil: no limit; 0: decide now).
---@return true|nil ok, string? err  "timeout" | "closed" | a ZooKeeper code
function _M:enter(timeout)
    check_self(self, "enter")
    if timeout ~= nil and (type(timeout) ~= "number" or not (timeout >= 0)) then  -- luacheck: ignore 581
        error("bad argument #1 to 'enter' (timeout must be nil or a number >= 0)", 2)
    end
    local client = self.client
    local deadline = timeout and now() + timeout
    self._try = timeout == 0
    if client._closed then
        return nil, "closed"
    end
    local names
    local joined = false
    while true do
        if self._node and self._serial ~= client._serial then
            self:_forget()    -- the session that owned it ended: join again
        end
        if not self._node then
            -- Joining again (our node went) only while there is time left.
            if joined and not self._try and remaining(deadline) == 0 then
                return nil, "timeout"
            end
            joined = true
            local ok, res = self:_create(deadline)
            if not ok then
                return nil, res
            end
            names = res
        end
        if not names then
            local err
            names, err = client:_read_until(self:_read_deadline(deadline), "children",
                                            self.path)
            if not names then
                local again, why = self:_retry_after(err, deadline)
                if not again then
                    self:leave()
                    return nil, why or err    -- why we stopped: "timeout", "closed" ...
                end
            end
        end
        if names then
            local entries = self:parse(names)
            names = nil
            local me = index_of(entries, self._name)
            if not me then
                -- Our node is gone (deleted, or its session ended): join again.
                self:_forget()
            else
                local verdict = self.rule(entries, me, self)
                if verdict == true then
                    self._through = true
                    if #self._lost_fns > 0 then
                        self:_watch_own()
                    end
                    return true
                end
                if type(verdict) ~= "table" or type(verdict.path) ~= "string" then
                    self:leave()    -- no node left behind in the line
                    error(("bad argument #3 to 'queue.new' (its rule returned %s: a rule "
                           .. "returns true or one of the entries it was given)")
                          :format(verdict == nil and "nil" or "a " .. type(verdict)), 2)
                end
                local left = remaining(deadline)
                if left == 0 then
                    self:leave()
                    return nil, "timeout"
                end
                local ok, err = self:_wait_for(verdict, deadline)
                if not ok then
                    self:leave()
                    return nil, err
                end
            end
        end
    end
end


-- The watch's upvalue must not live on the waiting coroutine's stack: in
-- nginx that coroutine may be gone (request aborted) when the watch fires.
local function waker(ev)
    return function() ev:set() end
end


-- Waits until `entry` changes or goes. Returns true to re-check the line.
function _M:_wait_for(entry, deadline)
    local client = self.client
    local ev = client:waiter():event()
    local wake = waker(ev)
    local data, err = client:_read_until(self:_read_deadline(deadline), "get", entry.path, wake)
    if data == nil then
        if err == "nonode" then
            return true
        end
        if err == "timeout" then
            client:remove_watches(entry.path, wake)   -- its reply may still come
        end
        return self:_retry_after(err, deadline)
    end
    ev:wait(remaining(deadline))
    if ev.is_set then
        return true
    end
    client:remove_watches(entry.path, wake)
    if client._closed then
        return nil, "closed"
    end
    return nil, "timeout"
end


-- After a failed read: wait for the connection and go on, or give up.
function _M:_retry_after(err, deadline)
    local client = self.client
    if client._closed then
        return nil, "closed"
    end
    if err == "connectionloss" or err == "sessionexpired" or err == "operationtimeout" then
        local left = remaining(deadline)
        if left == 0 then
            return nil, "timeout"
        end
        if client:_wait_state(function(st) return st == "connected" or st == "closed" end, left)
                and not client._closed then
            return true
        end
        return nil, client._closed and "closed" or "timeout"
    end
    return nil, err
end


-- Ready-made rules. `me` is our index in the sorted entries.

--- Through when first: exclusive lock, election, write lock.
function _M.rule_first(entries, me)
    return me == 1 or entries[me - 1]
end


--- Through when fewer than n are ahead: semaphore with n leases.
function _M.rule_fewer_than(n)
    return function(entries, me)
        return me <= n or entries[me - n]
    end
end


--- Through when no lower entry carries `marker` (a reader behind writers);
--- watches the last such entry.
function _M.rule_none_below(marker)
    return function(entries, me)
        for i = me - 1, 1, -1 do
            if entries[i].marker == marker then
                return entries[i]
            end
        end
        return true
    end
end


return _M
