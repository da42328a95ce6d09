--- zkcoord.wait.ngx.ticker: the nginx waiter's ticker, reaper and exit drain.
--
-- What the waiter watches while requests wait or hold nodes. Owns the
-- ticker (one ngx.timer at a time, armed only while an event is waited
-- on, a request holds nodes, or the session is suspended), the reaper (its
-- visit of every waiting event: the semaphore's count, a peek at the
-- request's client socket, the events whose coroutine is gone), the end
-- of requests that own nodes (ngx.ctx freed) and the exit drain's step.
-- Rules:
--  * a waiter whose coroutine is gone (request aborted, light thread
--    killed) leaves: the reply it waited for goes to its late handler (a
--    create's deletes the node), and the positions it waited in leave the
--    line; its grants stay with the request, which releases them when it
--    ends;
--  * a request that ended loses its nodes; one still held is logged as a
--    warning, since the request should have released it;
--  * a client that went away wakes its waiter as a timeout would: nginx
--    sees it only with lua_check_client_abort on, so the reaper peeks, at
--    most every PEEK_EVERY seconds (one recv() per waiting request), and
--    wakes a waiter whose client two peeks in a row saw gone (nginx's own
--    check, and the user's on_abort, come first);
--  * while the worker exits, a set event not yet resumed no longer counts
--    as waiting, so the drain ends;
--  * a visit of thousands (10,000 waiters: 20 ms with the peeks) pauses
--    when the worker is overdue (zkcoord.wait.ngx.turn), over a list of
--    what was there when it began: what went meanwhile is skipped;
--  * a tick visits at most VISITS waiting events and VISITS requests, going
--    on where the tick before stopped: a round over all of them spans
--    several ticks once more wait (10,000: half a second). Visiting all at
--    every tick cost 3-4 ms a tick with 10,000 waiting, a third of the
--    worker's CPU while a hot lock handed them over one by one.
-- Functions take the waiter as `self`: this module is part of the
-- waiter's class and reads its fields (zkcoord.wait.ngx's `new` lists
-- them). It touches ngx only when called, so it loads outside nginx.
local ngx = ngx
local turn = require "zkcoord.wait.ngx.turn"
local gate = require "zkcoord.wait.ngx.gate"
local contract = require "zkcoord.contract"
local pcall, pairs, next, type = pcall, pairs, next, type

local _M = { _VERSION = require("zkcoord.version") }

local TICK = 0.05              -- seconds between ticks while armed
-- Seconds between peeks at waiting requests' client connections (one
-- recv() each): the peek only serves requests whose client went away
-- without lua_check_client_abort; every tick would cost a system call per
-- waiting request 20 times a second (40 % of a core at 10,000 waiters).
local PEEK_EVERY = 0.5

-- Is a request's ngx.ctx still its own? lua-resty-core keeps every ctx in
-- one registry table under a reference the request frees when it ends.
local ctx_ref, ctx_tables
do
    local ok = pcall(function()
        local ffi = require "ffi"
        local base = require "resty.core.base"
        require "resty.core.ctx"
        local get_request = base.get_request
        local get_ref = ffi.C.ngx_http_lua_ffi_get_ctx_ref
        local in_ssl, ssl_ref = ffi.new("int[1]"), ffi.new("int[1]")
        ctx_tables = debug.getregistry().ngx_lua_ctx_tables
        ctx_ref = function()
            local r = get_request()
            if not r then
                return nil
            end
            local ref = get_ref(r, in_ssl, ssl_ref)
            return ref > 0 and ref or nil
        end
    end)
    if not ok or type(ctx_tables) ~= "table" then
        ctx_ref, ctx_tables = nil, nil
    end
end

--- The current request's ctx reference (nil outside a request), or nil
--- when this nginx keeps no ctx registry: then no node is tied to a
--- request.
_M.ctx_ref = ctx_ref

-- The client socket of the current request (plain HTTP/1 over TCP), to see
-- a client that went away while its request waits. The first fields of
-- ngx_http_request_t (signature, connection) and ngx_connection_t (data,
-- read, write, fd) have kept their places across nginx versions; the
-- signature is checked.
local request_fd, client_gone
do
    local ok = pcall(function()
        local ffi = require "ffi"
        local get_request = require("resty.core.base").get_request
        pcall(ffi.cdef, "long recv(int sockfd, void *buf, size_t len, int flags);")
        local recv = ffi.C.recv
        local u32, vpp, ip, cp = ffi.typeof("uint32_t *"), ffi.typeof("void **"),
            ffi.typeof("int *"), ffi.typeof("char *")
        local HTTP = 0x50545448          -- "HTTP"
        local PEEK_NOWAIT = 0x02 + 0x40  -- MSG_PEEK | MSG_DONTWAIT
        local buf = ffi.new("char[1]")
        local ptr_size = ffi.sizeof("void *")
        request_fd = function()
            local r = get_request()
            if not r or ffi.cast(u32, r)[0] ~= HTTP then
                return nil
            end
            local c = ffi.cast(vpp, ffi.cast(cp, r) + ptr_size)[0]
            if c == nil then
                return nil
            end
            local fd = ffi.cast(ip, ffi.cast(cp, c) + 3 * ptr_size)[0]
            return fd >= 0 and fd or nil
        end
        client_gone = function(fd)
            return recv(fd, buf, 1, PEEK_NOWAIT) == 0
        end
    end)
    if not ok then
        request_fd, client_gone = nil, nil
    end
end
local REQUEST_PHASES = { rewrite = true, access = true, content = true }

--- Notes the client socket of the request that waits on `ev`, for the
--- reaper's peeks (in a request's rewrite, access or content phase only).
function _M.note_client(ev)
    if request_fd and REQUEST_PHASES[ngx.get_phase()] then
        ev.fd = request_fd()
    end
