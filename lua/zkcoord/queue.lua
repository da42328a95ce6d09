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
--      "wait until this one node changes" (exactly one: no herd effect),
--      `queue.ANY` means "wait until the line changes" (any create or
--      delete under the parent: for rules no single node can answer);
--   4. watch that node with get() (a watch on a missing node is never set,
--      so none leaks, Curator's choice), or list the line again with a
--      watch and ask the rule about that very listing; wait, go back to 2.
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
-- choice), a position already through reports `on_lost`. A persistent
-- entry (opts.persistent, for items that must outlive their creator) stays
-- through session loss: it goes only by leave() or someone's delete.
local core = require "zkcoord.core"
local errname = require("zkcoord.errors").name

local client_mod = require "zkcoord.client"

local now = core.now
local type, error, ipairs, setmetatable = type, error, ipairs, setmetatable
local pairs, tostring, getmetatable = pairs, tostring, getmetatable
local tonumber, sort, match, gsub, sub = tonumber, table.sort, string.match,
    string.gsub, string.sub
local find = string.find
local array_length = client_mod.array_length
local argerror = client_mod.argerror
local raise = client_mod.raise
local CLIENT_MT = client_mod.mt

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }


-- Every public method raises on a wrong self, whatever it is (a number, a
-- boolean, cdata): getmetatable never indexes it.
local function check_self(self, name)
    if getmetatable(self) ~= mt then
        error(("'%s' must be called on a queue position (use q:%s(...))"):format(name, name), 3)
    end
end

local SEQ_WRAP = 4294967296

--- The rule's verdict "wait until the line changes": any participant
--- joining or leaving wakes us (a children watch on the parent).
_M.ANY = setmetatable({}, { __tostring = function() return "queue.ANY" end })
local ANY = _M.ANY


