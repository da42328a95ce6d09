-- zkcoord.ngx.client() called by several coroutines of one nginx worker at
-- once while ZooKeeper refuses, then comes up: each call is answered by the
-- one connect running (within its connect timeout), and each caller has the
-- worker's client soon after the server is up. Was: a caller waiting on the
-- running connect took it over at its connect timeout (which a failing
-- connect always reaches), closed its client and started again (the n-th
-- caller answered after n connect timeouts); and a caller waiting past a
-- connect's deadline could spin the worker for ever on a semaphore wait of
-- under a millisecond (service_discovery_spec's gateway worker that said
-- nothing).
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local nginx = require "helpers.nginx"
local tcpproxy = require "helpers.tcpproxy"

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
local APP = [==[
local zn = require "zkcoord.ngx"
local zkcoord = require "zkcoord"
local now = zkcoord.now
local _M = {}
local runs = {}
local OPTS = { servers = "127.0.0.1:@ZKPORT@", connect_timeout = @CT@,
               session_timeout = @ST@, request_timeout = @CT@ }
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


local function start_gateway(port)
    return assert(nginx.start {
        workers = 1,
        vars = { ZKPORT = port, CT = CT, ST = zk.SESSION_TIMEOUT, GIVE_UP = GIVE_UP },
        lua_modules = { app = APP },
        http = [[
            server {
                listen 127.0.0.1:@PORT@;
                location = /race { content_by_lua_block { require("app").race() } }
                location = /runs { content_by_lua_block { require("app").runs() } }
                location = /asked { content_by_lua_block { require("app").asked() } }
                location = /connect {
                    lua_check_client_abort on;
                    content_by_lua_block { require("app").connect() }
                }
            }
        ]],
    })
end


-- The callers' lines from /runs once there are n (the worker must answer).
local function runs(gw, n, timeout)
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
        gw = start_gateway(port)
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
        local body = runs(gw, 2, GIVE_UP + 2 * CT)
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
        -- connect_timeout twice, a probe, request_timeout (= CT here)
        local bound = 3 * CT + 0.25
        local t0 = proc.now()
        local batch = gw:fire({ "/connect" }, 30)
        assert.truthy(zk.wait_until(function()
            return select(2, gw:get("/asked", 5)) == "true\n"
        end, 5), "the request did not start its connect")
        batch:abort()                 -- its coroutine is dropped mid-connect
        late = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)")),
                                     { port = port }))
        assert.equal(200, (gw:get("/race?n=2", 5)))
        local body = runs(gw, 2, bound + 2 * CT)
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