end


-- Deletes the node of entry `e` (its position leaves the line).
local function drop(client, path, e, why)
    local q = e.q
    if q:node() == path then
        if q:is_through() then
            ngx.log(ngx.WARN, "zkcoord: ", why, " holding ", path, ": released")
        end
        q:leave()
    else
        contract.disown_node(client, path)
    end
end


-- Entries visited between two looks at the clock.
local CHUNK = 256

--- Waiting events, and requests that own nodes, one tick visits at most.
_M.VISITS = 1000

--- The keys of set `t`, in a list: a visit that pauses must not walk the
--- set itself, which others change meanwhile.
function _M.snapshot(t)
    local list, n = {}, 0
    for k in pairs(t) do
        n = n + 1
        list[n] = k
    end
    return list
end


-- The next at most `limit` of a round over the keys of set `t` (field
-- `key` of the waiter keeps it: { list, done }): the list from `first` to
-- `last`, and the round's table. A new round begins with what `t` holds
-- when the last one ended; without a limit, a whole list of its own.
local function slice(self, key, t, limit)
    if not limit then
        local list = _M.snapshot(t)
        return list, 1, #list, nil
    end
    local r = self[key]
    if not r then
        r = { list = _M.snapshot(t), done = 0 }
        self[key] = r
    end
    local first, last = r.done + 1, #r.list
    if last - first + 1 > limit then
        last = first + limit - 1
    else
        self[key] = false    -- the round ends with this visit
    end
    r.done = last
    return r.list, first, last, r
end


--- Requests that ended: their nodes go. A request whose nodes all went
--- normally is forgotten (a later node makes a new scope). At most
--- `limit` requests (nil: all), going on with the round the last call left.
function _M.end_scopes(self, yieldable, limit)
    local client = self.client
    local scopes, first, last = slice(self, "scope_round", self.scopes, limit)
    for i = first, last do
        local s = scopes[i]
        if yieldable and i % CHUNK == 0 and turn.overdue() then
            turn.pause()
        end
        if self.scopes[s] then      -- else forgotten by a visit during our pause
            if ctx_tables[s.ref] ~= s.ctx then
                for path, e in pairs(s.nodes) do
                    drop(client, path, e, "the request ended")
                end
                s.nodes = {}
            end
            if next(s.nodes) == nil then
                self.scopes[s] = nil
                if self.by_ctx[s.ctx] == s then
                    self.by_ctx[s.ctx] = nil
                end
            end
        end
    end
end
local end_scopes = _M.end_scopes


-- The positions of coroutine `co` in scope `s` it was waiting in leave
-- the line.
local function leave_waiting(client, s, co)
    for path, e in pairs(s.nodes) do
        if e.co == co and not e.q:is_through() then
            drop(client, path, e, "a killed thread")
        end
    end
end


-- A coroutine killed while waiting (a light thread of a request or a
-- timer, an aborted request): the positions it was waiting in leave the
-- line. A timer's nodes are noted by coroutine (waiter:track).
local function abandoned(self, co)
    local client = self.client
    for s in pairs(self.scopes) do
        leave_waiting(client, s, co)
    end
    local s = self.by_co[co]
    if s then
        leave_waiting(client, s, co)
    end
end