--- A random version-4 UUID (36 characters, as Curator's protected names use),
-- from the kernel's random source: never math.random, whose sequence is
-- the application's.
-- @function uuid
_M.uuid = core.uuid


local function escape(s)
    return (gsub(s, "[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"))
end


---@class zkcoord.queue_opts
---@field marker string       name part before the sequence number, e.g. "lock-"
---@field markers string[]?   every marker whose nodes take part (default { marker })
---@field rule fun(entries: table[], me: integer, q: table): (true|table)
---@field data string?        our node's data
---@field parents string?     "container" (default) or "persistent" for missing parents
---@field persistent boolean? our node is persistent-sequential: it outlives our session

local OPT_KEYS = { marker = true, markers = true, rule = true, data = true, parents = true,
                   persistent = true }
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
            bad_opts("unknown option '" .. tostring(k)
                     .. "' (marker, markers, rule, data, parents, persistent)")
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
    if opts.persistent ~= nil and type(opts.persistent) ~= "boolean" then
        bad_opts("persistent must be a boolean, got " .. type(opts.persistent))
    end
    return setmetatable({
        client = client,
        path = parent,
        marker = opts.marker,
        patterns = patterns,
        rule = opts.rule,
        data = opts.data,
        parent_mode = opts.parents == "persistent" and true or "container",
        persistent = opts.persistent or false,
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


local EMPTY = {}

local function index_of(entries, name)
    for i, e in ipairs(entries) do
        if e.name == name then
            return i
        end
    end
    return nil
end


--- fn(entries, me, q) now and after every change of the line, until
--- w:cancel(): the participants in sequence order and our index among them
--- (nil while we are not in the line). Re-armed by itself, also in a new
--- session (client:watch's rules); an empty line while the parent is
--- missing. Needs no node of our own: an observer can watch a line.
---@return table|nil w, string? err
function _M:watch_line(fn)
    check_self(self, "watch_line")
    if type(fn) ~= "function" then
        argerror(1, "watch_line", "function expected, got " .. type(fn))
    end
    return self.client:watch(self.path, function(names)
        local entries = self:parse(names or EMPTY)
        fn(entries, self._name and index_of(entries, self._name), self)
    end, { kind = "children" })
end


-- Is our node still ours? An ephemeral node lives as long as the session
-- that created it; a persistent one until someone deletes it.
local function owned(self)
    return self.persistent or self._serial == self.client:serial()
end


-- Forgets our node locally. The watch on it (if any) is left to fire on
-- the delete that follows, and is ignored then: no extra request.
function _M:_forget()
    local node = self._node
    self._node, self._name, self._stat, self._through = nil, nil, nil, false
    if node then
        self.client:disown_node(node)
    end
    return node
end


--- Deletes our node (if any) without waiting: the delete is ordered before
--- this session's next request, and retried until it succeeds or the
--- session that owns the node ends.
function _M:leave()
    check_self(self, "leave")
    local mine = owned(self)
    local node = self:_forget()
    if node and mine then
        self.client:delete_guaranteed(node, nil, self.persistent)
    end
    return true
end


--- Is our node alive and through, in the current session?
function _M:is_through()
    check_self(self, "is_through")
    local c = self.client
    if self.persistent then
        return self._through and not c:is_closed()
    end
    return self._through and self._serial == c:serial()
           and c:state() ~= "lost" and c:state() ~= "closed"
end


--- The full path of our node (nil while not in the line).
function _M:node()
    check_self(self, "node")
    return self._node
end


--- Our node's sequence number (nil while not in the line).
function _M:seq()
    check_self(self, "seq")
    local name, seq = self._name, nil
    if name then
        for _, p in ipairs(self.patterns) do
            if p.marker == self.marker then
                seq = tonumber(match(name, p.pattern))
                break
            end
        end
    end
    if seq and seq < 0 then
        seq = seq + SEQ_WRAP
    end
    return seq
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
        if self.persistent then
            self:_rewatch_when_connected(ev.path)   -- the node outlives the session
        else
            self:_lost("sessionexpired")
        end
    elseif ev.type == "changed" then
        self:_watch_own()    -- re-arm (data writes, e.g. revocation)
    end
end


local function own_watch_reply(p, ctx)
    local self, node = ctx.q, ctx.node
    if self._node ~= node or p.rc == 0 then
        return
    end
    local e = errname(p.rc)
    if e == "nonode" then
        self:_lost("deleted")          -- gone before the watch was set
    elseif e == "closed" and self.persistent then
        return
    elseif (p.lost or e == "sessionexpired" or e == "closed") and not self.persistent then
        self:_lost("sessionexpired")
    else
        self:_rewatch_when_connected(node)
    end
end


function _M:_watch_own()
    local node = self._node
    local f = self.client:send("exists", node, own_watch_fired, self)
    if not f:on_late(own_watch_reply, { q = self, node = node }) then
        return self:_rewatch_when_connected(node)
    end
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
        if new == "lost" and self.persistent then
            return    -- the node outlives the session: watch it again in the next
        end
        client:remove_listener(listener)
        if self._node ~= node or (new == "closed" and self.persistent) then
            return
        end
        if new == "connected" and owned(self) then
            self:_watch_own()
        else
            self:_lost("sessionexpired")
        end
    end)
    if client:state() == "connected" and owned(self) then
        -- Already back (or never left): no transition will come.
        client:remove_listener(listener)
        self:_watch_own()
    end
end


local remaining = require("zkcoord.util").remaining


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
    local names, err = client:read_until(deadline, "children", self.path)
    if not names then
        return nil, err
    end
    local sid = client:session_id()
    for _, name in ipairs(names) do
        if sub(name, 1, #prefix) == prefix then
            local path = (self.path == "/" and "" or self.path) .. "/" .. name
            local stat, serr = client:read_until(deadline, "exists", path)
            if stat and (stat.ephemeral_owner == sid
                         or (self.persistent and not stat.ephemeral_owner)) then
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
local CREATE_EPHEMERAL = { ephemeral = true, sequential = true }
local CREATE_PERSISTENT = { sequential = true }

function _M:_delete_by_prefix(prefix, serial)
    local client, parent = self.client, self.path
    local base = parent == "/" and "" or parent
    local persistent = self.persistent
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
                    if stat and persistent and not stat.ephemeral_owner then
                        client:delete_guaranteed(path, nil, true)
                    elseif stat and client:serial() == serial
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
        if client:is_closed() or (client:serial() ~= serial and not persistent) then
            return finish()
        end
        if client:state() ~= "connected" then
            return    -- again at the next state change
        end
        busy = true
        client:send("children", parent):on_done(listed)
    end
    listener = client:on_state(function() try() end)
    try()
end


local function delete_late_create(p, ctx)
    local q = ctx.q
    if p.rc == 0 and p.value then
        q.client:delete_guaranteed(p.value, nil, q.persistent)
    elseif (not p.lost or q.persistent) and UNKNOWN_OUTCOME[errname(p.rc)] then
        q:_delete_by_prefix(ctx.prefix, p.serial)  -- same class
    end
end


-- An ephemeral node is registered with the client, which deletes it when a
-- new session replaces ours and, in nginx, when the request ends. A
-- persistent entry (a work item) must outlive both: never registered.
function _M:_register(node)
    if not self.persistent then
        self.client:own_node(node, self)
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
                               self.persistent and CREATE_PERSISTENT or CREATE_EPHEMERAL)
        local fl = client:send("children", self.path)
        local serial = client:serial()
        -- A reply that arrives after we gave up: delete what it created,
        -- or what it may have created when the reply was lost.
        fc:on_late(delete_late_create, { q = self, prefix = prefix })
        local node, stat = fc:wait(self:_reply_wait(deadline))
        local names = fl:wait(self:_reply_wait(deadline))
        if node then
            self._node, self._stat, self._serial = node, stat, client:serial()
            self._name = match(node, "[^/]+$")
            self:_register(node)
            return true, names
        end
        local err = stat
        if err == "nonode" and tries < 4 then
            local ok, perr = self:_create_parents()
            if not ok and perr ~= "nonode" then
                return nil, perr
            end
        elseif client:is_closed() then
            return nil, "closed"
        elseif err == "timeout" then
            return nil, "timeout"
        elseif err == "connectionloss" or err == "sessionexpired" or err == "operationtimeout" then
            local left = remaining(deadline)
            if left == 0 or not client:wait_state(function(st)
                        return st == "connected" or st == "closed" end, left) then
                if err ~= "sessionexpired" or self.persistent then
                    self:_delete_by_prefix(prefix, serial)   -- it may exist
                end
                return nil, "timeout"
            end
            if err ~= "sessionexpired" or self.persistent then
                local path, fstat, fnames = self:_find_own(prefix, deadline)
                if path then
                    self._node, self._stat, self._serial = path, fstat, client:serial()
                    self._name = match(path, "[^/]+$")
                    self:_register(path)
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


-- What a rule returned, for an error message.
local function show(verdict)
    if type(verdict) == "table" then
        if type(verdict.name) == "string" then
            return "an entry that is not in the line it was given (" .. verdict.name .. ")"
        end
        return "a table that is not one of its entries"
    elseif type(verdict) == "string" then
        return ("the string %q"):format(verdict)
    end
    return type(verdict) == "nil" and "nil" or "a " .. type(verdict) .. " (" .. tostring(verdict) .. ")"
end


-- Raises unless `verdict` is queue.ANY or one of `entries` other than ours.
local function check_verdict(self, verdict, entries, me)
    if verdict == ANY or (me > 1 and verdict == entries[me - 1]) then
        return
    end
    if type(verdict) == "table" then
        for i = 1, #entries do
            if entries[i] == verdict then
                if i ~= me then
                    return
                end
                self:leave()
                raise("bad rule verdict in 'enter' (the rule of the queue at " .. self.path
                      .. " returned our own entry: waiting on it would never end)", 3)
            end
        end
    end
    self:leave()    -- no node left behind in the line
    local hint = ""
    if type(verdict) == "function" then
        hint = "; pass the rule a ready-made rule maker returns, e.g. queue.rule_fewer_than(n),"
               .. " not the maker itself"
    end
    raise(("bad rule verdict in 'enter' (the rule of the queue at %s returned %s: a rule "
           .. "returns true, queue.ANY or one of the entries it was given%s)")
          :format(self.path, show(verdict), hint), 3)
end


-- Stops waiting for a change of the line (fire and forget).
local function disarm(self, armed)
    if armed then
        self.client:remove_watches(self.path, armed.wake)
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
    if client:is_closed() then
        return nil, "closed"
    end
    local names
    local joined = false
    local armed       -- { ev =, wake = } while a watch on the line is set
    while true do
        if self._node and not owned(self) then
            self:_forget()    -- the session that owned it ended: join again
        end
        if not self._node then
            -- Joining again (our node went) only while there is time left.
            if joined and not self._try and remaining(deadline) == 0 then
                disarm(self, armed)
                return nil, "timeout"
            end
            joined = true
            local ok, res = self:_create(deadline)
            if not ok then
                disarm(self, armed)
                return nil, res
            end
            names = res
        end
        if not names then
            local err
            names, err = client:read_until(self:_read_deadline(deadline), "children",
                                            self.path)
            if not names then
                local again, why = self:_retry_after(err, deadline)
                if not again then
                    disarm(self, armed)
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
                local rok, verdict = pcall(self.rule, entries, me, self)
                if not rok then
                    disarm(self, armed)
                    self:leave()    -- a failing rule leaves no node behind
                    error(verdict, 0)
                end
                if verdict == true then
                    disarm(self, armed)
                    self._through = true
                    if #self._lost_fns > 0 then
                        self:_watch_own()
                    end
                    return true
                end
                check_verdict(self, verdict, entries, me)
                if remaining(deadline) == 0 then
                    disarm(self, armed)
                    self:leave()
                    return nil, "timeout"
                end
                local ok, err
                if verdict == ANY then
                    ok, err, names, armed = self:_wait_line(armed, deadline)
                else
                    disarm(self, armed)
                    armed = nil
                    ok, err = self:_wait_for(verdict, deadline)
                end
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


-- The rule said queue.ANY. If a watch on the line is set already (the rule
-- just saw the listing that set it), wait for it to fire; then list the
-- line again with a new watch, so the rule's next answer is about exactly
-- the listing the watch starts from: no change can slip between the two.
-- Returns true, the new listing and the armed watch (or nil, err).
function _M:_wait_line(armed, deadline)
    local client = self.client
    if armed then
        armed.ev:wait(remaining(deadline))
        if not armed.ev.is_set then
            disarm(self, armed)
            return nil, client:is_closed() and "closed" or "timeout"
        end
    end
    local ev = client:waiter():event()
    local wake = waker(ev)
    local names, err = client:read_until(self:_read_deadline(deadline), "children", self.path,
                                          wake)
    if names then
        return true, nil, names, { ev = ev, wake = wake }
    end
    if err == "nonode" then
        return true, nil, {}, nil      -- the parent went, and our node with it: join again
    end
    if err == "timeout" then
        client:remove_watches(self.path, wake)   -- its reply may still come
    end
    local again, why = self:_retry_after(err, deadline)
    return again, why, nil, nil
end


-- Waits until `entry` changes or goes. Returns true to re-check the line.
function _M:_wait_for(entry, deadline)
    local client = self.client
    local ev = client:waiter():event()
    local wake = waker(ev)
    local data, err = client:read_until(self:_read_deadline(deadline), "get", entry.path, wake)
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
    if client:is_closed() then
        return nil, "closed"
    end
    return nil, "timeout"
end


-- After a failed read: wait for the connection and go on, or give up.
function _M:_retry_after(err, deadline)
    local client = self.client
    if client:is_closed() then
        return nil, "closed"
    end
    if err == "connectionloss" or err == "sessionexpired" or err == "operationtimeout" then
        local left = remaining(deadline)
        if left == 0 then
            return nil, "timeout"
        end
        if client:wait_state(function(st) return st == "connected" or st == "closed" end, left)
                and not client:is_closed() then
            return true
        end
        return nil, client:is_closed() and "closed" or "timeout"
    end
    return nil, err
end


-- Ready-made rules. `me` is our index in the sorted entries.

--- Through when first: exclusive lock, election, write lock.
function _M.rule_first(entries, me)
    return me == 1 or entries[me - 1]
end


--- Always through at once: a place in the line that does not wait (a
--- group member, a work item); watch the line with q:watch_line().
function _M.rule_always()
    return true
end


--- Through when fewer than n are ahead: k-of-n slots in one line. Any of
--- the n ahead may leave first, so no single node can be watched: every
--- waiter waits for any change of the line (queue.ANY), and each change
--- wakes every waiter. Right for a few waiters; client:semaphore() is the
--- herd-free k-of-n (an internal lock: only its holder watches the line).
function _M.rule_fewer_than(n)
    if type(n) ~= "number" or n % 1 ~= 0 or n < 1 then
        argerror(1, "queue.rule_fewer_than", "n must be an integer >= 1, got "
                 .. (type(n) == "table" and "a table: pass queue.rule_fewer_than(n) as the "
                     .. "rule, not queue.rule_fewer_than" or tostring(n)))
    end
    return function(_, me)
        return me <= n or ANY
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
