-- Issue 21.1 in nginx: a worker stopped (SIGSTOP, a long pause of the
-- whole process) past its session timeout while another process takes the
-- lock or the leadership its request held. On SIGCONT the request's first
-- question must already be answered "lost": libzookeeper's threads were
-- stopped too, and in nginx the library's callbacks run in a timer of
-- their own, so only the clock rule (client/session.lua) can know in time.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local nginx = require "helpers.nginx"

local TIMEOUT = 2     -- the worker's session timeout, seconds

-- /hold?kind=lock|cohort|election: takes the lock (or leadership), logs
-- "ready <pid>", then sleeps in ngx.sleep steps until the `go` file exists,
-- and then asks its questions first of all. Each answer and each callback
-- is a line of the log.
local APP = [==[
local zn = require "zkcoord.ngx"
local _M = {}
local LOG, GO = "@LOGDIR@/paused.log", "@LOGDIR@/paused.go"

local function say(s)
    local f = io.open(LOG, "a") f:write(s, "\n") f:close()
end

local function go()
    local f = io.open(GO)
    if f then f:close() end
    return f ~= nil
end

function _M.init_worker()
    zn.init_worker { servers = os.getenv("ZK_HOSTS"), session_timeout = @TIMEOUT@,
                     sock_dir = "/tmp" }
end

function _M.hold()
    local c = assert(zn.client())
    local kind = ngx.var.arg_kind
    local held, give_up
    if kind == "election" then
        local e = c:election("@ROOT@/x", { id = "worker", rejoin = false })
        e:on_lost(function(reason) say("on_lost " .. reason) end)
        assert(e:campaign(10))
        held, give_up = function() return e:is_leader() end, function() return e:resign() end
    else
        local l = c:lock("@ROOT@/x", { cohort = kind == "cohort" })
        l:on_lost(function(reason) say("on_lost " .. reason) end)
        assert(l:acquire(10))
        held, give_up = function() return l:held() end, function() return l:release() end
    end
    say("ready " .. ngx.worker.pid())
    while not go() do ngx.sleep(0.01) end
    say("held " .. tostring(held()))
    local ok, err = give_up()
    say("gave_up " .. tostring(ok) .. " " .. tostring(err))
    ngx.sleep(1)          -- the callbacks' timer has run by now
    say("done")
    ngx.say("done")
end

return _M
]==]

local HTTP = [[
    init_worker_by_lua_block { require("app").init_worker() }
    exit_worker_by_lua_block { require("zkcoord.ngx").exit_worker() }
    server {
        listen 127.0.0.1:@PORT@;
        location = /hold { content_by_lua_block { require("app").hold() } }
    }
]]

describe("an nginx worker paused past its session timeout #zk #ngx", function()
    local root, logdir, n

    before_each(function()
        root = zk.new_root("pausedngx")
        logdir = assert(proc.mktemp_dir("zkcoord-pausedngx-"))
        os.execute("chmod 1777 " .. proc.shquote(logdir))
        n = assert(nginx.start {
            workers = 1,
            env = { ZK_HOSTS = zk.hosts() },
            vars = { ROOT = root, LOGDIR = logdir, TIMEOUT = TIMEOUT },
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

    -- Starts /hold?kind=`kind`, stops the worker once it holds, lets `take`
    -- (in this process) succeed while it is stopped, then resumes it.
    -- Returns the request's log lines, its pid line taken out.
    local function pause_past_timeout(kind, take)
        local log, go = logdir .. "/paused.log", logdir .. "/paused.go"
        local batch = n:fire({ "/hold?kind=" .. kind })
        local pid
        assert.truthy(zk.wait_until(function()
            pid = tonumber((proc.read_file(log) or ""):match("ready (%d+)"))
            return pid
        end, 20), "the request never held:\n" .. n:log_tail())
        assert(proc.kill(pid, "STOP"))
        -- possible only once the server expired the stopped worker's session
        local t0 = proc.now()
        local ok, err = take()
        local stopped = proc.now() - t0
        assert.is_true(ok, tostring(err))
        assert.is_true(stopped >= TIMEOUT * 0.9, "taken after " .. stopped .. "s")
        assert(proc.write_file(go, "go"))
        assert(proc.kill(pid, "CONT"))
        local r = batch:collect(20)[1]
        assert.are.equal(200, r.status, tostring(r.body or r.err) .. "\n" .. n:log_tail())
        local out = {}
        for l in (proc.read_file(log) or ""):gmatch("[^\n]+") do
            out[#out + 1] = l:gsub("^ready %d+$", "ready")
        end
        return out
    end

    -- The callback's line may come before or after the answers (its timer
    -- runs when the request yields): exactly once, with the first news.
    local function callback_once(out, name)
        local rest, seen = {}, {}
        for _, l in ipairs(out) do
            local reason = l:match("^" .. name .. " (%S+)$")
            if reason then
                seen[#seen + 1] = reason
            else
                rest[#rest + 1] = l
            end
        end
        assert.are.equal(1, #seen, table.concat(out, "\n"))
        assert.truthy(seen[1] == "sessionexpired" or seen[1] == "deleted", seen[1])
        return rest
    end

    for _, kind in ipairs({ "lock", "cohort" }) do
        it("knows on its first held() that the lock is lost (" .. kind .. ")", function()
            local l = zk.client { chroot = root }:lock("/x")
            local out = pause_past_timeout(kind, function() return l:acquire(TIMEOUT * 10) end)
            assert.same({ "ready", "held false", "gave_up nil lost", "done" },
                        callback_once(out, "on_lost"))
            assert.is_true(l:held())
            assert.is_true(l:release())
        end)
    end

    it("knows on its first is_leader() that leadership is lost", function()
        local e = zk.client { chroot = root }:election("/x", { id = "spec" })
        local out = pause_past_timeout("election", function() return e:campaign(TIMEOUT * 10) end)
        assert.same({ "ready", "held false", "gave_up nil lost", "done" },
                    callback_once(out, "on_lost"))
        assert.is_true(e:is_leader())
        assert.is_true(e:resign())
    end)
end)
