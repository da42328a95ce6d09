-- zkcoord inside nginx workers (the ngx waiter, zkcoord.ngx), against the
-- shared test ZooKeeper: private nginx instances with 2 workers each
-- (helpers.nginx), requests from this process over plain sockets.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local nginx = require "helpers.nginx"

local pct = nginx.percentile

-- The handlers, as a Lua module in each nginx prefix (@ROOT@ and @LOGDIR@
-- are filled in by helpers.nginx).
local APP = [==[
local zn = require "zkcoord.ngx"
local zkcoord = require "zkcoord"
local semaphore = require "ngx.semaphore"

local now = zkcoord.now
local ROOT, LOGDIR = "@ROOT@", "@LOGDIR@"
local _M = {}

local value            -- this worker's copy of ROOT/config, kept by a watch
local value_at = 0     -- when it arrived (monotonic seconds)
local watch_err


function _M.init_worker()
    zn.init_worker { servers = os.getenv("ZK_HOSTS"), session_timeout = @SESSION_TIMEOUT@,
                     request_timeout = tonumber(os.getenv("ZK_REQUEST_TIMEOUT") or ""),
                     sock_dir = "@SOCKDIR@" }
    -- A watch cannot be set up in init_worker itself (no waiting there).
    ngx.timer.at(0, function(premature)
        if premature then return end
        local c, err = zn.client()
        if not c then
            watch_err = "no client: " .. tostring(err)
            return
        end
        local w, werr = c:watch(ROOT .. "/config", function(data)
            value, value_at = data, now()
        end)
        if not w then
            watch_err = "watch: " .. tostring(werr)
        end
    end)
end


function _M.value()
    ngx.say(ngx.worker.pid(), " ", tostring(value), " ", ("%.6f"):format(value_at), " ",
            tostring(watch_err))
end


local function append(file, line)
    local f = assert(io.open(file, "a"))
    f:write(line, "\n")
    f:close()
end


-- /lock?name=l&hold=0.005&timeout=30&log=file
function _M.lock()
    local args = ngx.req.get_uri_args()
    local c = assert(zn.client())
    local lock = c:lock(ROOT .. "/" .. (args.name or "l"))
    local ok, err = lock:acquire(tonumber(args.timeout) or 30)
    if not ok then
        ngx.status = 500
        ngx.say("acquire: ", err)
        return
    end
    local log = args.log and LOGDIR .. "/" .. args.log
    local id = ngx.var.request_id
    if log then append(log, ("enter %.6f %s %d"):format(now(), id, ngx.worker.pid())) end
    local hold = tonumber(args.hold) or 0.005
    if hold > 0 then ngx.sleep(hold) end
    if log then append(log, ("leave %.6f %s %d"):format(now(), id, ngx.worker.pid())) end
    lock:release()
    -- replies still in flight when the request (and maybe the worker) ends
    for _ = 1, tonumber(args.spray) or 0 do c:send("get", ROOT) end
    ngx.say("ok")
end


-- Two of these at once pass a lock back and forth; every grant that
-- follows the other request's release records release -> acquire.
function _M.pingpong()
    local rounds = tonumber(ngx.var.arg_rounds) or 50
    local me = ngx.var.request_id
    local c = assert(zn.client())
    local lock = c:lock(ROOT .. "/pp")
    local d = ngx.shared.hand
    for _ = 1, rounds do
        local ok, err = lock:acquire(10)
        if not ok then
            ngx.say("acquire: ", err)
            return
        end
        local t = now()
        local rel = d:get("rel")
        if rel and d:get("relby") ~= me then
            d:rpush("samples", t - rel)
        end
        ngx.sleep(0.001)
        d:set("relby", me)
        d:set("rel", now())
        lock:release()
    end
    ngx.say("ok")
end


function _M.samples()
    local d = ngx.shared.hand
    local out = {}
    while true do
        local v = d:lpop("samples")
        if not v then break end
        out[#out + 1] = ("%.6f"):format(v)
    end
    d:delete("rel")
    ngx.say(table.concat(out, " "))
end


-- Round trips of get() in this worker, in seconds.
function _M.rtt()
    local c = assert(zn.client())
    local out = {}
    for i = 1, tonumber(ngx.var.arg_n) or 50 do
        local t = now()
        assert(c:get(ROOT))
        out[i] = ("%.6f"):format(now() - t)
    end
    ngx.say(table.concat(out, " "))
end


local seq = 0

-- Every client method once; returns "ok" or what failed.
local function exercise(where)
    local c, cerr = zn.client()
    if not c then return "client: " .. tostring(cerr) end
    seq = seq + 1
    local p = ("%s/m-%s-%d-%d"):format(ROOT, where, ngx.worker.pid(), seq)
    local function check(cond, what, ...)
        if not cond then
            local a, b = ...
            error(what .. ": " .. tostring(a) .. " " .. tostring(b), 0)
        end
        return cond
    end
    local ok, err = pcall(function()
        check(c:create(p, "a") == p, "create")
        local data, stat = c:get(p)
        check(data == "a", "get", data, stat)
        check(c:set(p, "b", stat.version), "set")
        local st = c:exists(p)
        check(st and st.version == 1, "exists", st)
        check(c:create(p .. "/k", "x"), "create child")
        local kids = c:children(p)
        check(kids and #kids == 1 and kids[1] == "k", "children", kids)
        local res, merr = c:multi {
            { op = "check", path = p, version = 1 },
            { op = "set", path = p .. "/k", data = "y" },
            { op = "create", path = p .. "/j", data = "z" },
        }
        check(res and #res == 3, "multi", merr)
        check(c:get(p .. "/k") == "y", "multi result")
        check(c:sync(p), "sync")
        local acl = c:get_acl(p)
        check(acl and acl[1] and acl[1].perms == "rwcda", "get_acl", acl and acl[1] and acl[1].perms)
        check(c:delete(p .. "/k"), "delete child")
        check(c:delete(p .. "/j"), "delete child")
        check(c:delete(p, 1), "delete")
        check(c:exists(p) == false, "exists after delete")
    end)
    return ok and "ok" or tostring(err)
end


function _M.methods_content()
    ngx.say(exercise("content"))
end


function _M.methods_access()
    ngx.ctx.result = exercise("access")
end


function _M.methods_timer()
    local sema = semaphore.new(0)
    local result = "timer did not run"
    local ok, err = ngx.timer.at(0, function(premature)
        result = premature and "premature" or exercise("timer")
        sema:post(1)
    end)
    if not ok then
        ngx.say("timer: ", err)
        return
    end
    sema:wait(10)
    ngx.say(result)
end


-- log_by_lua: a wait there must fail with the error naming ngx.timer.at.
function _M.log_phase_get()
    local c = zn.client()
    c:get(ROOT)
end


-- log_by_lua: a lock acquire there raises too, after its create was sent;
-- the create's late reply must delete the node.
function _M.log_phase_lock()
    local c = zn.client()
    c:lock(ROOT .. "/logphase"):acquire(1)
end


-- /forever?recipe=lock&name=f: waits with no timeout, then lets go.
function _M.forever()
    local args = ngx.req.get_uri_args()
    local c = assert(zn.client())
    local p = ROOT .. "/" .. args.name
    local recipe = args.recipe
    local t0 = now()
    local ok, err
    if recipe == "lock" or recipe == "rwlock" then
        local l = recipe == "lock" and c:lock(p) or c:rwlock(p):read_lock()
        ok, err = l:acquire()
        if ok then l:release() end
    elseif recipe == "semaphore" then
        ok, err = c:semaphore(p, 1):acquire()
        if ok then ok:release() end
    elseif recipe == "barrier" then
        ok, err = c:barrier(p):wait()
    elseif recipe == "election" then
        local e = c:election(p)
        ok, err = e:campaign()
        if ok then e:resign() end
    elseif recipe == "double_barrier" then
        local b = c:double_barrier(p, 2)
        ok, err = b:enter()
        if ok then ok, err = b:leave() end
    end
    ngx.say(ok and "ok" or ("failed: " .. tostring(err)), (" %.3f"):format(now() - t0))
end


-- Ways a request ends while it holds or waits for a lock.
function _M.lock_then(how)
    local c = assert(zn.client())
    local lock = c:lock(ROOT .. "/" .. ngx.var.arg_name)
    local ok, err = lock:acquire(10)
    if not ok then
        ngx.say("acquire: ", err)
        return
    end
    if how == "exit" then
        ngx.exit(200)
    elseif how == "error" then
        error("handler failed while holding the lock")
    end
    ngx.say("held")
end


-- A light thread waits for a held lock and is killed; the request goes on.
function _M.kill_waiter()
    local c = assert(zn.client())
    local lock = c:lock(ROOT .. "/" .. ngx.var.arg_name)
    local t = ngx.thread.spawn(function() return lock:acquire(30) end)
    ngx.sleep(0.3)
    ngx.thread.kill(t)
    ngx.sleep(tonumber(ngx.var.arg_stay) or 1)
    ngx.say("done")
end


-- Acquired in access_by_lua, released in log_by_lua, on the worker's one
-- lock object for that name (&cohort=1: with `cohort = true`).
local phase_locks = {}

function _M.phase_acquire()
    local c = assert(zn.client())
    local name = ngx.var.arg_name
    phase_locks[name] = phase_locks[name] or c:lock(ROOT .. "/" .. name,
                                                    { cohort = ngx.var.arg_cohort == "1" })
    local ok, err = phase_locks[name]:acquire(10)
    ngx.ctx.acquired = ok and "true" or tostring(err)
end


function _M.phase_release()
    local ok, err = phase_locks[ngx.var.arg_name]:release()
    ngx.log(ngx.NOTICE, ngx.var.arg_cohort == "1" and "phase release (cohort): " or "phase release: ",
            tostring(ok), " ", tostring(err))
end


-- A single request: get() and set() timed, with their errors.
function _M.timed()
    local c = assert(zn.client())
    local t0 = now()
    local v, err = c:get(ROOT)
    local t1 = now()
    local ok, serr = c:set(ROOT .. "/config", "x")
    local t2 = now()
    ngx.say(("get %s %s %.3f set %s %s %.3f"):format(tostring(v ~= nil), tostring(err), t1 - t0,
                                                   tostring(ok ~= nil), tostring(serr), t2 - t1))
end


-- The ngx waiter's sleep and event:wait with bad timeouts (each raises, in
-- the library's one wording), then an event:wait(math.huge) that a timer
-- ends 0.1 s later (issue 21.5).
function _M.wait_args()
    local w = assert(zn.client()):waiter()
    local out = {}
    for _, v in ipairs({ -1, "1", -math.huge, 0 / 0 }) do
        local ok, err = pcall(w.sleep, w, v)
        out[#out + 1] = tostring(ok) .. " " .. tostring(err):gsub("^.-:%d+: ", "")
        ok, err = pcall(function() return w:event():wait(v) end)
        out[#out + 1] = tostring(ok) .. " " .. tostring(err):gsub("^.-:%d+: ", "")
    end
    local ev = w:event()
    -- the timer counts from nginx's cached time: refreshed after t0, so
    -- that it cannot fire before 0.1 s from t0 (less a millisecond, its unit)
    local t0 = now()
    ngx.update_time()
    ngx.timer.at(0.1, function() ev:set() end)
    local set = ev:wait(math.huge)
    -- not before the timer; how late the timer fires is the load's business
    local took = now() - t0
    out[#out + 1] = ("huge %s %s"):format(tostring(set),
                                          took >= 0.099 and "after the timer" or ("early %.3f"):format(took))
    ngx.say(table.concat(out, "\n"))
end


-- connect from a request to a port nobody listens on: refused, said by a
-- cosocket probe in about half a second, not the connect timeout.
function _M.connect_refused()
    local t0 = now()
    local c, err, detail = zkcoord.connect { servers = "127.0.0.1:" .. ngx.var.arg_port,
                                             connect_timeout = 1, wait = "ngx" }
    ngx.say(("%s %s %s %.1f"):format(tostring(c), tostring(err), tostring(detail), now() - t0))
end


-- A timer takes a lock and keeps requests in flight until the worker exits.
function _M.busy_holder()
    local c = assert(zn.client())
    local path = ROOT .. "/" .. ngx.var.arg_name
    local sema = semaphore.new(0)
    local result = "timer did not run"
    ngx.timer.at(0, function(premature)
        if premature then return end
        local ok, err = c:lock(path):acquire(5)
        result = ok and "held" or tostring(err)
        sema:post(1)
        while ok and not ngx.worker.exiting() do
            for _ = 1, 50 do c:send("get", ROOT) end
            ngx.sleep(0.001)
        end
    end)
    sema:wait(10)
    ngx.say(result)
end


-- A holder of cohort lock `lock` enters the store: counts an overlap when
-- someone is inside already, a stale grant when its token is not above
-- the last one seen, a local handoff when n > 0.
local function fenced_enter(d, name, lock)
    if d:incr(name .. ":inside", 1, 0) ~= 1 then d:incr(name .. ":overlaps", 1, 0) end
    local z, n = lock:token()
    local token = require("zkcoord.cohort").number(z, n)
    local last = d:get(name .. ":token")
    if last and token <= last then d:incr(name .. ":stale", 1, 0) end
    d:set(name .. ":token", token)
    d:incr(name .. ":grants", 1, 0)
    if n > 0 then d:incr(name .. ":local", 1, 0) end
end


-- /clock?name=c&hold=0.002&timeout=30: a cohort lock (one object per
-- request). The critical section checks a store both workers share (the
-- shared dict "fence"): nobody else inside, and the grant's token (czxid,
-- n) above every earlier grant's, as a fenced resource would.
function _M.clock()
    local args = ngx.req.get_uri_args()
    local name = args.name or "c"
    local d = ngx.shared.fence
    if args.abortable then
        ngx.on_abort(function()
            d:incr(name .. ":aborted", 1, 0)
            ngx.exit(499)
        end)
    end
    if args.block then
        -- After `block` s, this worker runs a timer that keeps it busy 1 s
        -- (a worker the machine's load held back): the clock moves on, the
        -- ticker's timer runs right after it, before nginx looks at its
        -- connections again.
        ngx.timer.at(tonumber(args.block), function()
            local t = ngx.now() + 1
            repeat ngx.update_time() until ngx.now() >= t
        end)
    end
    local c = assert(zn.client())
    local lock = c:lock(ROOT .. "/" .. name, { cohort = true })
    d:incr(name .. ":queued", 1, 0)
    local ok, err = lock:acquire(tonumber(args.timeout) or 30)
    if not ok then
        ngx.status = 500
        ngx.say("acquire: ", err)
        return
    end
    fenced_enter(d, name, lock)
    local hold = tonumber(args.hold) or 0.002
    if hold > 0 then ngx.sleep(hold) end
    d:incr(name .. ":inside", -1)
    lock:release()
    ngx.say("ok ", ngx.worker.pid())
end


-- /clock_exit?name=c: holds a cohort lock and ends by ngx.exit, without
-- releasing (counted as a grant, inside for no time).
function _M.clock_exit()
    local name = ngx.var.arg_name
    local d = ngx.shared.fence
    local lock = assert(zn.client()):lock(ROOT .. "/" .. name, { cohort = true })
    d:incr(name .. ":queued", 1, 0)
    local ok, err = lock:acquire(30)
    if not ok then
        ngx.status = 500
        ngx.say("acquire: ", err)
        ngx.exit(500)
    end
    fenced_enter(d, name, lock)
    d:incr(name .. ":inside", -1)
    ngx.say("ok")
    ngx.exit(200)
end


-- Counts the request queued for `name`, acquires `lock` (30 s unless
-- `timeout`), counts the grant; answers 500 and returns false on failure.
local function counted_acquire(d, name, lock, timeout)
    d:incr(name .. ":queued", 1, 0)
    local ok, err = lock:acquire(timeout or 30)
    if not ok then
        ngx.status = 500
        ngx.say("acquire: ", err)
        return false
    end
    d:incr(name .. ":grants", 1, 0)
    return true
end


-- /clost?name=c&hold=0.5: a cohort lock with on_lost, held `hold` s;
-- says what release() answered.
function _M.clost()
    local name = ngx.var.arg_name
    local d = ngx.shared.fence
    local lock = assert(zn.client()):lock(ROOT .. "/" .. name, { cohort = true })
    lock:on_lost(function(reason)
        d:incr(name .. ":lost", 1, 0)
        d:set(name .. ":reason", reason)
    end)
    if not counted_acquire(d, name, lock) then
        return
    end
    ngx.sleep(tonumber(ngx.var.arg_hold) or 0.5)
    local rok, rerr = lock:release()
    ngx.say(tostring(rok), " ", tostring(rerr))
end


-- /crevoke?name=c&i=1: a cohort lock (local handoffs unbounded) whose
-- holder gives it up when asked to (on_revoke) or told to (/cgo); says
-- i, its node, its token (z n) and whether it was asked.
function _M.crevoke()
    local name, i = ngx.var.arg_name, ngx.var.arg_i
    local d = ngx.shared.fence
    local lock = assert(zn.client()):lock(ROOT .. "/" .. name, { cohort = true,
                                          cohort_handoffs = 100, cohort_time = 60 })
    local asked, me = "-", ngx.ctx       -- the owner: this request
    lock:on_revoke(function(owner, node)
        asked = (owner == me and "asked" or "asked-wrong-owner") .. ":" .. node
    end)
    if not counted_acquire(d, name, lock) then
        return
    end
    local node, z, n = lock:node(), lock:token()
    local deadline = ngx.now() + 20
    while asked == "-" and not d:get(name .. ":go:" .. i) and ngx.now() < deadline do
        ngx.sleep(0.01)
    end
    assert(lock:release())
    ngx.say(i, " ", node, " ", z, " ", n, " ", asked)
end


-- /cgo?name=c&i=1: tells /crevoke's request i to release.
function _M.cgo()
    ngx.shared.fence:set(ngx.var.arg_name .. ":go:" .. ngx.var.arg_i, true)
    ngx.say("ok")
end


-- /crlock?name=r&hold=0.002: a read lock of an rwlock with cohort = true;
-- counts readers queued, granted and inside at once (the peak).
function _M.crlock()
    local name = ngx.var.arg_name
    local d = ngx.shared.fence
    if ngx.var.arg_abortable then
        ngx.on_abort(function()
            d:incr(name .. ":aborted", 1, 0)
            ngx.exit(499)
        end)
    end
    local r = assert(zn.client()):rwlock(ROOT .. "/" .. name, { cohort = true }):read_lock()
    if not counted_acquire(d, name, r, tonumber(ngx.var.arg_timeout)) then
        return
    end
    ngx.sleep(tonumber(ngx.var.arg_hold) or 0.002)
    r:release()
    ngx.say("ok ", ngx.worker.pid())
end


-- /fence?name=c: the counters of /clock for that name.
function _M.fence()
    local d, name = ngx.shared.fence, ngx.var.arg_name
    local out = {}
    for _, k in ipairs({ "queued", "grants", "local", "inside", "overlaps", "stale", "aborted",
                         "lost" }) do
        out[#out + 1] = k .. "=" .. (d:get(name .. ":" .. k) or 0)
    end
    ngx.say(table.concat(out, " "))
end


function _M.say_log()
    local c = assert(zn.client())
    c:log("warn", "a line from the spec " .. ngx.var.arg_tag)
    ngx.say("ok")
end


-- /item_end: takes an item of ROOT/iq, listens for its loss, and ends
-- holding it (the client gives it back); says the claim's path.
function _M.item_end()
    local d = ngx.shared.fence
    local item, err = assert(zn.client()):work_queue(ROOT .. "/iq"):take(5)
    if not item then
        ngx.say("nil ", tostring(err))
        return
    end
    item:on_lost(function(reason)
        d:incr("iq:lost", 1, 0)
        d:set("iq:reason", reason)
    end)
    ngx.say(item.claim)
end


-- /item_lost: how many times an /item_end item was told lost, and why.
function _M.item_lost()
    local d = ngx.shared.fence
    ngx.say(tostring(d:get("iq:lost") or 0), " ", tostring(d:get("iq:reason")))
end

return _M
]==]

local HTTP = [[
    lua_shared_dict hand 1m;
    lua_shared_dict fence 1m;
    init_worker_by_lua_block { require("app").init_worker() }
    exit_worker_by_lua_block { require("zkcoord.ngx").exit_worker() }
    server {
        listen 127.0.0.1:@PORT@ reuseport;
        location = /ping { content_by_lua_block { ngx.say("pong") } }
        location = /value { content_by_lua_block { require("app").value() } }
        location = /lock { content_by_lua_block { require("app").lock() } }
        location = /pingpong { content_by_lua_block { require("app").pingpong() } }
        location = /samples { content_by_lua_block { require("app").samples() } }
        location = /rtt { content_by_lua_block { require("app").rtt() } }
        location = /methods/content { content_by_lua_block { require("app").methods_content() } }
        location = /methods/access {
            access_by_lua_block { require("app").methods_access() }
            content_by_lua_block { ngx.say(ngx.ctx.result) }
        }
        location = /methods/timer { content_by_lua_block { require("app").methods_timer() } }
        location = /logphase {
            content_by_lua_block { ngx.say("ok") }
            log_by_lua_block { require("app").log_phase_get() }
        }
        location = /logphase_lock {
            content_by_lua_block { ngx.say("ok") }
            log_by_lua_block { require("app").log_phase_lock() }
        }
        location = /lock_abortable {
            lua_check_client_abort on;
            content_by_lua_block { require("app").lock() }
        }
        location = /forever { content_by_lua_block { require("app").forever() } }
        location = /lock_exit { content_by_lua_block { require("app").lock_then("exit") } }
        location = /lock_error { content_by_lua_block { require("app").lock_then("error") } }
        location = /kill_waiter { content_by_lua_block { require("app").kill_waiter() } }
        location = /phases {
            access_by_lua_block { require("app").phase_acquire() }
            content_by_lua_block { ngx.say(ngx.ctx.acquired) }
            log_by_lua_block { require("app").phase_release() }
        }
        location = /timed { content_by_lua_block { require("app").timed() } }
        location = /say_log { content_by_lua_block { require("app").say_log() } }
        location = /busy_holder { content_by_lua_block { require("app").busy_holder() } }
        location = /clock { content_by_lua_block { require("app").clock() } }
        location = /clock_abortable {
            lua_check_client_abort on;
            content_by_lua_block { require("app").clock() }
        }
        location = /clock_exit { content_by_lua_block { require("app").clock_exit() } }
        location = /clost { content_by_lua_block { require("app").clost() } }
        location = /crlock { content_by_lua_block { require("app").crlock() } }
        location = /crlock_abortable {
            lua_check_client_abort on;
            content_by_lua_block { require("app").crlock() }
        }
        location = /fence { content_by_lua_block { require("app").fence() } }
        location = /crevoke { content_by_lua_block { require("app").crevoke() } }
        location = /cgo { content_by_lua_block { require("app").cgo() } }
        location = /wait_args { content_by_lua_block { require("app").wait_args() } }
        location = /connect_refused { content_by_lua_block { require("app").connect_refused() } }
        location = /item_end { content_by_lua_block { require("app").item_end() } }
        location = /item_lost { content_by_lua_block { require("app").item_lost() } }
    }
]]

local CRASH = { "signal 11", "core dumped", "exited on signal", "SIGSEGV", "SIGABRT" }


local function lines(path)
    local out = {}
    for l in (proc.read_file(path) or ""):gmatch("[^\n]+") do
        out[#out + 1] = l
    end
    return out
end


local function ms(x)
    return x and ("%.2f"):format(x * 1000) or "-"
end


local function count_status(results)
    local c = {}
    for _, r in ipairs(results) do
        local k = r.status and tostring(r.status) or ("error " .. tostring(r.err))
        if r.status and r.status ~= 200 and r.body then
            k = k .. " (" .. (r.body:match("^[^\n]*") or "") .. ")"   -- the error, for the report
        end
        c[k] = (c[k] or 0) + 1
    end
    return c
end


local function summary(counts)
    local parts = {}
    for k, v in pairs(counts) do parts[#parts + 1] = k .. "=" .. v end
    table.sort(parts)
    return table.concat(parts, " ")
end


-- Checks an enter/leave log: no two holders ever overlap. Returns the
-- number of grants.
local function assert_no_overlap(path, expected)
    local events = {}
    for _, l in ipairs(lines(path)) do
        local what, t, id = l:match("^(%a+) (%S+) (%S+)")
        assert.truthy(what, "bad log line: " .. l)
        events[#events + 1] = { what = what, t = tonumber(t), id = id }
    end
    table.sort(events, function(a, b)
        if a.t ~= b.t then return a.t < b.t end
        return a.what == "leave" and b.what == "enter"   -- a leave and an enter at the same instant
    end)
    local holder, grants = nil, 0
    for _, e in ipairs(events) do
        if e.what == "enter" then
            assert.is_nil(holder, ("%s entered at %.6f while %s held the lock")
                                  :format(e.id, e.t, tostring(holder)))
            holder = e.id
            grants = grants + 1
        else
            assert.are.equal(holder, e.id, "leave by a request that did not hold the lock")
            holder = nil
        end
    end
    assert.is_nil(holder, "a holder never left")
    assert.are.equal(expected, grants)
    return grants
end


local function lock_children(client, path)
    return #(client:children(path) or {})
end


local function ping_latencies(n, count)
    local out = {}
    for i = 1, count do
        local t0 = proc.now()
        local status = n:get("/ping", 5)
        out[i] = proc.now() - t0
        assert.are.equal(200, status)
        proc.sleep(0.002)
    end
    return out
end


local function no_crash(n)
    local log = n:error_log()
    for _, pat in ipairs(CRASH) do
        assert.is_falsy(log:find(pat, 1, true), "error.log has '" .. pat .. "':\n" .. log)
    end
    -- Sanitizer builds (scripts/test.sh) report on nginx's stderr.
    local stderr = n:stderr()
    for _, pat in ipairs({ "AddressSanitizer", "runtime error:" }) do
        assert.is_falsy(stderr:find(pat, 1, true), "nginx stderr has '" .. pat .. "':\n" .. stderr)
    end
end


local function alive_count(pids)
    local a = 0
    for _, p in ipairs(pids) do
        if proc.alive(p) then a = a + 1 end
    end
    return a
end


describe("ngx #zk #ngx", function()
    local root, admin, logdir, A
    local instances = {}

    local function start(extra)
        local opts = {
            workers = 2,
            env = { ZK_HOSTS = zk.hosts() },
            vars = { ROOT = root, LOGDIR = logdir, SOCKDIR = "/tmp", SESSION_TIMEOUT = 4 },
            lua_modules = { app = APP },
            http = HTTP,
        }
        for k, v in pairs(extra or {}) do
            if k == "vars" then
                for vk, vv in pairs(v) do opts.vars[vk] = vv end
            else
                opts[k] = v
            end
        end
        local n, err = nginx.start(opts)
        assert(n, err)
        instances[#instances + 1] = n
        return n
    end

    -- Polls /value until every current worker of `n` reports `want`.
    local function all_workers_see(n, want, timeout)
        local deadline = proc.now() + (timeout or 10)
        local seen, polls = {}, 0
        while proc.now() < deadline do
            local status, body = n:get("/value", 2)
            polls = polls + 1
            if status == 200 then
                local pid, v, at = body:match("^(%d+) (%S+) (%S+)")
                if v == want then seen[tonumber(pid)] = tonumber(at) end
            end
            local all = true
            for _, pid in ipairs(n:worker_pids()) do
                if not seen[pid] then all = false end
            end
            if all then return true, seen, polls end
            proc.sleep(0.01)
        end
        return false, seen, polls
    end

    lazy_setup(function()
        root = zk.new_root("ngx")
        admin = zk.admin()
        assert(admin:create(root .. "/config", "v1"))
        for _, name in ipairs({ "l", "held", "rq", "pp" }) do
            assert(admin:create(root .. "/" .. name))
        end
        logdir = assert(proc.mktemp_dir("zkcoord-ngxlog-"))
        os.execute("chmod 1777 " .. proc.shquote(logdir))
        A = start()
        assert(all_workers_see(A, "v1", 15), "workers did not connect and watch:\n" .. A:log_tail())
    end)

    lazy_teardown(function()
        for _, n in ipairs(instances) do
            n:destroy()
        end
        if logdir then proc.rm_rf(logdir) end
        if root then zk.delete_tree(zk.admin(), root) end
    end)

    it("200 concurrent requests contending for one lock never overlap", function()
        local paths = {}
        for i = 1, 200 do paths[i] = "/lock?name=l&hold=0.005&log=l200.log&i=" .. i end
        local t0 = proc.now()
        local results = A:fire(paths):collect(60)
        local took = proc.now() - t0
        local counts = count_status(results)
        assert.are.equal(200, counts["200"], summary(counts))
        assert_no_overlap(logdir .. "/l200.log", 200)
        local per_worker = {}
        for _, l in ipairs(lines(logdir .. "/l200.log")) do
            local pid = l:match("^enter %S+ %S+ (%d+)")
            if pid then per_worker[pid] = (per_worker[pid] or 0) + 1 end
        end
        print(("\n[ngx] 200 lock requests (5 ms hold) across 2 workers: %.2f s, grants per worker: %s")
              :format(took, summary(per_worker)))
        -- release() does not wait for its delete: the last request's node
        -- may still be on its way (CI, ASan at load 9: 1 left at once); a
        -- node left for good still fails
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/l") == 0
        end, 10), "lock nodes left: " .. lock_children(admin, root .. "/l"))
        no_crash(A)
    end)

    it("/ping latency stays at its idle level while 200 requests wait on a held lock", function()
        local holder_client = zk.client()
        local holder = holder_client:lock(root .. "/held")
        assert(holder:acquire(5))
        local idle = ping_latencies(A, 200)
        local paths = {}
        for i = 1, 200 do paths[i] = "/lock?name=held&hold=0&timeout=30&i=" .. i end
        local batch = A:fire(paths)
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/held") == 201
        end, 20), "the 200 waiters did not queue")
        local cpu0 = {}
        for _, pid in ipairs(A:worker_pids()) do cpu0[pid] = nginx.cpu_ticks(pid) end
        local loaded = ping_latencies(A, 200)
        local ticks = 0
        for pid, t in pairs(cpu0) do ticks = ticks + (nginx.cpu_ticks(pid) - t) end
        assert.are.equal(200, batch:poll(0), "waiters returned while the lock was held")
        local t_rel = proc.now()
        assert(holder:release())
        local results = batch:collect(60)
        local drained = proc.now() - t_rel
        local counts = count_status(results)
        assert.are.equal(200, counts["200"], summary(counts))
        print(("\n[ngx] /ping idle p50 %s ms p99 %s ms | with 200 waiters p50 %s ms p99 %s ms"
               .. " (workers used %d CPU ticks meanwhile) | 200 waiters drained in %.2f s")
              :format(ms(pct(idle, 50)), ms(pct(idle, 99)), ms(pct(loaded, 50)), ms(pct(loaded, 99)),
                      ticks, drained))
        -- measured at load 2: p50 0.08 ms, p99 4.7 ms
        assert.is_true(pct(loaded, 50) < 0.020, "p50 under load " .. ms(pct(loaded, 50)) .. " ms")
        assert.is_true(pct(loaded, 99) < 0.250, "p99 under load " .. ms(pct(loaded, 99)) .. " ms")
        holder_client:close()
        no_crash(A)
    end)

    it("a release wakes the next waiter within a few ms", function()
        A:get("/samples")
        local results = A:fire({ "/pingpong?rounds=60", "/pingpong?rounds=60" }):collect(60)
        for _, r in ipairs(results) do
            assert.are.equal(200, r.status, tostring(r.err))
            assert.are.equal("ok\n", r.body)
        end
        local _, body = A:get("/samples")
        local samples = {}
        for v in body:gmatch("%S+") do samples[#samples + 1] = tonumber(v) end
        assert.is_true(#samples >= 60, "only " .. #samples .. " handoffs")
        local _, rbody = A:get("/rtt?n=100")
        local rtt = {}
        for v in rbody:gmatch("%S+") do rtt[#rtt + 1] = tonumber(v) end
        print(("\n[ngx] lock handoff release->acquire (%d): p50 %s ms p99 %s ms | get() round trip"
               .. " in a worker: p50 %s ms p99 %s ms")
              :format(#samples, ms(pct(samples, 50)), ms(pct(samples, 99)),
                      ms(pct(rtt, 50)), ms(pct(rtt, 99))))
        -- measured at load 2: p50 2.4 ms, p99 80 ms
        assert.is_true(pct(samples, 50) < 0.050, "handoff p50 " .. ms(pct(samples, 50)) .. " ms")
        assert.is_true(pct(samples, 99) < 0.500, "handoff p99 " .. ms(pct(samples, 99)) .. " ms")
    end)

    it("a watch pushes a new value to every worker", function()
        local t0 = proc.now()
        assert(admin:set(root .. "/config", "v2"))
        local t1 = proc.now()
        local ok, seen, polls = all_workers_see(A, "v2", 10)
        assert.is_true(ok, "not every worker saw v2: " .. summary(seen or {}))
        local delays = {}
        for pid, at in pairs(seen) do
            delays[#delays + 1] = ("%d: %.1f ms"):format(pid, (at - t1) * 1000)
        end
        table.sort(delays)
        print(("\n[ngx] watch: set took %.1f ms; new value in each worker after the set returned: %s"
               .. " (%d polls)"):format((t1 - t0) * 1000, table.concat(delays, ", "), polls))
    end)

    it("every client method works from content, access and timer contexts", function()
        for _, ctx in ipairs({ "content", "access", "timer" }) do
            for _ = 1, 4 do   -- a few times: both workers
                local status, body = A:get("/methods/" .. ctx, 15)
                assert.are.equal(200, status, ctx)
                assert.are.equal("ok\n", body, ctx)
            end
        end
    end)

    it("a wait in log_by_lua logs the error naming ngx.timer.at", function()
        local status = A:get("/logphase")
        assert.are.equal(200, status)
        local line
        assert.truthy(zk.wait_until(function()
            line = A:error_log():match("[^\n]*cannot wait for ZooKeeper in log_by_lua[^\n]*")
            return line
        end, 5), "no error logged:\n" .. A:log_tail())
        assert.truthy(line:find("ngx.timer.at", 1, true), line)
    end)

    it("init_by_lua use fails nginx startup with the error naming init_worker", function()
        for _, code in ipairs({
            'require("zkcoord").connect { servers = os.getenv("ZK_HOSTS") }',
            'require("zkcoord.ngx").client { servers = os.getenv("ZK_HOSTS") }',
        }) do
            local n, err = nginx.start {
                workers = 1, env = { ZK_HOSTS = zk.hosts() },
                http = "init_by_lua_block { " .. code .. " }\n"
                       .. "server { listen 127.0.0.1:@PORT@; location / { return 200; } }",
            }
            if n then n:destroy() end
            assert.is_nil(n, "nginx started with " .. code)
            assert.truthy(err:find("init_by_lua", 1, true), err)
            assert.truthy(err:find("no ZooKeeper session in init_by_lua", 1, true), err)
            assert.truthy(err:find("init_worker_by_lua", 1, true), err)
        end
    end)

    it("reload and quit with waiters in flight: no hang, no crash, no leaked node", function()
        local R = start()
        local holder_client = zk.client()
        local holder = holder_client:lock(root .. "/rq")
        local rq = root .. "/rq"
        local function queue_waiters(count)
            assert(holder:acquire(5))
            local paths = {}
            for i = 1, count do paths[i] = "/lock?name=rq&hold=0.002&timeout=20&i=" .. i end
            local batch = R:fire(paths)
            assert.truthy(zk.wait_until(function()
                return lock_children(admin, rq) == count + 1
            end, 20), "waiters did not queue")
            return batch
        end

        -- Reload, idle: the sentinel gets old workers out at once.
        local old = R:worker_pids()
        local t0 = proc.now()
        assert(R:reload())
        assert.truthy(zk.wait_until(function() return alive_count(old) == 0 end, 3),
                      "idle old workers still alive after 3 s")
        local idle_exit = proc.now() - t0

        -- Reload with 50 waiters: old workers keep serving them, exit once done.
        local batch = queue_waiters(50)
        old = R:worker_pids()
        assert(R:reload())
        proc.sleep(0.3)
        assert.are.equal(200, (R:get("/ping")))       -- new workers serve
        local t_rel = proc.now()
        assert(holder:release())
        local results = batch:collect(20)
        local counts = count_status(results)
        assert.are.equal(50, counts["200"], summary(counts))
        assert.truthy(zk.wait_until(function() return alive_count(old) == 0 end, 3),
                      "old workers still alive 3 s after their waiters were served")
        local reload_exit = proc.now() - t_rel
        assert.truthy(zk.wait_until(function() return lock_children(admin, rq) == 0 end, 3),
                      "lock nodes left after reload")
        -- The new workers work.
        local status, body = R:get("/lock?name=rq&hold=0")
        assert.are.equal(200, status, body)

        -- Quit with 50 waiters: graceful, they finish, then nginx exits.
        batch = queue_waiters(50)
        local workers = R:worker_pids()
        assert(R:signal("QUIT"))
        proc.sleep(0.3)
        assert.is_true(R:running(), "nginx quit with requests in flight")
        t_rel = proc.now()
        assert(holder:release())
        results = batch:collect(20)
        counts = count_status(results)
        assert.are.equal(50, counts["200"], summary(counts))
        assert.truthy(R:quit(3), "nginx did not exit within 3 s")
        local quit_exit = proc.now() - t_rel
        assert.are.equal(0, alive_count(workers))
        assert.truthy(zk.wait_until(function() return lock_children(admin, rq) == 0 end, 3),
                      "lock nodes left after quit")
        no_crash(R)
        local _, spam = R:error_log():gsub("lua tcp socket read timed out", "")
        local _, exit_errors = R:error_log():gsub("exit_worker_by_lua error", "")
        print(("\n[ngx] old workers gone: idle reload %.0f ms after HUP; reload with 50 waiters"
               .. " %.0f ms after release; quit with 50 waiters %.0f ms after release"
               .. " (error.log: %d 'read timed out' lines from the exit drain, %d"
               .. " 'exit_worker_by_lua error' lines)")
              :format(idle_exit * 1000, reload_exit * 1000, quit_exit * 1000, spam, exit_errors))
        assert.are.equal(0, exit_errors, "exit_worker_by_lua errors in error.log")
        assert.are.equal(0, spam, "'read timed out' lines from the exit drain")
        holder_client:close()
    end)

    it("falls back to polling where no doorbell socket can be made", function()
        local F = start { vars = { SOCKDIR = "/nonexistent" } }
        local current = assert(admin:get(root .. "/config"))
        assert(all_workers_see(F, current, 15), "polling nginx not ready:\n" .. F:log_tail())
        assert.truthy(F:error_log():find("falling back to polling", 1, true), F:log_tail())
        local paths = {}
        for i = 1, 50 do paths[i] = "/lock?name=l&hold=0.002&log=poll.log&i=" .. i end
        local counts = count_status(F:fire(paths):collect(60))
        assert.are.equal(50, counts["200"], summary(counts))
        assert_no_overlap(logdir .. "/poll.log", 50)
        local status, body = F:get("/methods/content", 15)
        assert.are.equal(200, status)
        assert.are.equal("ok\n", body)
        local old = F:worker_pids()
        assert(F:reload())
        assert.truthy(zk.wait_until(function() return alive_count(old) == 0 end, 3),
                      "idle old polling workers still alive after 3 s")
        no_crash(F)
        F:destroy()
    end)

    it("examples/openresty: the conf parses and its patterns work in 2 workers", function()
        local repo = nginx.repo
        local rc = os.execute(("nginx -q -t -p %s/ -c examples/openresty/nginx.conf 2>/dev/null")
                              :format(proc.shquote(repo)))
        assert.truthy(rc == 0 or rc == true, "nginx -t failed on the example")
        local eroot = root .. "/example"
        local period0 = math.floor(os.time() / 60)
        local E = start {
            lua_modules = { app = assert(proc.read_file(repo .. "/examples/openresty/app.lua")) },
            vars = { EROOT = eroot },
            http = [[
                init_worker_by_lua_block {
                    require("app").init_worker { servers = os.getenv("ZK_HOSTS"), root = "@EROOT@" }
                }
                exit_worker_by_lua_block { require("zkcoord.ngx").exit_worker() }
                server {
                    listen 127.0.0.1:@PORT@ reuseport;
                    location = /status { content_by_lua_block { require("app").status() } }
                    location = /config { content_by_lua_block { require("app").set_config() } }
                    location = /hits   { content_by_lua_block { require("app").hits() } }
                    location = /job    { content_by_lua_block { require("app").job() } }
                }
            ]],
        }
        -- Each worker's view: { config =, i_lead = } by pid, until pred(views) holds.
        local function views_until(pred, timeout)
            local views = {}
            local deadline = proc.now() + (timeout or 10)
            repeat
                local status, body = E:get("/status", 5)
                if status == 200 then
                    local pid, cfg, lead = body:match("^worker (%d+): config=(%S+) leader=%S+ i_lead=(%a+)")
                    if pid then views[tonumber(pid)] = { config = cfg, i_lead = lead == "true" } end
                end
                local n = 0
                for _, pid in ipairs(E:worker_pids()) do
                    if views[pid] then n = n + 1 end
                end
                if n == E.workers and pred(views) then return true, views end
                proc.sleep(0.01)
            until proc.now() > deadline
            return false, views
        end
        local function leaders(views)
            local n = 0
            for _, v in pairs(views) do if v.i_lead then n = n + 1 end end
            return n
        end
        -- Leader-only work: exactly one worker leads.
        assert.truthy(views_until(function(v) return leaders(v) == 1 end), "no single leader")
        assert.are.equal(1, lock_children(admin, eroot .. "/leader"))
        -- A config value pushed to every worker.
        local status, body = E:get("/config?set=blue")
        assert.are.equal(200, status)
        assert.are.equal("ok\n", body)
        assert.truthy(views_until(function(v)
            for _, x in pairs(v) do if x.config ~= "blue" then return false end end
            return true
        end), "not every worker has the new config")
        -- A shared counter: 30 concurrent adds, 30 distinct values.
        local paths = {}
        for i = 1, 30 do paths[i] = "/hits?i=" .. i end
        local seen = {}
        for _, r in ipairs(E:fire(paths):collect(30)) do
            assert.are.equal(200, r.status, tostring(r.err))
            local v = tonumber(r.body)
            assert.truthy(v and not seen[v], "duplicate or bad counter value " .. tostring(r.body))
            seen[v] = true
        end
        for i = 1, 30 do assert.truthy(seen[i], "counter value " .. i .. " missing") end
        -- The job runs once per period across everything that tries it.
        paths = {}
        for i = 1, 10 do paths[i] = "/job?i=" .. i end
        local ran = 0
        for _, r in ipairs(E:fire(paths):collect(30)) do
            assert.are.equal(200, r.status, tostring(r.err))
            assert.truthy(r.body:find("^ran") or r.body:find("^skipped"), r.body)
            if r.body:find("^ran") then ran = ran + 1 end
        end
        local periods = math.floor(os.time() / 60) - period0 + 1
        local runs = tonumber((admin:get(eroot .. "/jobs/report-runs")))
        assert.truthy(runs and runs >= 1 and runs <= periods,
                      ("job ran %s times over %d period(s)"):format(tostring(runs), periods))
        assert.is_true(ran <= 1)
        no_crash(E)
        E:destroy()
    end)

    it("a lock acquire in log_by_lua raises and leaves no lock node", function()
        assert.are.equal(200, (A:get("/logphase_lock")))
        assert.truthy(zk.wait_until(function()
            return A:error_log():find("cannot wait for ZooKeeper in log_by_lua", 1, true)
        end, 5))
        proc.sleep(0.3)
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/logphase") == 0
        end, 5), "the log phase's lock node was left behind")
    end)

    it("a waiting request aborted by its client does not keep an old worker alive", function()
        local R = start()
        local holder_client = zk.client()
        local holder = holder_client:lock(root .. "/ab")
        assert(holder:acquire(5))
        -- Two requests wait on the held lock, then their clients go away.
        local conns = {}
        for i = 1, 2 do
            local conn = assert(proc.tcp_connect("127.0.0.1", R.port, 2))
            assert(conn:send(("GET /lock_abortable?name=ab&timeout=30&i=%d HTTP/1.1\r\n"
                              .. "Host: x\r\n\r\n"):format(i)))
            conns[i] = conn
        end
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/ab") == 3
        end, 10), "waiters did not queue")
        for _, conn in ipairs(conns) do conn:close() end
        proc.sleep(0.3)
        local old = R:worker_pids()
        assert(R:reload())
        assert.truthy(zk.wait_until(function() return alive_count(old) == 0 end, 5),
                      "old workers still alive 5 s after HUP\n" .. R:log_tail(40))
        holder:release()
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/ab") == 0
        end, 5), "lock nodes left")
        no_crash(R)
        holder_client:close()
        R:destroy()
    end)

    it("locks exclude across two separate nginx instances", function()
        local B = start()
        assert(all_workers_see(B, "v2", 15), "second nginx not ready:\n" .. B:log_tail())
        local pa, pb = {}, {}
        for i = 1, 100 do
            pa[i] = "/lock?name=l&hold=0.003&log=ab.log&i=" .. i
            pb[i] = "/lock?name=l&hold=0.003&log=ab.log&j=" .. i
        end
        local ba, bb = A:fire(pa), B:fire(pb)
        local ra, rb = ba:collect(60), bb:collect(60)
        local ca, cb = count_status(ra), count_status(rb)
        assert.are.equal(100, ca["200"], summary(ca))
        assert.are.equal(100, cb["200"], summary(cb))
        assert_no_overlap(logdir .. "/ab.log", 200)
        local pids = {}
        for _, l in ipairs(lines(logdir .. "/ab.log")) do
            local pid = l:match("^enter %S+ %S+ (%d+)")
            if pid then pids[pid] = true end
        end
        local np = 0
        for _ in pairs(pids) do np = np + 1 end
        assert.is_true(np >= 3, "grants came from only " .. np .. " workers")
        no_crash(A)
        no_crash(B)
    end)

    it("waits with no timeout wait, in every waiting recipe (timeout = nil)", function()
        local c = zk.client { session_timeout = 10 }
        local cases = {
            { "lock", function() local l = c:lock(root .. "/f-lock"); assert(l:acquire(5)); return l end,
              function(l) assert(l:release()) end },
            { "rwlock", function()
                  local l = c:rwlock(root .. "/f-rwlock"):write_lock(); assert(l:acquire(5)); return l
              end, function(l) assert(l:release()) end },
            { "semaphore", function() return assert(c:semaphore(root .. "/f-semaphore", 1):acquire(5)) end,
              function(lease) assert(lease:release()) end },
            { "barrier", function()
                  local b = c:barrier(root .. "/f-barrier"); assert(b:create()); return b
              end,
              function(b) assert(b:remove()) end },
            { "election", function()
                  local e = c:election(root .. "/f-election"); assert(e:campaign(5)); return e
              end, function(e) assert(e:resign()) end },
            { "double_barrier", function() return c:double_barrier(root .. "/f-double_barrier", 2) end,
              function(b) assert(b:enter(10)); assert(b:leave(10)) end },
        }
        for _, case in ipairs(cases) do
            local recipe, block, unblock = case[1], case[2], case[3]
            local state = block()
            local batch = A:fire({ ("/forever?recipe=%s&name=f-%s"):format(recipe, recipe) })
            proc.sleep(1)
            if batch:poll(0) == 0 then
                local r = batch:collect(1)[1]
                error(recipe .. ": the wait without a timeout returned at once: " .. tostring(r.body))
            end
            unblock(state)
            local r = batch:collect(20)[1]
            assert.are.equal(200, r.status, recipe .. ": " .. tostring(r.err))
            assert.truthy(r.body:find("^ok "), recipe .. ": " .. tostring(r.body))
        end
        c:close()
    end)

    it("connect in nginx: servers that all refuse are tried until the connect timeout, then named",
       function()
        local port = assert(proc.free_port())
        local status, body = A:get("/connect_refused?port=" .. port, 10)
        assert.are.equal(200, status, tostring(body))
        local c, err, detail, took = body:match("^(%S+) (%S+) (.-) ([%d.]+)\n$")
        assert.are.equal("nil", c, body)
        assert.are.equal("connectionloss", err, body)
        assert.are.equal("connection refused by 127.0.0.1:" .. port, detail)
        assert.is_true(tonumber(took) >= 0.9 and tonumber(took) < 2, body)
    end)

    it("the ngx waiter's sleep and event:wait raise on a bad timeout; math.huge is no limit",
       function()
        local status, body = A:get("/wait_args", 10)
        assert.are.equal(200, status, tostring(body))
        local sleep_msg = "false bad argument #1 to 'sleep' (timeout must be a number >= 0)"
        local wait_msg = "false bad argument #1 to 'wait' (timeout must be nil or a number >= 0)"
        local want = {}
        for _ = 1, 4 do
            want[#want + 1] = sleep_msg
            want[#want + 1] = wait_msg
        end
        want[#want + 1] = "huge true after the timer"
        assert.are.equal(table.concat(want, "\n") .. "\n", body)
    end)

    it("a waiting request whose client aborts (lua_check_client_abort on) leaves the line at once", function()
        local holder_client = zk.client { session_timeout = 10 }
        local holder = holder_client:lock(root .. "/ab2")
        assert(holder:acquire(5))
        local batch = A:fire({ "/lock_abortable?name=ab2&timeout=60&hold=0" })
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/ab2") == 2
        end, 10), "the waiter did not queue")
        local t0 = proc.now()
        batch:abort()
        local gone = zk.wait_until(function()
            return lock_children(admin, root .. "/ab2") == 1
        end, 3)
        local took = proc.now() - t0
        assert.truthy(gone, "the aborted request's node is still there 3 s after the abort\n"
                            .. A:log_tail(60))
        assert(holder:release())
        local status, body = A:get("/lock?name=ab2&hold=0&timeout=5")
        assert.are.equal(200, status, body)
        print(("\n[ngx] aborted waiter's node gone %.0f ms after the client closed"):format(took * 1000))
        assert.is_falsy(A:error_log():find("callback failed", 1, true), A:log_tail())
        holder_client:close()
    end)

    it("a waiting request whose client goes away (lua_check_client_abort off) leaves the line", function()
        local holder_client = zk.client { session_timeout = 10 }
        local holder = holder_client:lock(root .. "/ab3")
        assert(holder:acquire(5))
        local batch = A:fire({ "/lock?name=ab3&timeout=60&hold=0" })
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/ab3") == 2
        end, 10), "the waiter did not queue")
        local t0 = proc.now()
        batch:abort()
        local gone = zk.wait_until(function()
            return lock_children(admin, root .. "/ab3") == 1
        end, 3)
        local took = proc.now() - t0
        assert.truthy(gone, "the gone client's node is still there 3 s later")
        assert(holder:release())
        local status, body = A:get("/lock?name=ab3&hold=0&timeout=5")
        assert.are.equal(200, status, body)
        print(("\n[ngx] without lua_check_client_abort: the gone client's node went %.0f ms after it"
               .. " closed"):format(took * 1000))
        holder_client:close()
    end)

    for _, how in ipairs({ "exit", "error" }) do
        it("a request that ends by " .. how .. " holding a lock releases it, logging the path", function()
            local name = "end-" .. how
            local status = A:get("/lock_" .. how .. "?name=" .. name)
            assert.are.equal(how == "exit" and 200 or 500, status)
            local t0 = proc.now()
            local gone = zk.wait_until(function()
                return lock_children(admin, root .. "/" .. name) == 0
            end, 3)
            local took = proc.now() - t0
            assert.truthy(gone, "the lock is still held 3 s after the request ended")
            local log = A:error_log()
            local at = log:find("the request ended holding " .. root .. "/" .. name .. "/", 1, true)
            assert.truthy(at, "no warning naming the lock:\n" .. A:log_tail())
            local line = log:sub(1, at):match("[^\n]*$")
            assert.truthy(line:find("[warn]", 1, true), line)
            local st2, body = A:get("/lock?name=" .. name .. "&hold=0&timeout=2")
            assert.are.equal(200, st2, body)
            print(("\n[ngx] ngx.%s holding a lock: released %.0f ms after the response"):format(
                  how == "exit" and "exit" or "error", took * 1000))
        end)
    end

    it("a killed light thread that waited for a lock leaves the line; its request goes on", function()
        local holder_client = zk.client { session_timeout = 10 }
        local holder = holder_client:lock(root .. "/kt")
        assert(holder:acquire(5))
        local batch = A:fire({ "/kill_waiter?name=kt&stay=1.5" })
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/kt") == 2
        end, 5), "the light thread did not queue")
        -- The thread is killed 0.3 s after the request started waiting.
        local t0 = proc.now()
        local gone = zk.wait_until(function()
            return lock_children(admin, root .. "/kt") == 1
        end, 1)
        print(("\n[ngx] killed light thread: its node went %.0f ms after it queued (killed at ~300 ms)")
              :format((proc.now() - t0) * 1000))
        assert.truthy(gone, "the killed thread's node is still there")
        assert.are.equal(1, batch:poll(0), "the request ended already")
        local r = batch:collect(10)[1]
        assert.are.equal(200, r.status, tostring(r.err))
        assert.are.equal("done\n", r.body)
        assert(holder:release())
        holder_client:close()
    end)

    it("a lock acquired in access_by_lua is released in log_by_lua (the owner is the request)", function()
        local status, body = A:get("/phases?name=ph")
        assert.are.equal(200, status)
        assert.are.equal("true\n", body)
        local line
        assert.truthy(zk.wait_until(function()
            line = A:error_log():match("phase release: %S+ %S+")
            return line
        end, 5), A:log_tail())
        assert.are.equal("phase release: true nil", line)
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/ph") == 0
        end, 1), "lock node left")
        assert.is_falsy(A:error_log():find("the request ended holding " .. root .. "/ph/", 1, true))
    end)

    -- The counters of /clock for `name` (in instance `n`, default A), as a
    -- table.
    local function fence(name, n)
        local status, body = (n or A):get("/fence?name=" .. name)
        assert.are.equal(200, status, body)
        local t = {}
        for k, v in body:gmatch("(%w+)=(%d+)") do t[k] = tonumber(v) end
        return t
    end

    -- Every worker's cohort for `name` is idle: a try-once gets in at once
    -- (a waiting or holding ghost would answer "timeout"), one request
    -- after the other, on new connections (both workers take some). A
    -- release does not wait for its node's delete, so the request before
    -- may have answered while its worker's delete was still on the way:
    -- the other worker's try-once would see that node. So each try-once
    -- waits until the server shows no node (a node held by a ghost never
    -- goes: that fails here too).
    local function cohort_idle(name, handler)
        local pids, n = {}, 0
        for i = 1, 20 do
            assert.truthy(zk.wait_until(function()
                return lock_children(admin, root .. "/" .. name) == 0
            end, 5), "a node is left")
            local status, body = A:get(("/%s?name=%s&hold=0&timeout=0&i=%d")
                                       :format(handler or "clock", name, i))
            assert.are.equal(200, status, body)
            if not pids[body] then pids[body], n = true, n + 1 end
        end
        assert.are.equal(2, n, "all 20 went to one worker")
    end

    -- 20 requests to /<handler>_abortable queue behind `holder` (held),
    -- each worker's leader among them, then 20 to /<handler>; the first 20
    -- are aborted by their clients, the holder releases: the 20 others are
    -- served, no aborted one was granted, no node is left, and each
    -- worker's cohort is idle. Returns the counters of `name`.
    local function aborted_waiters(handler, name, holder, hold)
        local gone, stay = {}, {}
        for i = 1, 20 do
            gone[i] = ("/%s_abortable?name=%s&hold=0&abortable=1&i=%d"):format(handler, name, i)
            stay[i] = ("/%s?name=%s&hold=%s&i=%d"):format(handler, name, hold, i)
        end
        local b1 = A:fire(gone)
        assert.truthy(zk.wait_until(function() return fence(name).queued == 20 end, 10))
        local b2 = A:fire(stay)
        assert.truthy(zk.wait_until(function() return fence(name).queued == 40 end, 10))
        -- One node per worker's cohort, behind the holder's.
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/" .. name) >= 2
        end, 10))
        assert.is_true(lock_children(admin, root .. "/" .. name) <= 3, "more than one node per worker")
        b1:abort()
        assert.truthy(zk.wait_until(function() return fence(name).aborted == 20 end, 10),
                      "the aborts did not reach the requests")
        assert(holder:release())
        local counts = count_status(b2:collect(30))
        assert.are.equal(20, counts["200"], summary(counts) .. "\n" .. A:log_tail())
        local f = fence(name)
        assert.are.equal(20, f.grants, "an aborted request was granted")
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/" .. name) == 0
        end, 5), "a node is left")
        cohort_idle(name, handler)
        assert.is_falsy(A:error_log():find("tick:", 1, true), A:log_tail())
        no_crash(A)
        return f
    end

    it("cohort: 200 requests in two workers on one cohort lock exclude, all served", function()
        local paths = {}
        for i = 1, 200 do paths[i] = "/clock?name=c200&hold=0.002&i=" .. i end
        local t0 = proc.now()
        local results = A:fire(paths):collect(60)
        local took = proc.now() - t0
        local counts = count_status(results)
        assert.are.equal(200, counts["200"], summary(counts) .. "\n" .. A:log_tail())
        local f = fence("c200")
        assert.are.equal(200, f.grants)
        assert.are.equal(0, f.overlaps, "two holders at once (the store both workers share)")
        assert.are.equal(0, f.stale, "a grant's token was not above the one before it")
        assert.are.equal(0, f.inside)
        assert.is_true(f["local"] > 0, "no local handoff: the cohort did not serve")
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/c200") == 0
        end, 5), "a cohort node is left")
        print(("\n[ngx] cohort: 200 requests (2 ms hold) in 2 workers: %.2f s, %d of 200 grants"
               .. " handed over locally"):format(took, f["local"]))
        assert.is_falsy(A:error_log():find("the request ended holding " .. root .. "/c200", 1, true),
                        A:log_tail())
        no_crash(A)
    end)

    it("cohort: requests aborted while waiting (and their leaders) leave nothing behind", function()
        local holder_client = zk.client { session_timeout = 10 }
        local holder = holder_client:lock(root .. "/cab")
        assert(holder:acquire(5))
        local f = aborted_waiters("clock", "cab", holder, 0.001)
        assert.are.equal(0, f.overlaps)
        assert.are.equal(0, f.stale)
        holder_client:close()
    end)

    it("cohort: a request that ends holding hands the node on, with a warning", function()
        -- Two workers' cohorts busy, and requests that end by ngx.exit
        -- while holding in between: the next local waiter gets the node.
        local paths = {}
        for i = 1, 40 do
            paths[i] = (i % 4 == 0 and "/clock_exit?name=cex&i=" or "/clock?name=cex&hold=0.002&i=") .. i
        end
        local counts = count_status(A:fire(paths):collect(60))
        assert.are.equal(40, counts["200"], summary(counts) .. "\n" .. A:log_tail())
        local f = fence("cex")
        assert.are.equal(40, f.grants)
        assert.are.equal(0, f.overlaps)
        assert.are.equal(0, f.stale)
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/cex") == 0
        end, 5), "a node is left")
        local log = A:error_log()
        local at = log:find("the request ended holding " .. root .. "/cex (lock cohort", 1, true)
        assert.truthy(at, "no warning naming the lock:\n" .. A:log_tail())
        cohort_idle("cex")
    end)

    it("cohort: acquired in access_by_lua, released in log_by_lua, handed on between them", function()
        local paths = {}
        for i = 1, 10 do paths[i] = "/phases?name=cph&cohort=1&i=" .. i end
        for _, r in ipairs(A:fire(paths):collect(30)) do
            assert.are.equal(200, r.status, tostring(r.err))
            assert.are.equal("true\n", r.body)
        end
        assert.truthy(zk.wait_until(function()
            local _, n = A:error_log():gsub("phase release %(cohort%): true nil", "")
            return n == 10
        end, 5), A:log_tail())
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/cph") == 0
        end, 5), "lock node left")
        assert.is_falsy(A:error_log():find("the request ended holding " .. root .. "/cph", 1, true))
    end)

    it("cohort: a node deleted under its holder: on_lost, release says lost, waiters rejoin", function()
        local paths = {}
        for i = 1, 6 do paths[i] = "/clost?name=clo&hold=0.5&i=" .. i end
        local batch = A:fire(paths)
        assert.truthy(zk.wait_until(function()
            local f = fence("clo")
            return f.queued == 6 and f.grants == 1
        end, 10), A:log_tail())
        local kids = assert(admin:children(root .. "/clo"))
        table.sort(kids, function(a, b) return a:match("(%d+)$") < b:match("(%d+)$") end)
        assert(admin:delete(root .. "/clo/" .. kids[1]))     -- the holding cohort's node
        local bodies = {}
        for _, r in ipairs(batch:collect(30)) do
            assert.are.equal(200, r.status, tostring(r.body or r.err) .. "\n" .. A:log_tail())
            bodies[r.body] = (bodies[r.body] or 0) + 1
        end
        assert.are.equal(1, bodies["nil lost\n"], summary(bodies))
        assert.are.equal(5, bodies["true nil\n"], summary(bodies))
        local f = fence("clo")
        assert.are.equal(1, f.lost)
        assert.are.equal(6, f.grants)
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/clo") == 0
        end, 5), "a node is left")
    end)

    it("cohort: a revocation reaches the request holding, and its node is not passed on", function()
        local B = start { workers = 1 }     -- one cohort: every request in one worker
        local name = "crv"
        local first = B:fire({ "/crevoke?name=" .. name .. "&i=1" }, 30)
        assert.truthy(zk.wait_until(function()
            return fence(name, B).grants == 1
        end, 10), B:log_tail())
        local rest = B:fire({ "/crevoke?name=" .. name .. "&i=2",
                              "/crevoke?name=" .. name .. "&i=3" }, 30)
        assert.truthy(zk.wait_until(function() return fence(name, B).queued == 3 end, 10))
        assert.are.equal(200, (B:get("/cgo?name=" .. name .. "&i=1")))
        -- 1 hands on to 2 locally (the same node); then revoke that node
        assert.truthy(zk.wait_until(function() return fence(name, B).grants == 2 end, 10))
        local kids = assert(admin:children(root .. "/" .. name))
        assert.are.equal(1, #kids, table.concat(kids, " "))
        local node = root .. "/" .. name .. "/" .. kids[1]
        assert(require("zkcoord.lock").revoke(admin, node))
        assert.truthy(zk.wait_until(function() return fence(name, B).grants == 3 end, 10))
        assert.are.equal(200, (B:get("/cgo?name=" .. name .. "&i=3")))
        local out = {}
        for _, r in ipairs(first:collect(30)) do out[#out + 1] = r end
        for _, r in ipairs(rest:collect(30)) do out[#out + 1] = r end
        local got = {}
        for _, r in ipairs(out) do
            assert.are.equal(200, r.status, tostring(r.body or r.err) .. "\n" .. B:log_tail())
            local i, nd, z, n, asked = r.body:match("^(%d) (%S+) (%d+) (%d+) (%S+)\n$")
            assert.truthy(i, r.body)
            got[tonumber(i)] = { node = nd, z = tonumber(z), n = tonumber(n), asked = asked }
        end
        assert.same({ node = node, n = 0, asked = "-" }, { node = got[1].node, n = got[1].n,
                                                           asked = got[1].asked })
        -- 2 was told (as its own request), not 1 or 3
        assert.same({ node = node, n = 1, asked = "asked:" .. node },
                    { node = got[2].node, n = got[2].n, asked = got[2].asked })
        assert.are.equal(got[1].z, got[2].z)
        -- 3 joined the line again: a new node, a larger token
        assert.are_not.equal(node, got[3].node)
        assert.same({ 0, "-" }, { got[3].n, got[3].asked })
        assert.truthy(got[3].z > got[2].z)
        assert.truthy(zk.wait_until(function()
            return lock_children(admin, root .. "/" .. name) == 0
        end, 5), "a node is left")
        no_crash(B)
        B:destroy()
    end)

    it("cohort: an aborted waiter's on_abort runs, also when its worker was held back meanwhile", function()
        -- One worker: the second request waits in the first one's cohort.
        local I = start { workers = 1 }
        local holder_client = zk.client { session_timeout = 10 }
        local holder = holder_client:lock(root .. "/cpk")
        assert(holder:acquire(5))
        local b1 = I:fire({ "/clock_abortable?name=cpk&hold=0&abortable=1" })
        assert.truthy(zk.wait_until(function() return fence("cpk", I).queued == 1 end, 10))
        local b2 = I:fire({ "/clock_abortable?name=cpk&hold=0&abortable=1&block=0.3" })
        assert.truthy(zk.wait_until(function() return fence("cpk", I).queued == 2 end, 10))
        -- The worker is busy from 0.3 s to 1.3 s after the second request:
        -- both clients go away meanwhile, and the worker's ticker runs
        -- before nginx reads its connections again.
        proc.sleep(0.5)
        b1:abort()
        b2:abort()
        assert.truthy(zk.wait_until(function() return fence("cpk", I).aborted == 2 end, 10),
                      "an abort did not reach its request: " .. I:log_tail())
        assert(holder:release())
        holder_client:close()
        no_crash(I)
        I:destroy()
    end)

    it("cohort: rwlock readers aborted while waiting (their leaders too) leave nothing behind", function()
        local writer_client = zk.client { session_timeout = 10 }
        local writer = writer_client:rwlock(root .. "/crw"):write_lock()
        assert(writer:acquire(5))
        aborted_waiters("crlock", "crw", writer, 0.002)
        writer_client:close()
    end)

    it("zkcoord's own log lines go to the error log at their level", function()
        assert.are.equal(200, (A:get("/say_log?tag=g1")))
        assert.truthy(zk.wait_until(function()
            return A:error_log():find("%[warn%][^\n]*zkcoord: a line from the spec g1")
        end, 3), A:log_tail())
        assert.is_falsy(A:stderr():find("a line from the spec", 1, true))
    end)

    it("an idle worker logs nothing for a minute #slow", function()
        local I = start()
        assert.truthy(zk.wait_until(function() return (I:get("/timed", 5)) == 200 end, 15))
        local before = #I:error_log()
        proc.sleep(65)
        local added = I:error_log():sub(before + 1)
        assert.is_falsy(added:find("[error]", 1, true), added)
        assert.is_falsy(added:find("read timed out", 1, true), added)
        no_crash(I)
        I:destroy()
    end)

    it("request_timeout bounds get() and set() while ZooKeeper is down longer than it", function()
        local srv = assert(zk.zkserver.start({ tick_time = 500 }))
        local E = start { env = { ZK_HOSTS = srv.hosts, ZK_REQUEST_TIMEOUT = "2" } }
        assert.truthy(zk.wait_until(function()
            local st, b = E:get("/timed", 10)
            return st == 200 and b:find("^get %S+ nonode")
        end, 15), "nginx on the private server not ready:\n" .. E:log_tail())
        srv:stop()
        local down_at = proc.now()
        proc.sleep(0.5)
        local t0 = proc.now()
        local status, body = E:get("/timed", 60)
        local took = proc.now() - t0
        assert.are.equal(200, status, body)
        local tg, ts = body:match("^get %S+ %S+ (%S+) set %S+ %S+ (%S+)")
        print(("\n[ngx] request_timeout 2 s, ZooKeeper down: %s(%.2f s in all)"):format(body, took))
        assert.truthy(tonumber(tg) <= 2.5, body)
        assert.truthy(tonumber(ts) <= 2.5, body)
        proc.sleep(math.max(0, 8 - (proc.now() - down_at)))
        assert.truthy(srv:start())
        assert.truthy(zk.wait_until(function()
            local st, b = E:get("/timed", 10)
            return st == 200 and b:find("^get %S+ nonode")
        end, 20), "no recovery after the outage:\n" .. E:log_tail())
        local _, spam = E:error_log():gsub("lua tcp socket read timed out", "")
        assert.are.equal(0, spam, "'read timed out' lines in error.log")
        no_crash(E)
        E:destroy()
        srv:destroy()
    end)

    it("exit_worker removes its worker's nodes at once: reloads and quits with waiters, repeated", function()
        local holder_client = zk.client { session_timeout = 10 }
        local holder = holder_client:lock(root .. "/rq2")
        local rq = root .. "/rq2"
        local function round(R, how)
            assert(holder:acquire(5))
            local paths = {}
            for i = 1, 30 do paths[i] = "/lock?name=rq2&hold=0.002&timeout=20&spray=200&i=" .. i end
            local batch = R:fire(paths)
            assert.truthy(zk.wait_until(function() return lock_children(admin, rq) == 31 end, 20),
                          "waiters did not queue")
            local old = R:worker_pids()
            if how == "reload" then assert(R:reload()) else assert(R:signal("QUIT")) end
            proc.sleep(0.2)
            assert(holder:release())
            local counts = count_status(batch:collect(20))
            assert.are.equal(30, counts["200"], summary(counts) .. "\n" .. R:log_tail())
            if how == "reload" then
                assert.truthy(zk.wait_until(function() return alive_count(old) == 0 end, 3),
                              "old workers still alive")
            else
                assert.truthy(R:quit(3), "nginx did not exit")
            end
            local t0 = proc.now()
            local ok = zk.wait_until(function() return lock_children(admin, rq) == 0 end, 1)
            return ok, proc.now() - t0
        end
        local R = start()
        local left = {}
        for i = 1, 4 do
            local ok, took = round(R, "reload")
            if not ok then left[#left + 1] = "reload " .. i end
            print(("\n[ngx] reload %d: nodes gone %.0f ms after the old workers exited")
                  :format(i, took * 1000))
        end
        no_crash(R)
        R:destroy()
        for i = 1, 2 do
            local Q = start()
            local ok, took = round(Q, "quit")
            if not ok then left[#left + 1] = "quit " .. i end
            print(("\n[ngx] quit %d: nodes gone %.0f ms after nginx exited"):format(i, took * 1000))
            no_crash(Q)
            Q:destroy()
        end
        -- A worker that exits with replies in flight (a timer busy until the exit).
        for i = 1, 5 do
            local Q = start()
            local status, body = Q:get("/busy_holder?name=bh")
            assert.are.equal(200, status)
            assert.are.equal("held\n", body)
            assert(Q:signal("QUIT"))
            -- close() waits up to 2 s for the replies in flight, then
            -- zookeeper_close may take up to about 3 s: 5 s is the design's
            -- own worst case, before a sanitizer's slowdown
            assert.truthy(Q:quit(10), "nginx did not exit")
            local t0 = proc.now()
            local ok = zk.wait_until(function() return lock_children(admin, root .. "/bh") == 0 end, 1)
            if not ok then left[#left + 1] = "busy quit " .. i end
            print(("\n[ngx] busy quit %d: node gone %s after nginx exited"):format(
                  i, ok and ("%.0f ms"):format((proc.now() - t0) * 1000) or "not within 1 s"))
            no_crash(Q)
            Q:destroy()
        end
        assert.are.same({}, left, "runs that left nodes for more than 1 s")
        holder_client:close()
    end)

    it("a work-queue item given back at its request's end is not told lost", function()
        assert(admin:work_queue(root .. "/iq"):put("job"))
        local status, body = A:get("/item_end", 10)
        assert.are.equal(200, status, tostring(body) .. "\n" .. A:log_tail())
        local claim = body:match("^(/%S+)")
        assert.truthy(claim, body)
        -- the request's end gives the item back: its claim is deleted
        assert.truthy(zk.wait_until(function() return admin:exists(claim) == false end, 10),
                      "the claim stayed:\n" .. A:log_tail())
        -- A change after that delete: once every worker has its new value,
        -- each has handled the claim's delete event first (one session's
        -- events arrive in order, and callbacks run in arrival order).
        assert(admin:set(root .. "/config", "after-item"))
        assert.truthy(all_workers_see(A, "after-item", 15), A:log_tail())
        local _, told = A:get("/item_lost", 5)
        assert.are.equal("0 nil\n", told)
        -- the item is back in the queue
        local item = assert(admin:work_queue(root .. "/iq"):take(5))
        assert.are.equal("job", item.data)
        assert.is_true(item:ack())
    end)
end)
