-- bench/semaphore_idle.lua: how long a k-of-n slot stays free while
-- someone waits.
--
--   luajit bench/semaphore_idle.lua [--kind semaphore|rule] [--n N] [--workers W]
--                                   [--rounds R] [--long S] [--servers HOSTS]
--
-- W worker processes share N slots (client:semaphore, or one line with
-- queue.rule_fewer_than(N) for --kind rule). Worker 1 holds --long seconds
-- (default 2) each round, the others 20-100 ms; each does --rounds rounds
-- (worker 1 a quarter of them). Prints the longest time a slot stayed free
-- while a worker waited, the share of the run spent so, and the most
-- holders seen at once (spec/helpers/slots.lua replays the logs).
-- Servers: --servers, else $ZK_HOSTS, else a private standalone server.
local root = (arg and arg[0] or ""):match("^(.*)/bench/[^/]*$") or "."
package.path = root .. "/spec/?.lua;" .. package.path
require("helpers.tool").paths(root)

local proc = require "helpers.proc"
local slots = require "helpers.slots"

local opts = require("helpers.options").parse(arg, {
    name = "semaphore_idle.lua",
    usage = "usage: luajit bench/semaphore_idle.lua [--kind semaphore|rule] [--n N]"
        .. " [--workers W] [--rounds R] [--long S] [--servers HOSTS]",
    status = 64,
    defaults = { kind = "semaphore", n = 2, workers = 6, rounds = 20, long = 2 },
    options = { ["--kind"] = "string", ["--n"] = "number", ["--workers"] = "number",
                ["--rounds"] = "number", ["--long"] = "number", ["--servers"] = "string" },
})

local hosts, server = require("helpers.tool").servers(opts.servers, "semaphore_idle.lua")

local dir = proc.mktemp_dir("zkcoord-idle")
local script = dir .. "/worker.lua"
assert(proc.write_file(script, slots.WORKER))
local env = {
    LUA_PATH = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;;",
    LUA_CPATH = root .. "/" .. (os.getenv("ZKCOORD_CPATH") or "lua/?.so") .. ";;",
    ZK_HOSTS = hosts,
}
local path = ("/zkcoord-idle-%d-%d"):format(proc.getpid(), os.time())
local pids, logs = {}, {}
for w = 1, opts.workers do
    logs[w] = ("%s/w%d.log"):format(dir, w)
    local rounds = w == 1 and math.max(1, math.floor(opts.rounds / 4)) or opts.rounds
    pids[w] = assert(proc.spawn({ "luajit", script, path, "w" .. w, tostring(opts.n),
                                  tostring(rounds), tostring(w == 1 and opts.long or 0),
                                  opts.kind }, { stdout = logs[w], stderr = logs[w], env = env }))
end
local ok = true
for w, pid in ipairs(pids) do
    if not proc.wait_exit(pid, 300) then
        io.stderr:write("worker ", w, " did not finish\n")
        proc.kill(pid, "KILL")
        ok = false
    end
end
local r = slots.analyze(logs, opts.n)
print(("kind %s, %d slots, %d workers (one holds %.1f s): %d grants in %.1f s, "
       .. "at most %d holders, %d errors"):format(opts.kind, opts.n, opts.workers, opts.long,
                                                 r.grants, r.span, r.max_holders, r.errors))
print(("longest free-while-waiting %.3f s (%d over 0.5 s); free while someone waited %.1f %% "
       .. "of the run"):format(r.max_idle, r.long_idles, 100 * r.idle_share))
proc.rm_rf(dir)
if server then
    server:stop()
end
os.exit(ok and r.errors == 0 and 0 or 1)
