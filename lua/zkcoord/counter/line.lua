--- zkcoord.counter.line: the fair line of adds under contention, and turns.
--
-- Owns the line (opts.fair): an add that lost a race queues as an
-- ephemeral-sequential child of the counter's node,
-- "_c_<uuid>-d<delta>-add-<seq>", its delta in its name; its data is
-- "d<delta>" while it waits, "t" while its turn lasts, "=<value>" once a
-- head wrote that add for it.
--
-- Rules:
-- * The head (no entry before it) reads the counter and lists the line in
--   one round trip and writes in one multi: the counter (a versioned set)
--   and its own entry marked "t". For `turn` seconds its adds are single
--   versioned sets from the version of its last reply (add_in_turn); the
--   first after that also deletes its entry, and the next in line is the
--   head. With turn = 0 the head writes the counter moved by its own delta
--   and every delta queued behind it, marks each of those entries with its
--   value (a set at version 0: an entry served or gone fails the multi,
--   nothing is counted twice) and deletes its own; the ones it served wake
--   on their entry's change, read their value and delete their entry.
-- * A waiter watches its predecessor only, and waits while it changes. One
--   in its turn whose counter stays still for turn / 2 stopped adding: the
--   next in line ends that turn by deleting its entry. One that does not
--   move at all (a dead process's entry until its session expires, or a
--   slow one) is passed after max(0.1, 5 * turn) seconds of a still
--   counter: versioned writes keep the counter exact whoever writes; only
--   the order bends, and only then.
-- * Writers outside the line (fair = false, kazoo, Curator) are not
--   ordered by it: the head retries against them with backoff, max_tries
--   times. Every wait is bounded by opts.timeout.
-- Functions take the counter as `self`: this module is part of the
-- counter's class and reads its fields (zkcoord.counter documents them).
local core = require "zkcoord.core"
local deadlines = require "zkcoord.util.deadline"
local retries = require "zkcoord.util.retry"
local callbacks = require "zkcoord.util.callbacks"
local fmt = require "zkcoord.counter.format"
local write = require "zkcoord.counter.write"
local unknown_outcome = require("zkcoord.errors").unknown_outcome

local tonumber, ipairs, select = tonumber, ipairs, select
local format, match = string.format, string.match
local min, max = math.min, math.max
local sort = table.sort
local is_int, tointeger = fmt.is_int, fmt.tointeger
local MAYBE = write.MAYBE
local encode, decode, out_of_range = write.encode, write.decode, write.out_of_range
local lost_reply, backoff, send = write.lost_reply, write.backoff, write.send
local maybe = write.maybe
local remaining = deadlines.remaining

local _M = {}

local ENTRY_NAME = "_c_%s-d%s-add-"
local ENTRY_PARTS = "^_c_.*%-d(%-?%d+)%-add%-(%d+)$"

local MAYBE_ADD = "the add may or may not have been applied"
local TOO_LONG = "waited too long for our turn"


local function by_seq(x, y)
    return x.seq < y.seq
end


