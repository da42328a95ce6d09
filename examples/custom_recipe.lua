-- custom_recipe.lua: write your own coordination pattern with zkcoord.queue.
--
-- The pattern: "at most K workers run this job at once, in arrival order".
-- zkcoord.queue gives every participant a place in a line (an
-- ephemeral-sequential node, found again after a lost reply, deleted on
-- every failure path); the recipe only says, as a rule function, when a
-- place is through and which ONE node to watch otherwise.
--
--   luajit examples/custom_recipe.lua                one process (~1 s), three sessions
--   for i in 1 2 3 4; do luajit examples/custom_recipe.lua w$i & done; wait
--                                                    four workers, two at a time
-- args: [worker id] [job path]      ZK_HOSTS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local top = here .. "/.."
package.path = top .. "/lua/?.lua;" .. top .. "/lua/?/init.lua;" .. package.path
package.cpath = top .. "/lua/?.so;" .. package.cpath

local zkcoord = require "zkcoord"
local queue = require "zkcoord.queue"

local id = arg and arg[1]
local path = arg and arg[2] or "/zkcoord-demo/job-slots"
local hosts = os.getenv("ZK_HOSTS") or "127.0.0.1:2181"
local K = 2


-- The rule. `entries` are the participants sorted by sequence number
-- ({ name =, path =, seq =, marker = }), `me` is our index among them.
-- Return true to let us through, or the one entry whose change (or
-- deletion) could let us through: queue.lua watches just that node, so a
-- leaving worker wakes exactly one waiter, never the whole line.
local function at_most(k)
    return function(entries, me)
        if me <= k then
            return true                  -- fewer than k ahead of us: run
        end
        -- k or more ahead: when the k-th one ahead of us goes, we may be
        -- among the first k. (Any one ahead going would do; watching the
        -- k-th is what keeps every waiter on a different node.)
        return entries[me - k]
    end
end


-- The recipe: a constructor and two verbs, on the client's primitives.
local function job_slot(client, job_path, name)
    local q = queue.new(client, job_path, {
        marker = "worker-",              -- nodes: <job_path>/_c_<uuid>-worker-<seq>
        rule = at_most(K),
        data = name,                     -- who is in line, for humans and tools
    })
    q:on_lost(function(reason)           -- session expired or node deleted while running
        print(name .. ": slot lost (" .. reason .. "): stop the job")
    end)
    return {
        take = function(timeout) return q:enter(timeout) end,   -- true | nil, "timeout" | nil, err
        give_back = function() return q:leave() end,
        running = function() return q:is_through() end,
        line = function() return q:entries() end,
    }
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
    local slot = job_slot(client, path, id)
    local ok, err = slot.take(15)
    if ok then
        print(("%s: running the job (%d in line)"):format(id, #assert(slot.line())))
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
local sa, sb, sc = job_slot(a, path, "a"), job_slot(b, path, "b"), job_slot(c, path, "c")
print("a takes a slot: ", sa.take(5))
print("b takes a slot: ", sb.take(5))
local line = assert(sa.line())
print(("line: %d workers, first %s"):format(#line, line[1] and line[1].name or "-"))
print("c tries once: ", sc.take(0))               -- nil, "timeout": both slots busy
print("c waits 0.3 s: ", sc.take(0.3))            -- nil, "timeout"
sa.give_back()
print("a gave its slot back")
print("c takes a slot: ", sc.take(5))
print("running: a=" .. tostring(sa.running()) .. " b=" .. tostring(sb.running())
      .. " c=" .. tostring(sc.running()))
sb.give_back()
sc.give_back()
a:close()
b:close()
c:close()
