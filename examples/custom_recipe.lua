-- custom_recipe.lua: write your own coordination pattern as drivers on
-- zkcoord.line.
--
-- The pattern: "at most K workers run this job at once, in arrival order".
-- zkcoord.line gives every participant a place in a line (a sequential
-- node, found again after a lost reply, deleted on every failure path);
-- the recipe is a driver: how its nodes are named (a marker), what they
-- are (mode: ephemeral here, "persistent" or "ttl" for nodes that outlive
-- their session: examples/ttl_lease.lua), and a rule function saying when a
-- place is through and what to wait for otherwise: one node (no herd), or
-- line.ANY (any change). line.driver checks a driver once; any number of
-- positions share it.
--
--   luajit examples/custom_recipe.lua                one process (~1 s), three sessions
--   for i in 1 2 3 4; do luajit examples/custom_recipe.lua w$i & done; wait
--                                                    four workers, two at a time
-- args: [worker id] [job path]      ZKCOORD_SERVERS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local top = here .. "/.."
package.path = top .. "/lua/?.lua;" .. top .. "/lua/?/init.lua;" .. package.path
package.cpath = top .. "/lua/?.so;" .. package.cpath

local zkcoord = require "zkcoord"
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"

local id = arg and arg[1]
local path = arg and arg[2] or "/zkcoord-demo/job-slots"
local hosts = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local K = 2


-- The recipe (Curator's semaphore scheme), as two drivers. Any of the K
-- runners may finish first, so a waiter must wake on ANY change of the
-- runners' line; to keep that to one waiter (no herd), waiters first queue
-- for a fair lock (rules.first: each watches only the node below its own),
-- and only the lock holder waits on the runners' line. A rule gets the
-- entries in line order ({ name =, path =, seq =, marker = }) and `me`,
-- our index among them.
local LOCK = line.driver { marker = "lock-", rule = rules.first }
local RUNNERS = line.driver { marker = "run-", rule = function(entries)
    return #entries <= K or line.ANY
end }

local function job_slots(client, job_path, name)
    local lock = line.new(client, job_path .. "/locks", LOCK)
    local runners = line.new(client, job_path .. "/runners", RUNNERS, name)   -- data: our name
    local slot = {}
    function slot.take(timeout)            -- true | nil, "timeout" | nil, err
        local deadline = timeout and client:waiter():now() + timeout
        local ok, err = lock:enter(timeout)
        if ok then
            ok, err = runners:enter(deadline and math.max(0, deadline - client:waiter():now()))
            lock:leave()                   -- the next waiter may now wait on the runners
        end
        return ok, err
    end
    function slot.give_back() return runners:leave() end
    function slot.running() return runners:is_through() end
    function slot.line() return runners:entries() end
    runners:on_lost(function(reason)       -- session expired or node deleted while running
        print(name .. ": slot lost (" .. reason .. "): stop the job")
    end)
    return slot
end


local function connect()
    local c, err, detail = zkcoord.connect { servers = hosts }
    if not c then
        print("connect failed: " .. tostring(err) .. " " .. tostring(detail))
        os.exit(1)
    end
    return c
end

if id then
    -- One of several worker processes.
    local client = connect()
    local slot = job_slots(client, path, id)
    local ok, err = slot.take(15)
    if ok then
        print(("%s: running the job (%d running)"):format(id, #assert(slot.line())))
        client:waiter():sleep(0.5)
        print(id .. ": finished")
        slot.give_back()
    else
        print(id .. ": no slot: " .. tostring(err))
    end
    client:close()
    return
end

-- Alone: three sessions in this process, K = 2 slots.
local a, b, c = connect(), connect(), connect()
local sa, sb, sc = job_slots(a, path, "a"), job_slots(b, path, "b"), job_slots(c, path, "c")
print("a takes a slot: ", sa.take(5))
print("b takes a slot: ", sb.take(5))
local running = assert(sa.line())
print(("running: %d workers, first %s"):format(#running, running[1] and running[1].name or "-"))
print("c tries once: ", sc.take(0))               -- nil, "timeout": both slots busy
print("c waits 0.3 s: ", sc.take(0.3))            -- nil, "timeout"
sb.give_back()                                    -- b (not the lowest) leaves first
print("b gave its slot back")
print("c takes a slot: ", sc.take(5))             -- at once: any runner leaving wakes c
print("running: a=" .. tostring(sa.running()) .. " b=" .. tostring(sb.running())
      .. " c=" .. tostring(sc.running()))
sa.give_back()
sc.give_back()
a:close()
b:close()
c:close()