-- The watch's upvalue must not live on the waiting coroutine's stack
-- (util.waker). Our timed waits (a turn's idle check) often fall due in
-- the same turn as the watch that sets them: the waiters' contract is that
-- set() wakes a waiting coroutine once even then, so nothing here reaches
-- into a waiter.
local waker = callbacks.waker


-- Our entry was written by a head: its value is ours. Deletes the entry.
local function consumed(self, node, data)
    local v = tointeger(tonumber(data:sub(2)))
    self.client:delete_guaranteed(node)
    self._version = nil          -- we did not see the counter's version
    self._contended = true
    return v
end


-- Leaves the line without our add, unless a head wrote it meanwhile.
local function leave(self, node, err, detail)
    local client = self.client
    local ok, derr = client:delete(node, 0)      -- only while not written
    if ok or derr == "nonode" then
        return nil, err, detail
    end
    if derr == "badversion" then
        local data = client:get(node)
        if data and data:sub(1, 1) == "=" then
            return consumed(self, node, data)
        end
    end
    client:delete_guaranteed(node, 0)
    return maybe(err, MAYBE_ADD)
end


-- Creates our entry (and the counter's node if missing): its path, or
-- nil, err, detail.
local function join(self, dtext)
    local client, path = self.client, self.path
    local node, err
    for _ = 1, retries.MAX_RACES do    -- again only when the counter's node went meanwhile
        node, err = send(self, nil, client.create,
                         path .. "/" .. ENTRY_NAME:format(core.uuid(), dtext),
                         "d" .. dtext, { ephemeral = true, sequential = true })
        if node or err ~= "nonode" then
            break
        end
        local v, rerr, rdetail = write.read(self)          -- creates the counter's node
        if v == nil then
            return nil, rerr, rdetail
        end
    end
    if not node then
        if unknown_outcome[err] then
            return maybe(err, MAYBE_ADD)
        end
        return nil, err
    end
    return node
end


-- Tells when a predecessor and the counter stood still for `limit`
-- seconds: true once (and forgets), false while they move or have not
-- been still that long (a change starts the count again).
local function still(s, t, version, pname, limit)
    if s.since and s.version == version and s.pred == pname then
        if t - s.since >= limit then
            s.since = nil
            return true
        end
        return false
    end
    s.since, s.version, s.pred = t, version, pname
    return false
end


-- Reads in one round trip the line, the counter, our entry and our
-- predecessor's; a change of either entry sets `ev`.
local function look(self, place, ev)
    local client, path = self.client, self.path
    local wake = waker(ev)
    local fnames = client:send("children", path)
    local fcounter = client:send("get", path)
    local fmine = client:send("get", place.node, wake)
    local fpred = place.pred and client:send("get", place.pred.path, wake)
    local names, cerr = fnames:wait()
    local data, vstat = fcounter:wait()
    local mine, mstat = fmine:wait()
    local pdata = fpred and fpred:wait()
    return names, cerr, data, vstat, mine, mstat, pdata
end


-- Keeps the listing's entries other than ours, in sequence order, in
-- place.listed; returns the one just before ours (nil: we are the head).
local function list(self, place, names)
    local base, name, myseq = self.path .. "/", place.name, place.myseq
    local listed, pred = {}, nil
    for _, n in ipairs(names) do
        local d, seq = match(n, ENTRY_PARTS)
        if seq and n ~= name then
            local e = { name = n, seq = tonumber(seq), delta = tonumber(d), path = base .. n }
            listed[#listed + 1] = e
            if e.seq < myseq and (not pred or e.seq > pred.seq) then
                pred = e
            end
        end
    end
    sort(listed, by_seq)
    place.listed = listed
    return pred
end


-- Waits for the predecessor (read with a watch: a new one is read first):
-- a waiting one ("d") or a served one ("=", its owner deletes it) until it
-- changes; one in its turn ("t") until it changes or the counter stays
-- still for `idle` seconds: then its turn is ended. true: we are the head
-- now; false: look again; nil: out of time.
local function follow(self, place, pred, pdata, vstat, ev)
    local seen = place.pred
    if pred == nil then
        place.idle_still.since = nil
        return true
    elseif not (seen and pred.name == seen.name) or not pdata then
        place.pred = pred     -- look again now, with a watch on it
        place.idle_still.since = nil
        return false
    elseif pdata == "t" then
        if still(place.idle_still, place.w:now(), vstat.version, seen.name, place.idle) then
            self.client:delete(seen.path, 1)         -- still in that turn: ended
        else
            ev:wait(min(place.idle, remaining(place.deadline)))
        end
        return false
    end
    if still(place.stall_still, place.w:now(), vstat.version, seen.name, place.stall) then
        return true                                  -- on as the head
    end
    if remaining(place.deadline) == 0 then
        return nil
    end
    ev:wait(min(place.stall, remaining(place.deadline)))
    return false
end


-- The head's multi from counter version `version`: the counter moved to
-- `mine_v` (with turn = 0, also by the deltas queued behind us, each entry
-- marked with its value) and our entry marked "t" (turn > 0) or deleted.
-- Returns the ops, the value written and how many entries it serves.
local function head_ops(self, place, version, mine_v)
    local o = self._opts
    local ops = { { op = "set", path = self.path, version = version } }
    local running = mine_v
    for _, e in ipairs(place.listed) do
        if e.seq > place.myseq and o.turn == 0 then   -- a turn serves only its own
            local nv = e.delta and running + e.delta
            if not (nv and is_int(nv) and not out_of_range(self, nv)) then
                break            -- that one finds out itself, as head
            end
            running = nv
            ops[#ops + 1] = { op = "set", path = e.path,
                              data = "=" .. format("%d", nv), version = 0 }
        end
    end
    ops[1].data = encode(self, running)
    if o.turn > 0 then
        -- our turn begins: our next adds for `turn` seconds write at once
        ops[#ops + 1] = { op = "set", path = place.node, data = "t", version = 0 }
    else
        ops[#ops + 1] = { op = "delete", path = place.node, version = 0 }
    end
    return ops, running, #ops - 2
end


-- The head writes from the counter it read (`data`, `vstat`). Returns our
-- add's value, or nil, err, detail, or false: look again (a writer outside
-- the line won, an entry behind us left or was served, or ours was).
local function write_as_head(self, place, data, vstat)
    local client, o, st, node = self.client, self._opts, self._stats, place.node
    local cur, derr, ddetail = decode(self, data)
    if cur == nil then
        return leave(self, node, derr, ddetail)
    end
    local mine_v = cur + place.delta
    local why = not is_int(mine_v) and "leaves the integer range" or out_of_range(self, mine_v)
    if why then
        return leave(self, node, "invalid", ("counter %s: %s + %s: %s"):format(
            self.path, format("%d", cur), place.dtext, why))
    end
    local ops, running, served = head_ops(self, place, vstat.version, mine_v)
    st.cas_attempts = st.cas_attempts + 1
    local res, merr, results = send(self, place.deadline, client.multi, ops)
    if res then
        local stat = res[1].stat
        self._value, self._version = running, stat.version
        if o.turn > 0 then
            self._turn = { node = node, ends = place.w:now() + o.turn }
            self._contended = true
        else
            -- still others waiting (beyond us and those we served)?
            self._contended = (stat.num_children or 0) > served + 1
        end
        return tointeger(mine_v)
    end
    local cas_err = results and results[1] and results[1].err
    if cas_err == "badversion" then
        -- a writer outside the line (fair = false, another library)
        st.cas_failures = st.cas_failures + 1
        place.tries = place.tries + 1
        if place.tries >= o.max_tries then
            return leave(self, node, "timeout", ("gave up after %d attempts"):format(o.max_tries))
        end
        place.delay = backoff(self, place.delay)
        return false
    end
    local unknown = lost_reply(self, merr, vstat.version, ops[1].data)
    if unknown then
        client:delete_guaranteed(node, 0)
        return maybe(merr, MAYBE)
    elseif unknown == nil and (not (results and results[1])
                               or (cas_err and cas_err ~= "runtimeinconsistency")) then
        return leave(self, node, merr)
    end
    st.cas_failures = st.cas_failures + 1    -- nothing written: again
    return false
end


--- The fair add under contention: joins the line, waits for the head,
--- writes as the head. Returns the add's value, or nil, err, detail.
function _M.add_in_line(self, delta)
    local o, w = self._opts, self.client:waiter()
    local deadline = deadlines.deadline(o.timeout)
    local dtext = format("%d", delta)
    local node, err, detail = join(self, dtext)
    if not node then
        return nil, err, detail
    end
    local name = node:match(".*/(.*)")
    local place = {
        node = node, name = name, myseq = tonumber(select(2, match(name, ENTRY_PARTS))),
        delta = delta, dtext = dtext, w = w, deadline = deadline,
        delay = o.base_delay, tries = 0,
        pred = nil,            -- the entry just before ours, from the last listing
        listed = nil,          -- that listing: entries in sequence order
        idle = max(0.005, o.turn / 2), idle_still = {},
        stall = max(0.1, 5 * o.turn), stall_still = {},
    }
    while true do
        local ev = w:event()
        local names, cerr, data, vstat, mine, mstat, pdata = look(self, place, ev)
        if mine and mine:sub(1, 1) == "=" then
            return consumed(self, node, mine)
        elseif not mine then
            -- our entry went without our delete: our session ended
            return maybe(mstat == "nonode" and "sessionexpired" or mstat, MAYBE_ADD)
        elseif not names then
            return leave(self, node, cerr)
        elseif not data then
            return leave(self, node, vstat)
        end
        local head = follow(self, place, list(self, place, names), pdata, vstat, ev)
        if head == nil then
            return leave(self, node, "timeout", TOO_LONG)
        elseif head then
            local v, werr, wdetail = write_as_head(self, place, data, vstat)
            if v ~= false then
                return v, werr, wdetail
            end
        end
        if remaining(place.deadline) == 0 then
            return leave(self, node, "timeout", TOO_LONG)
        end
    end
end


--- An add in our turn: a versioned set from the version of our last reply;
--- the first after the turn's end also deletes our entry (the next in line
--- is the head then). `nil, nil, "line"`: the turn was lost (ended by the
--- next in line, or a writer outside the line): queue again.
function _M.add_in_turn(self, compute)
    local client, st, turn = self.client, self._stats, self._turn
    local new, err, detail = write.checked(self, compute(self._value))
    if not new then
        return nil, err, detail          -- nothing written; the turn goes on
    end
    local data, version = encode(self, new), self._version
    st.cas_attempts = st.cas_attempts + 1
    local merr, cas_err
    if client:waiter():now() < turn.ends then
        local stat
        stat, merr = send(self, nil, client.set, self.path, data, version)
        if stat then
            self._value, self._version = new, stat.version
            return new
        end
        cas_err = merr
    else
        local res, results
        res, merr, results = send(self, nil, client.multi, {
            { op = "set", path = self.path, data = data, version = version },
            { op = "delete", path = turn.node, version = 1 },
        })
        if res then
            self._turn = nil
            self._value, self._version = new, res[1].stat.version
            self._contended = (res[1].stat.num_children or 0) > 1
            return new
        end
        cas_err = results and results[1] and results[1].err
        local entry_err = results and results[2] and results[2].err
        if entry_err and entry_err ~= "runtimeinconsistency" then
            -- Our entry, not the counter, failed the multi: the next in
            -- line ended our turn (deleted it) and is about to write as the
            -- head. Nothing was written: queue behind it.
            self._turn, self._version = nil, nil
            st.cas_failures = st.cas_failures + 1
            return nil, nil, "line"
        end
    end
    self._turn, self._version = nil, nil
    client:delete_guaranteed(turn.node, 1)    -- if it is still there, in our turn
    if cas_err == "badversion" then
        st.cas_failures = st.cas_failures + 1
    else
        local unknown = lost_reply(self, merr, version, data)
        if unknown then
            return maybe(merr, MAYBE)
        elseif unknown == nil and cas_err ~= "runtimeinconsistency" and cas_err ~= "nonode" then
            return nil, merr
        end
        st.cas_failures = st.cas_failures + 1    -- nothing written
    end
    return nil, nil, "line"
end

return _M
