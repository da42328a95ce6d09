-- Light threads in nginx: client:spawn / client:run per request, run's
-- timeout, a future waited on by two threads, and a timer's light thread
-- killed while it waits for a lock.
local zk = require "helpers.zk"
local nginx = require "helpers.nginx"

-- Each handler says one line; "A ..." and "B ..." are two requests that
-- run at the same time in the one worker.
local APP = [==[
local zn = require "zkcoord.ngx"
local _M = {}
local ROOT = "@ROOT@"

function _M.init_worker()
    zn.init_worker { servers = os.getenv("ZK_HOSTS"), session_timeout = 10, sock_dir = "/tmp" }
end

local function round(t)
    return ("%.1f"):format(t)
end

-- A spawns a 0.6 s thread and runs it after 0.3 s; B (from 0.1 s) spawns
-- a short one and runs at once: each run waits for its own request's.
function _M.a()
    local c = assert(zn.client())
    local done = false
    c:spawn(function() ngx.sleep(0.6) done = true end)
    ngx.sleep(0.3)
    local ok, res = pcall(c.run, c, 5)
    ngx.say("A run=", tostring(ok), " ", tostring(res), " thread_done=", tostring(done))
end

function _M.b()
    local c = assert(zn.client())
    ngx.sleep(0.1)
    local done = false
    c:spawn(function() ngx.sleep(0.05) done = true end)
    local ok, res = pcall(c.run, c, 5)
    ngx.say("B run=", tostring(ok), " ", tostring(res), " thread_done=", tostring(done))
end

-- run(0.3) on a 1 s thread: false after 0.3 s, the thread goes on, and a
-- later run waits for it.
function _M.timeout()
    local c = assert(zn.client())
    local done = false
    c:spawn(function() ngx.sleep(1) done = true end)
    ngx.update_time()
    local t0 = ngx.now()
    local ok = c:run(0.3)
    ngx.update_time()
    local took, done_then = ngx.now() - t0, done
    local again = c:run(5)
    ngx.say("run=", tostring(ok), " took=", round(took), " done=", tostring(done_then),
            " again=", tostring(again), " done=", tostring(done))
end

-- Two light threads wait on one future: both return with the reply.
function _M.future()
    local c = assert(zn.client())
    local f = c:send("get", ROOT)
    local function waiter()
        local t0 = ngx.now()
        local data, stat = f:wait(3)
        ngx.update_time()
        return tostring(data ~= nil and stat ~= nil) .. " " .. round(ngx.now() - t0)
    end
    local t1 = ngx.thread.spawn(waiter)
    local t2 = ngx.thread.spawn(waiter)
    local _, r1 = ngx.thread.wait(t1)
    local _, r2 = ngx.thread.wait(t2)
    ngx.say("t1=", r1, " t2=", r2)
end

-- In a timer: a light thread waits for lock `name`, killed after 0.5 s.
function _M.timer_kill()
    local c = assert(zn.client())
    local l = c:lock(ROOT .. "/" .. ngx.var.arg_name)
    assert(ngx.timer.at(0, function()
        local t = ngx.thread.spawn(function() return l:acquire(30) end)
        ngx.sleep(0.5)
        ngx.thread.kill(t)
    end))
    ngx.say("started")
end

return _M
]==]

local HTTP = [[
    init_worker_by_lua_block { require("app").init_worker() }
    exit_worker_by_lua_block { require("zkcoord.ngx").exit_worker() }
    server {
        listen 127.0.0.1:@PORT@;
        location = /a { content_by_lua_block { require("app").a() } }
        location = /b { content_by_lua_block { require("app").b() } }
        location = /timeout { content_by_lua_block { require("app").timeout() } }
        location = /future { content_by_lua_block { require("app").future() } }
        location = /timer_kill { content_by_lua_block { require("app").timer_kill() } }
    }
]]

describe("light threads in nginx #zk #ngx", function()
    local root, n, admin

    lazy_setup(function()
        root = zk.new_root("ngxthreads")
        admin = zk.admin()
        n = assert(nginx.start {
            workers = 1,
            env = { ZK_HOSTS = zk.hosts() },
            vars = { ROOT = root },
            lua_modules = { app = APP },
            http = HTTP,
        })
    end)

    lazy_teardown(function()
        if n then n:destroy() end
        zk.close_clients()
        zk.delete_tree(admin, root)
    end)

    local function children(path)
        return #(admin:children(path) or {})
    end

    it("client:run waits for the threads its own request spawned", function()
        local rs = n:fire({ "/a", "/b" }):collect(10)
        assert.are.equal(200, rs[1].status, tostring(rs[1].body or rs[1].err) .. n:log_tail())
        assert.are.equal(200, rs[2].status, tostring(rs[2].body or rs[2].err) .. n:log_tail())
        assert.are.same({ "A run=true true thread_done=true\n", "B run=true true thread_done=true\n" },
                        { rs[1].body, rs[2].body })
    end)

    it("client:run(timeout) returns false at its timeout; the thread goes on", function()
        local status, body = n:get("/timeout")
        assert.are.equal(200, status, tostring(body) .. n:log_tail())
        assert.are.equal("run=false took=0.3 done=false again=true done=true\n", body)
    end)

    it("a future waited on by two light threads wakes both", function()
        local status, body = n:get("/future")
        assert.are.equal(200, status, tostring(body) .. n:log_tail())
        assert.are.equal("t1=true 0.0 t2=true 0.0\n", body)
    end)

    it("a timer's light thread killed while waiting for a lock leaves the line", function()
        local path = root .. "/tk"
        local holder = zk.client { session_timeout = 10 }:lock(path)
        assert(holder:acquire(5))
        local status, body = n:get("/timer_kill?name=tk")
        assert.are.equal(200, status, tostring(body))
        assert.truthy(zk.wait_until(function() return children(path) == 2 end, 5),
                      "the timer's thread did not queue")
        -- killed at 0.5 s; the ticker reaps within a tick
        assert.truthy(zk.wait_until(function() return children(path) == 1 end, 2),
                      "the killed thread's node is still there")
        assert(holder:release())
        local other = zk.client { session_timeout = 10 }:lock(path)
        local ok, err = other:acquire(3)
        assert.is_true(ok, tostring(err))
        assert(other:release())
    end)
end)

-- The same future fix, outside nginx: client:spawn coroutines of the
-- blocking waiter.
describe("light threads, the blocking waiter's counterpart #zk #ngx", function()
    after_each(function()
        zk.close_clients()
    end)

    it("a future waited on by two spawned coroutines wakes both", function()
        local c = zk.client {}
        local f = c:send("get", "/")
        local took = {}
        for i = 1, 2 do
            c:spawn(function()
                local t0 = c:waiter():now()
                assert(f:wait(3))
                took[i] = ("%.1f"):format(c:waiter():now() - t0)
            end)
        end
        assert.is_true(c:run(10))
        assert.are.same({ "0.0", "0.0" }, took)
    end)
end)
