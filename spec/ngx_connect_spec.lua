-- zkcoord.ngx.client() and the nginx waiter's own timers: a connect that
-- never came back (aborted request, bad options) must not block the
-- worker's later connects; a client must not leave a pending timer behind
-- (nginx caps them per worker), and a full timer table is a returned
-- error; callbacks run one at a time, in order, also when one waits. A
-- server that comes up while connect waits is reached; one that answers but
-- is not ZooKeeper is named (issue 28).
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local nginx = require "helpers.nginx"
local tcpproxy = require "helpers.tcpproxy"

local APP = [==[
local zn = require "zkcoord.ngx"
local zkcoord = require "zkcoord"
local semaphore = require "ngx.semaphore"
local _M = {}
local LOG = "@LOGDIR@/connect.log"
local HOSTS = os.getenv("ZK_HOSTS")

local function say(s)
    local f = io.open(LOG, "a") f:write(s, "\n") f:close()
end

-- connects to a port that refuses, long enough to be aborted
function _M.dead()
    say("dead connecting")
    local c, err = zn.client { servers = "127.0.0.1:1", connect_timeout = 1 }
    say("dead " .. tostring(c) .. " " .. tostring(err))
    ngx.say("dead")
end

-- the worker's client for ?servers= within ?timeout= seconds: its state or
-- the error, and how long it took; closed again
function _M.to()
    local t0 = ngx.now()
    local c, err, detail = zn.client { servers = ngx.var.arg_servers,
                                       connect_timeout = tonumber(ngx.var.arg_timeout) }
    ngx.update_time()
    ngx.say(("%s %s %s %.2f"):format(c and c:state() or "nil", tostring(err), tostring(detail),
                                     ngx.now() - t0))
    zn.exit_worker()
end

function _M.bad()
    local ok, err = pcall(zn.client, { servers = HOSTS, session_timeout = "x" })
    ngx.say("bad ", tostring(ok), " ", tostring(err))
end

function _M.good()
    local c, err, detail = zn.client { servers = HOSTS, connect_timeout = 2 }
    ngx.say("good ", c and c:state() or "nil", " ", tostring(err), " ", tostring(detail))
end

-- connect and close n times; then the pending timers once the closed
-- clients' tickers (a 50 ms timer each, no event to wait for) went
function _M.cycles()
    local counts = {}
    for i = 1, tonumber(ngx.var.arg_n) do
        local ok, c, err, detail = pcall(zkcoord.connect, { servers = HOSTS, wait = "ngx" })
        if not ok then
            return ngx.say("raised ", c)
        elseif not c then
            return ngx.say("failed ", err, " ", tostring(detail))
        end
        c:close()
    end
    ngx.sleep(0.2)
    ngx.say("pending ", ngx.timer.pending_count())
end

-- no pending timer left to the library: connect fails, without raising
function _M.full()
    local function noop() end
    while ngx.timer.at(3600, noop) do end
    local ok, c, err, detail = pcall(zkcoord.connect, { servers = HOSTS, wait = "ngx" })
    ngx.say("full ", tostring(ok), " ", tostring(c), " ", tostring(err), " ", tostring(detail))
end

-- a data watch whose callback waits for value "1"
function _M.watch()
    local c = assert(zn.client { servers = HOSTS })
    local ended = semaphore.new(0)
    local w = c:watch("@ROOT@/w", function(data)
        say("start " .. tostring(data))
        if data == "1" then ngx.sleep(1) end
        say("end " .. tostring(data))
        ended:post(1)
    end, { kind = "data" })
    for _ = 1, 3 do ended:wait(10) end
    w:cancel()
    ngx.say("done")
end

return _M
]==]

local HTTP = [[
    lua_check_client_abort on;
    lua_max_pending_timers 16;
    server {
        listen 127.0.0.1:@PORT@;
        location = /dead { content_by_lua_block { require("app").dead() } }
        location = /to { content_by_lua_block { require("app").to() } }
        location = /bad { content_by_lua_block { require("app").bad() } }
        location = /good { content_by_lua_block { require("app").good() } }
        location = /cycles { content_by_lua_block { require("app").cycles() } }
        location = /full { content_by_lua_block { require("app").full() } }
        location = /watch { content_by_lua_block { require("app").watch() } }
    }
]]

