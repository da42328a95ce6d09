-- bench/handoff.lua: one hot lock in one process, before and after (issue 30).
--
--   luajit bench/handoff.lua [--waiters 500,2000,4000] [--before REV] [--rounds R]
--                            [--servers HOSTS] [--bound S]
--
-- N coroutines of one process, on one session, wait on one plain lock
-- held by a second session of the same process; then the holder releases
-- and every coroutine takes the lock once and releases it. Reports, per N:
-- the time per handoff (release of the holder to the N-th grant, over N),
-- the time the N joins took, and the listings (children requests) the
-- waiters' session sent for the joins and for the handoffs
-- (client:stats().requests; "-" for a library without that count).
-- --before REV runs the same with the library of git revision REV (its
-- lua/ extracted to a temporary directory, this checkout's core), in the
-- same run, alternating with this checkout's, R rounds each; the load
-- average is printed before and after. Each measurement runs in a child
-- process (a fresh heap and session), bounded by --bound seconds.
local root = (arg and arg[0] or ""):match("^(.*)/bench/[^/]*$") or "."
package.path = root .. "/spec/?.lua;" .. package.path

local function child(lib, hosts, n, bound)
    package.path = lib .. "/?.lua;" .. lib .. "/?/init.lua;" .. package.path
    package.cpath = root .. "/lua/?.so;" .. package.cpath
    local zkcoord = require "zkcoord"
    local now = require("zkcoord.core").now
    local c = assert(zkcoord.connect { servers = hosts, session_timeout = 30 })
    local h = assert(zkcoord.connect { servers = hosts, session_timeout = 30 })
    local path = "/handoff/" .. require("zkcoord.line").uuid()
    local holder = h:lock(path)
    assert(holder:acquire(10))
    local function listings()
        local r = c:stats().requests
        return r and (r.children or 0)
    end
    local l0 = listings()
    local served, t_last = 0, nil
    local t_join = now()
    for _ = 1, n do
        c:spawn(function()
            local l = c:lock(path)
            assert(l:acquire(bound))
            served = served + 1
            t_last = now()
            l:release()
        end)
    end
    local deadline = now() + bound
    while now() < deadline do
        c:run(0.05)
        local kids = h:children(path)
        if kids and #kids == n + 1 and c:stats().pending == 0 then
            break
        end
    end
    local join_s = now() - t_join
    local l1 = listings()
    local t0 = now()
    holder:release()
    assert(c:run(bound), "not all served within the bound")
    assert(served == n)
    local l2 = listings()
    local total = t_last - t0
    io.write(("ok total_s=%.3f per_ms=%.3f join_s=%.2f join_listings=%s handoff_listings=%s\n")
             :format(total, total / n * 1000, join_s, l1 and tostring(l1 - l0) or "-",
                     l2 and tostring(l2 - l1) or "-"))
    c:close()
    h:close()
end

if arg[1] == "--child" then
    child(arg[2], arg[3], tonumber(arg[4]), tonumber(arg[5]))
    os.exit(0)
end

require("helpers.tool").paths(root)
local proc = require "helpers.proc"
local opts = require("helpers.options").parse(arg, {
    name = "handoff.lua",
    usage = "usage: luajit bench/handoff.lua [--waiters 500,2000,4000] [--before REV]"
        .. " [--rounds R] [--servers HOSTS] [--bound S]",
    status = 64,
    defaults = { waiters = "500,2000,4000", rounds = 1, bound = 300 },
    options = { ["--waiters"] = "string", ["--before"] = "string", ["--rounds"] = "number",
                ["--servers"] = "string", ["--bound"] = "number" },
})

local function loadavg()
    local f = io.open("/proc/loadavg")
    local s = f and f:read("*l") or "?"
    if f then f:close() end
    return s:match("^(%S+ %S+ %S+)") or s
end

local sh = proc.shquote

local hosts, server = require("helpers.tool").servers(opts.servers, "handoff.lua",
                                                      { extra = { "maxClientCnxns=0" } })
local libs = { { name = "this checkout", dir = root .. "/lua" } }
local tmp
if opts.before then
    tmp = assert(proc.mktemp_dir("zkcoord-handoff-"))
    os.execute(("git -C %s archive %s lua | tar -x -C %s"):format(sh(root), sh(opts.before),
                                                                  sh(tmp)))
    assert(io.open(tmp .. "/lua/zkcoord/line.lua"), "could not extract " .. opts.before)
    table.insert(libs, 1, { name = opts.before, dir = tmp .. "/lua" })
end
local LUAJIT = arg[-1] or "luajit"

print(("load average before: %s"):format(loadavg()))
print("| library | waiters | per handoff (ms) | all served after (s) | joins took (s) "
      .. "| listings for the joins | listings for the handoffs |")
print("|---|---|---|---|---|---|---|")
for n in opts.waiters:gmatch("%d+") do
    for _ = 1, opts.rounds do
        for _, lib in ipairs(libs) do
            local cmd = ("timeout %d %s %s --child %s %s %s %d 2>&1"):format(
                opts.bound * 2 + 30, sh(LUAJIT), sh(root .. "/bench/handoff.lua"), sh(lib.dir),
                sh(hosts), tonumber(n), opts.bound)
            local p = io.popen(cmd)
            local out = p:read("*a")
            p:close()
            local r = {}
            for k, v in out:gmatch("([%w_]+)=(%S+)") do r[k] = v end
            if out:match("^ok") then
                print(("| %s | %s | %.2f | %.2f | %.1f | %s | %s |"):format(lib.name, n,
                      tonumber(r.per_ms), tonumber(r.total_s), tonumber(r.join_s),
                      r.join_listings, r.handoff_listings))
            else
                -- the child's last words (a failed waiter logs a traceback each)
                local last = out:match("([^\n]+)\n*$") or ""
                local lost = out:match("session lost %(([^)]*)%)")
                print(("| %s | %s | failed: %s%s |"):format(lib.name, n, last,
                      lost and ("; session lost: " .. lost) or ""))
            end
            io.stdout:flush()
        end
    end
end
print(("load average after: %s"):format(loadavg()))
if tmp then
    proc.rm_rf(tmp)
end
if server then
    server:destroy()
end