-- An event whose coroutine is gone: the reply it waited for goes to the
-- request's late handler, as for a caller that gave up, and the positions
-- the coroutine waited in leave.
local function abandon(self, ev, was_set)
    ev.abandoned = true
    local p = ev.entry
    if was_set and p and p.done and p.late then
        local late = p.late
        p.late = nil
        self:defer(late, p, p.ctx)
    end
    if ev.co then
        abandoned(self, ev.co)
    end
end


-- One waiting event of the reaper's visit (see reap).
local function visit(self, ev, exiting, peek)
    if ev.is_set then
        -- Set, but its coroutine may never resume: its request was
        -- aborted just after the set (a reply arriving after the
        -- abort). While the worker exits it no longer counts as
        -- waiting (or the exit drain would never end); a live
        -- coroutine resumes within a loop iteration, so one still not
        -- resumed a second after the set is gone: its positions leave.
        local gated = ev.gated   -- set, and waiting its turn (wait/ngx/gate.lua)
        if ev.sema:count() >= 0 and not (gated and gate.alive(gated)) then
            local stale = ev.set_at and ngx.now() - ev.set_at > 1
            if exiting or stale then
                self.live[ev] = nil
                self.waiting = self.waiting - 1
                if stale then
                    abandon(self, ev, true)
                end
            end
        end
    else
        if ev.sema:count() >= 0 then
            self.live[ev] = nil
            self.waiting = self.waiting - 1
            abandon(self, ev, false)
        elseif peek and ev.fd and client_gone(ev.fd) then
            -- Ended at the next peek, if it still waits: with
            -- lua_check_client_abort on, nginx's own check must come
            -- first (the user's on_abort). A peek can see the close
            -- before nginx reads it (a worker held back between its
            -- poll and its timers), and a wait ended here could let
            -- the request answer and end before that read.
            if ev.gone_seen then
                self.live[ev] = nil
                self.waiting = self.waiting - 1
                ev.cancelled = true
                ev.sema:post(1)
            else
                ev.gone_seen = true
            end
        end
    end
end


-- Is it time to peek at the waiting requests' client sockets again?
local function peek_due(self)
    if client_gone then
        local t = ngx.now()
        if t >= (self.next_peek or 0) then
            self.next_peek = t + PEEK_EVERY
            return true
        end
    end
    return false
end


--- Visits the waiting events: one whose coroutine is gone (its semaphore
--- has no waiter and was never posted) is abandoned; one whose client
--- closed its connection is woken, its wait failing as a timeout would.
--- At most `limit` of them (nil: all), going on with the round the last
--- call left; a round peeks at the clients when it begins after the peek
--- was due.
function _M.reap(self, yieldable, limit)
    local exiting = ngx.worker.exiting()
    local live, first, last, round = slice(self, "reap_round", self.live, limit)
    local peek
    if not round then
        peek = peek_due(self)
    else
        if round.peek == nil then
            round.peek = peek_due(self)
        end
        peek = round.peek
    end
    for i = first, last do
        local ev = live[i]
        if yieldable and i % CHUNK == 0 and turn.overdue() then
            turn.pause()
        end
        if self.live[ev] then       -- else resumed, or reaped, during our pause
            visit(self, ev, exiting, peek)
        end
    end
end
local reap = _M.reap


local arm

local function tick(premature, self)
    local client = self.client
    if contract.is_closed(client) then
        self.ticking = false
        return
    end
    -- `ticking` stays true while the visit pauses: one tick at a time.
    -- Premature (the worker exits): everything at once.
    local limit = not premature and _M.VISITS or nil
    local ok, err = pcall(function()
        reap(self, not premature, limit)
        end_scopes(self, not premature, limit)
        self.pump:check_timers()
    end)
    self.ticking = false
    if not ok then
        ngx.log(ngx.ERR, "zkcoord: tick: ", err)
    end
    if not premature and (next(self.live) or next(self.scopes) or client:state() == "suspended") then
        arm(self)
    end
end


--- Arms the ticker (one timer at a time) while something needs watching;
--- each tick reaps, ends the requests that ended, runs the session timers,
--- and arms the next while something still does.
function _M.arm(self)
    if self.ticking or contract.is_closed(self.client) then
        return
    end
    local ok = ngx.timer.at(self.pump:timer_cap(TICK), tick, self)
    if ok then
        self.ticking = true
    end
end
arm = _M.arm


--- One step of the exit drain (the poll loop's, while the worker exits):
--- reaps, ends the requests that ended, and says whether no request waits
--- any more (then the drain is over).
function _M.drained(self)
    reap(self)
    if ctx_ref then
        end_scopes(self)
    end
    return self.waiting == 0
end


return _M