describe("zkcoord.ngx connects and the nginx waiter's timers #zk #ngx", function()
    local root, logdir, n, log

    before_each(function()
        root = zk.new_root("ngxconnect")
        logdir = assert(proc.mktemp_dir("zkcoord-ngxconnect-"))
        os.execute("chmod 1777 " .. proc.shquote(logdir))
        log = logdir .. "/connect.log"
        n = assert(nginx.start {
            workers = 1,
            log_level = "info",     -- zkcoord's connection lines, for a failure's report
            env = { ZK_HOSTS = zk.hosts() },
            vars = { ROOT = root, LOGDIR = logdir },
            lua_modules = { app = APP },
            http = HTTP,
        })
    end)

    after_each(function()
        if n then n:destroy() end
        zk.close_clients()
        if logdir then proc.rm_rf(logdir) end
        zk.delete_tree(zk.admin(), root)
    end)

    local function lines()
        local out = {}
        for l in (proc.read_file(log) or ""):gmatch("[^\n]+") do out[#out + 1] = l end
        return out
    end

    local function get(path)
        local status, body = n:get(path, 15)
        assert.are.equal(200, status, tostring(body) .. "\n" .. n:log_tail())
        return (body:gsub("\n$", ""))
    end

    it("a connect whose request was aborted does not block the next ones", function()
        local batch = n:fire({ "/dead" })
        assert.truthy(zk.wait_until(function()
            return (proc.read_file(log) or ""):find("dead connecting", 1, true)
        end, 10), n:log_tail())
        batch:abort()           -- lua_check_client_abort: its coroutine is dropped
        assert.matches("^good connected nil nil$", get("/good"))
        assert.matches("^good connected nil nil$", get("/good"))
        assert.same({ "dead connecting" }, lines())   -- it never came back
    end)

    it("a server that comes up while connect waits is reached (was connectionloss at 0.5 s)",
       function()
        -- a ZooKeeper restart: refused for 2 s, then a server (a proxy to ours)
        local port = assert(proc.free_port())
        local late = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)")),
                                           { port = port, after = 2 }))
        finally(function() late:stop() end)
        local state, took = get("/to?timeout=20&servers=" .. late.hosts):match("^(%S+) nil nil ([%d.]+)$")
        assert.are.equal("connected", state)
        -- it waited for the server (up 2 s after the proxy was spawned, before the request)
        assert.is_true(tonumber(took) >= 1.5 and tonumber(took) < 20, took)
    end)

    it("a server that is not ZooKeeper (HTTP 400) fails at once, naming it (was 'connected')",
       function()
        local http = assert(tcpproxy.start("127.0.0.1", 1))
        finally(function() http:stop() end)
        assert(http:reply("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
        local body = get("/to?timeout=5&servers=" .. http.hosts)
        local took = body:match(" ([%d.]+)$")
        assert.are.equal(("nil connectionloss %s did not answer as a ZooKeeper server %s")
                         :format(http.hosts, took), body)
        assert.is_true(tonumber(took) < 2, body)
    end)

    it("a connect that raised (bad options) does not block the next ones", function()
        assert.matches("^bad false .*session_timeout", get("/bad"))
        assert.matches("^good connected nil nil$", get("/good"))
    end)

    it("a client leaves no pending timer behind", function()
        -- more cycles than the cap; one timer left: the worker's sentinel
        assert.are.equal("pending 1", get("/cycles?n=20"))
    end)

    it("connect returns nil, err when no timer is left", function()
        assert.matches("^full true nil systemerror cannot start the nginx %a+ timer: "
                       .. "too many pending timers$", get("/full"))
    end)

    it("callbacks run one at a time, in order, when one waits", function()
        local admin = zk.admin()
        assert(admin:create(root .. "/w", "0"))
        local batch = n:fire({ "/watch" })
        local function logged(l)
            return zk.wait_until(function()
                return (proc.read_file(log) or ""):find(l .. "\n", 1, true)
            end, 10)
        end
        assert.truthy(logged("end 0"), n:log_tail())
        assert(admin:set(root .. "/w", "1"))
        assert.truthy(logged("start 1"), n:log_tail())
        assert(admin:set(root .. "/w", "2"))
        local r = batch:collect(20)[1]
        assert.are.equal(200, r.status, tostring(r.body or r.err) .. "\n" .. n:log_tail())
        assert.same({ "start 0", "end 0", "start 1", "end 1", "start 2", "end 2" }, lines())
    end)
end)


-- Several coroutines of one worker calling zkcoord.ngx.client() at once
-- while ZooKeeper refuses, then comes up: each call is answered by the one
-- connect running (within its connect timeout), and each caller has the
-- worker's client soon after the server is up. Was: a caller waiting on the
-- running connect took it over at its connect timeout (which a failing
-- connect always reaches), closed its client and started again (the n-th
-- caller answered after n connect timeouts); and a caller waiting past a
-- connect's deadline could spin the worker for ever on a semaphore wait of
-- under a millisecond (service_discovery_spec's gateway worker that said
-- nothing).

-- The connect timeout: not a whole number of milliseconds, as a user's may
-- be (nginx timers count whole ones, so a wait for what is left of it ends
-- a fraction of a millisecond early: the take-over spun on that before).
local CT = 2.0003
local UP = 2.5 * CT        -- the server comes up then, mid-way through the third connect
local MARGIN = CT / 2      -- load, and the refusal's probe
local GIVE_UP = UP + 2 * CT

-- Each of n timers calls zn.client() until it has a client (again at once
-- after a failure, as a gateway's start-up timer does), for GIVE_UP s at
-- most; /runs then lists, per timer, "i|client|seconds to the client|calls",
-- the calls as "seconds=answer" joined by ";".
local RACE_APP = [==[
local zn = require "zkcoord.ngx"
local zkcoord = require "zkcoord"
local now = zkcoord.now
local _M = {}
local runs = {}
local OPTS = { servers = "127.0.0.1:@ZKPORT@", connect_timeout = @CT@,
               session_timeout = @ST@ }
local asked = false

local function caller(premature, i, t0)
    if premature then return end
    local calls, c = {}, nil
    repeat
        local t = now()
        local err, detail
        c, err, detail = zn.client(OPTS)
        calls[#calls + 1] = ("%.3f=%s"):format(now() - t,
            c and "client" or tostring(err) .. " " .. tostring(detail))
    until c or now() - t0 > @GIVE_UP@
    runs[#runs + 1] = ("%d|%s|%.3f|%s"):format(i, tostring(c), now() - t0, table.concat(calls, ";"))
end

function _M.race()
    runs = {}
    local t0 = now()
    for i = 1, tonumber(ngx.var.arg_n) do
        assert(ngx.timer.at(0, caller, i, t0))
    end
    ngx.say("started")
end

-- /connect: a request calling zn.client() (aborted by the spec mid-connect)
function _M.connect()
    asked = true
    zn.client(OPTS)
    ngx.say("done")
end

function _M.asked()
    ngx.say(tostring(asked))
end

function _M.runs()
    ngx.say(table.concat(runs, "\n"))
end

return _M
]==]


local function start_racing(port)
    return assert(nginx.start {
        workers = 1,
        vars = { ZKPORT = port, CT = CT, ST = zk.SESSION_TIMEOUT, GIVE_UP = GIVE_UP },
        lua_modules = { race = RACE_APP },
        http = [[
            server {
                listen 127.0.0.1:@PORT@;
                location = /race { content_by_lua_block { require("race").race() } }
                location = /runs { content_by_lua_block { require("race").runs() } }
                location = /asked { content_by_lua_block { require("race").asked() } }
                location = /connect {
                    lua_check_client_abort on;
                    content_by_lua_block { require("race").connect() }
                }
            }
        ]],
    })
end


-- The callers' lines from /runs once there are n (the worker must answer).
local function race_runs(gw, n, timeout)
    local body
    local done = zk.wait_until(function()
        local status
        status, body = gw:get("/runs", 5)
        body = body or ""
        return status == 200 and select(2, body:gsub("[^\n]+", "")) >= n
    end, timeout)
    assert.truthy(done, "the callers did not end:\n" .. tostring(body) .. "\n" .. gw:log_tail(40))
    return body
end


describe("zkcoord.ngx.client from coroutines at once #ngx", function()
    local gw, late, port

    before_each(function()
        port = assert(proc.free_port())
        gw = start_racing(port)
    end)

    after_each(function()
        if late then late:stop() end
        if gw then gw:destroy() end
        late, gw = nil, nil
    end)

    it("two timers while the server refuses: each call answered within the connect timeout, "
       .. "both get the client once the server is up", function()
        -- nobody listens on the port until UP: refused, then our server
        late = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)")),
                                     { port = port, after = UP }))
        local t0 = proc.now()
        assert.equal(200, (gw:get("/race?n=2", 5)))
        local body = race_runs(gw, 2, GIVE_UP + 2 * CT)
        print(("\n%d callers, connect_timeout %g s, server up after %g s (%.2f s after the race "
               .. "began here):\n%s"):format(2, CT, UP, proc.now() - t0, body))
        local clients = {}
        for line in body:gmatch("[^\n]+") do
            local i, c, at, calls = line:match("^(%d+)|([^|]*)|([%d.]+)|(.*)$")
            assert.truthy(i, line)
            clients[#clients + 1] = c
            for took, answer in calls:gmatch("([%d.]+)=([^;]*)") do
                -- one connect runs for every caller: none waits for two
                assert.truthy(tonumber(took) <= CT + MARGIN,
                              ("caller %s: a call took %s s (%s): %s"):format(i, took, answer, line))
                if answer ~= "client" then
                    assert.equal("connectionloss connection refused by 127.0.0.1:" .. port,
                                 answer, line)
                end
            end
            assert.truthy(c:find("^table: "), "caller " .. i .. " got no client: " .. line)
            assert.truthy(tonumber(at) <= UP + CT + MARGIN, line)
        end
        assert.equal(2, #clients)
        assert.equal(clients[1], clients[2], "one client per worker")
        assert.falsy(gw:error_log():find("lua entry thread aborted", 1, true), gw:log_tail(40))
    end)

    it("a connect its aborted request left is taken over past its bound: the worker goes on "
       .. "(it spun on a sub-millisecond semaphore wait), both timers get a client", function()
        -- the longest a live connect takes (zkcoord/ngx.lua attempt_bound):
        -- connect_timeout, a probe, a second (no credentials, no chroot)
        local bound = CT + 0.25 + 1
        local t0 = proc.now()
        local batch = gw:fire({ "/connect" }, 30)
        assert.truthy(zk.wait_until(function()
            return select(2, gw:get("/asked", 5)) == "true\n"
        end, 5), "the request did not start its connect")
        batch:abort()                 -- its coroutine is dropped mid-connect
        late = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)")),
                                     { port = port }))
        assert.equal(200, (gw:get("/race?n=2", 5)))
        local body = race_runs(gw, 2, bound + 2 * CT)
        print(("\nafter an aborted connect (bound %.2f s, connect_timeout %g s): %.2f s\n%s")
              :format(bound, CT, proc.now() - t0, body))
        local clients = {}
        for line in body:gmatch("[^\n]+") do
            local i, c, at = line:match("^(%d+)|([^|]*)|([%d.]+)|")
            assert.truthy(c and c:find("^table: "), "caller " .. tostring(i) .. ": " .. line)
            assert.truthy(tonumber(at) <= bound + CT + MARGIN, line)
            clients[#clients + 1] = c
        end
        assert.equal(clients[1], clients[2], "one client per worker")
    end)
end)
