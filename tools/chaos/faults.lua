-- chaos.faults: the kinds of fault the chaos run injects, one function each
-- (inject[kind](w) returns false when it cannot run now), and the deck they
-- are drawn from: shuffled, so every kind comes up, at most w.cap of each.
--
-- Holder-targeted faults: ask the contender for a long hold of the lock
-- (DIR/c<ID>.hold), wait until it says it holds (at most 10 s), then
-- act(ci, holding token or "none"). The act removes the hold file when its
-- fault ends; the contender lets go 3 s later.
local zkcoord = require "zkcoord"
local proc = require "helpers.proc"
local util = require "chaos.util"
local world = require "chaos.world"

local now = zkcoord.now
local at, spawn, fault_done, hold_file = world.at, world.spawn, world.fault_done, world.hold_file

local _M = {}

_M.KINDS = { "kill_contender", "pause_contender", "kill_follower", "kill_leader",
             "expire_session", "cut", "blackhole", "delay" }

local inject = {}
_M.inject = inject

-- A running contender under no fault (with a published session if asked).
local function free_contender(w, need_session)
    local cands = {}
    for _, ci in ipairs(w.contenders) do
        if ci.status == "running" and not ci.busy then
            if not need_session or proc.file_exists(("%s/c%d.session"):format(w.dir, ci.id)) then
                cands[#cands + 1] = ci
            end
        end
    end
    if #cands == 0 then
        return nil
    end
    return w.rng:pick(cands)
end

local function servers_ok(w)
    if w.server_busy then
        return false
    end
    for _, s in ipairs(w.ens.servers) do
        if not s:running() then
            return false
        end
    end
    return true
end

local function set_proxies(w, ci, how, arg)
    for s, p in ipairs(ci.proxies) do
        local ok, perr
        if how == "delay" then ok, perr = p:delay(arg) else ok, perr = p[how](p) end
        if not ok then
            w.dlog("proxy_error", { target = ci.id, server = s, cmd = how, err = perr })
        end
    end
end

local function request_hold(w, ci, kind, act)
    ci.busy = kind
    proc.write_file(hold_file(w, ci), "hold\n")
    -- Without the lock in the run nobody holds it: act at once.
    local since = w.has.lock and now() or now() - 10
    w.pending_hold = { c = ci, kind = kind, since = since, act = act }
    w.dlog("inject", { kind = kind, target = ci.id, inc = ci.inc, phase = "hold_requested" })
end

--- Called by the loop while a hold is pending: acts once the contender holds.
function _M.watch_hold(w)
    local ph = w.pending_hold
    local ci = ph.c
    local holding = "none"
    local text = proc.read_file(("%s/c%d.holding"):format(w.dir, ci.id))
    local hinc, htok = (text or ""):match("^(%d+) (%-?%d+)")
    if hinc and tonumber(hinc) == ci.inc then
        holding = htok
    end
    if holding == "none" and now() - ph.since < 10 then
        return   -- not yet holding: wait (at most 10 s)
    end
    w.pending_hold = nil
    if ci.status ~= "running" then
        ci.busy = nil
        os.remove(hold_file(w, ci))
        return
    end
    ph.act(ci, holding)
end

function inject.kill_contender(w)
    local ci = free_contender(w)
    if not ci then return false end
    local from = now()
    ci.busy, ci.status = "kill", "dead"
    proc.kill(ci.pid, "KILL")
    proc.wait_exit(ci.pid, 5)
    os.remove(hold_file(w, ci))
    fault_done(w, "kill_contender", ci, from, { pid = ci.pid })
    local pid = ci.pid
    at(w, w.rng:range(0.5, 2), function()
        ci.busy = nil
        if not w.stopping then
            spawn(w, ci)
        else
            w.dlog("not_restarted", { target = ci.id, inc = ci.inc, pid = pid })
        end
    end)
    return true
end

function inject.pause_contender(w)
    if w.pending_hold then return false end
    local ci = free_contender(w)
    if not ci then return false end
    local secs = w.st + w.rng:range(2, 5)
    request_hold(w, ci, "pause_contender", function(_, holding)
        local from = now()
        proc.kill(ci.pid, "STOP")
        ci.status = "paused"
        w.dlog("inject", { kind = "pause_contender", target = ci.id, inc = ci.inc,
                           pid = ci.pid, holding = holding, secs = secs })
        at(w, secs, function()
            proc.kill(ci.pid, "CONT")
            ci.status = "running"
            ci.busy = nil
            os.remove(hold_file(w, ci))
            fault_done(w, "pause_contender", ci, from, { pid = ci.pid, holding = holding })
        end)
    end)
    return true
end

local function kill_server(w, kind, idx, role)
    local s = w.ens.servers[idx]
    local from = now()
    s:kill()
    w.server_busy = { idx = idx, phase = "down", from = from, kind = kind, role = role }
    w.dlog("inject", { kind = kind, server = idx, role = role })
    at(w, w.rng:range(2, 6), function()
        local ok, serr = s:start { wait = false }
        w.dlog("server_start", { server = idx, ok = ok and 1 or 0, err = serr })
        local sb = w.server_busy
        sb.phase, sb.since, sb.next_probe = "starting", now(), 0
    end)
    return true
end

function inject.kill_follower(w)
    if not servers_ok(w) then return false end
    local leader = w.ens:leader()
    if not leader then return false end
    local f = {}
    for i = 1, #w.ens.servers do
        if i ~= leader then f[#f + 1] = i end
    end
    return kill_server(w, "kill_follower", w.rng:pick(f), "follower")
end

function inject.kill_leader(w)
    if not servers_ok(w) then return false end
    local leader = w.ens:leader()
    if not leader then return false end
    return kill_server(w, "kill_leader", leader, "leader")
end

--- Called by the loop: ends a server fault once the restarted server is
--- ready (a restart that takes over 90 s is tried again).
function _M.watch_server(w)
    local sb = w.server_busy
    if not sb or sb.phase ~= "starting" or now() < sb.next_probe then
        return
    end
    sb.next_probe = now() + 0.5
    local s = w.ens.servers[sb.idx]
    if s:ready(0.3) then
        w.server_busy = nil
        w.dlog("fault", { kind = sb.kind, server = sb.idx, role = sb.role, from = sb.from,
                          to = now(), mode = s:mode(0.5) })
    elseif now() - sb.since > 90 then
        w.dlog("server_retry", { server = sb.idx, running = s:running() and 1 or 0 })
        s:kill()
        s:start { wait = false }
        sb.since = now()
    end
end

local function session_of(w, ci)
    local text = proc.read_file(("%s/c%d.session"):format(w.dir, ci.id)) or ""
    local sid, pwhex, sinc = text:match("^(%x+) (%x+) (%d+)")
    if sid and tonumber(sinc) == ci.inc then
        return sid, pwhex
    end
    return nil
end

-- One try at expiring session sid: a second handle with its id and password
-- closes it. Expired when the contender then publishes another session
-- (waited for up to 3 s), or already gone. Returns ok, connect error.
local function expire_once(w, ci, sid, pwhex)
    local ok = false
    local file = ("%s/c%d.session"):format(w.dir, ci.id)
    local other, cerr = zkcoord.connect {
        servers = w.ens.hosts, session_id = sid, session_password = util.unhex(pwhex),
        connect_timeout = 3, session_timeout = w.st, reconnect = false,
        logger = world.quiet_logger }
    if other then
        other:close()
    end
    if cerr == "sessionexpired" then
        ok = true   -- already gone (the contender will see it too)
    end
    local deadline = now() + 3
    while not ok and now() < deadline do
        local cur = (proc.read_file(file) or ""):match("^(%x+)")
        if cur and cur ~= sid then
            ok = true
        else
            proc.sleep(0.05)
        end
    end
    return ok, cerr
end

local function expire(w, ci, holding)
    local sid, pwhex = session_of(w, ci)
    local from = now()
    local ok, attempts, why = false, 0, nil
    while sid and attempts < 3 and not ok do
        attempts = attempts + 1
        local cerr
        ok, cerr = expire_once(w, ci, sid, pwhex)
        why = cerr or why
    end
    ci.busy = nil
    os.remove(hold_file(w, ci))
    fault_done(w, "expire_session", ci, from, { sid = sid, ok = ok and 1 or 0,
                                                attempts = attempts, err = why,
                                                holding = holding })
end

-- Half of the expiries and black holes hit a lock holder.
function inject.expire_session(w)
    local ci = free_contender(w, true)
    if not ci or not session_of(w, ci) then return false end
    if not w.pending_hold and w.rng:float() < 0.5 then
        request_hold(w, ci, "expire_session", function(c, holding) expire(w, c, holding) end)
    else
        ci.busy = "expire"
        expire(w, ci, nil)
    end
    return true
end

function inject.cut(w)
    local ci = free_contender(w)
    if not ci then return false end
    local from = now()
    set_proxies(w, ci, "cut")
    fault_done(w, "cut", ci, from)
    return true
end

local function blackhole(w, ci, holding)
    -- Half shorter than the session timeout (suspended, then back),
    -- half longer (the session is lost).
    local st = w.st
    local secs = w.rng:float() < 0.5 and w.rng:range(1, st * 0.8) or w.rng:range(st + 1, st + 3)
    local from = now()
    set_proxies(w, ci, "blackhole")
    w.dlog("inject", { kind = "blackhole", target = ci.id, inc = ci.inc, secs = secs,
                       holding = holding })
    at(w, secs, function()
        set_proxies(w, ci, "pass")
        ci.busy = nil
        os.remove(hold_file(w, ci))
        fault_done(w, "blackhole", ci, from, { secs = secs, holding = holding })
    end)
end

function inject.blackhole(w)
    local ci = free_contender(w)
    if not ci then return false end
    if not w.pending_hold and w.rng:float() < 0.5 then
        request_hold(w, ci, "blackhole", function(c, holding) blackhole(w, c, holding) end)
    else
        ci.busy = "blackhole"
        blackhole(w, ci, nil)
    end
    return true
end

function inject.delay(w)
    local ci = free_contender(w)
    if not ci then return false end
    ci.busy = "delay"
    local ms = w.rng:range(0.1, 1.5)
    local secs = w.rng:range(2, 6)
    local from = now()
    set_proxies(w, ci, "delay", ms)
    w.dlog("inject", { kind = "delay", target = ci.id, inc = ci.inc, delay = ms, secs = secs })
    at(w, secs, function()
        set_proxies(w, ci, "pass")
        ci.busy = nil
        fault_done(w, "delay", ci, from, { delay = ms, secs = secs })
    end)
    return true
end

--- Injects the first feasible kind of the deck (the others stay in it);
--- returns its name, or nil when none could run now.
function _M.draw(w)
    local deck = w.deck
    if #deck == 0 then
        for _, k in ipairs(_M.KINDS) do deck[#deck + 1] = k end
        w.rng:shuffle(deck)
    end
    for i, kind in ipairs(deck) do
        if (w.counts[kind] or 0) < w.cap and inject[kind](w) then
            table.remove(deck, i)
            w.counts[kind] = (w.counts[kind] or 0) + 1
            return kind
        end
    end
    return nil
end

--- At the end: a hold requested but not acted on is cancelled (not counted).
function _M.cancel_pending(w)
    local ph = w.pending_hold
    if not ph then
        return
    end
    local ci = ph.c
    ci.busy = nil
    os.remove(hold_file(w, ci))
    w.dlog("inject", { kind = ph.kind, target = ci.id, phase = "cancelled" })
    w.counts[ph.kind] = w.counts[ph.kind] - 1
    w.pending_hold = nil
end

return _M
