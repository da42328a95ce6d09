-- zkcoord.ngx.client() called by several coroutines of one nginx worker at
-- once while ZooKeeper refuses, then comes up: each call is answered by the
-- one connect running (within its connect timeout), and each caller has the
-- worker's client soon after the server is up. Was: a caller waiting on the
-- running connect took it over at its connect timeout (which a failing
-- connect always reaches), closed its client and started again, so the
-- second caller's answer came after two connect timeouts, the n-th after n.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local nginx = require "helpers.nginx"
local tcpproxy = require "helpers.tcpproxy"

local CT = 2               -- the connect timeout
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
               session_timeout = @ST@ }

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

function _M.runs()
    ngx.say(table.concat(runs, "\n"))
end

return _M
]==]


describe("zkcoord.ngx.client from coroutines at once #ngx", function()
    local gw, late, port

    setup(function()
        port = assert(proc.free_port())
        gw = assert(nginx.start {
            workers = 1,
            vars = { ZKPORT = port, CT = CT, ST = zk.SESSION_TIMEOUT, GIVE_UP = GIVE_UP },
            lua_modules = { app = APP },
            http = [[
                server {
                    listen 127.0.0.1:@PORT@;
                    location = /race { content_by_lua_block { require("app").race() } }
                    location = /runs { content_by_lua_block { require("app").runs() } }
                }
            ]],
        })
    end)

    teardown(function()
        if late then late:stop() end
        if gw then gw:destroy() end
    end)

    it("two timers while the server refuses: each call answered within the connect timeout, "
       .. "both get the client once the server is up", function()
        -- nobody listens on the port until UP: refused, then our server
        late = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)")),
                                     { port = port, after = UP }))
        local t0 = proc.now()
        assert.equal(200, (gw:get("/race?n=2", 5)))
        local body
        assert.truthy(zk.wait_until(function()
            body = select(2, gw:get("/runs", 5)) or ""
            return select(2, body:gsub("[^\n]+", "")) >= 2   -- a line per caller
        end, GIVE_UP + 2 * CT), "the callers did not end:\n" .. tostring(body)
                                .. "\n" .. gw:log_tail(40))
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
end)
