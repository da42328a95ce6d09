-- election.lua: elect one leader among processes.
--
--   luajit examples/election.lua                 one process (~2 s): lead, resign, hand over
--   for i in 1 2 3; do luajit examples/election.lua node-$i & done; wait
--                                                each leads for a second, in turn
-- args: [id] [election path]      ZKCOORD_SERVERS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local top = here .. "/.."
package.path = top .. "/lua/?.lua;" .. top .. "/lua/?/init.lua;" .. package.path
package.cpath = top .. "/lua/?.so;" .. package.cpath

local zkcoord = require "zkcoord"

local id = arg and arg[1]
local path = arg and arg[2] or "/zkcoord-demo/election"
local hosts = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"

local function connect()
    local c, err, detail = zkcoord.connect { servers = hosts }
    if not c then
        print("connect failed: " .. tostring(err) .. " " .. tostring(detail))
        os.exit(1)
    end
    return c
end

local client = connect()
local e = client:election(path, { id = id })      -- id defaults to hostname:pid
e:on_elected(function() print(e.id .. ": elected") end)
e:on_lost(function(reason) print(e.id .. ": no longer leader (" .. reason .. ")") end)

if id then
    -- One of several processes: wait for our turn (at most 15 s), lead, step down.
    print(e.id .. ": campaigning; current leader: " .. tostring(e:leader()))
    local ok, err = e:campaign(15)
    if ok then
        for _ = 1, 5 do
            -- Real leaders check the session before each step: while
            -- "suspended" another process may be about to take over.
            if client:state() ~= "connected" or not e:is_leader() then break end
            print(e.id .. ": leading ...")
            client:waiter():sleep(0.2)
        end
        e:resign()
    else
        print(e.id .. ": not elected: " .. tostring(err))
    end
    client:close()
    return
end

-- Alone: show the whole life cycle with a second candidate in this process.
local other = connect()
local e2 = other:election(path, { id = "second-candidate" })
print("campaigning as " .. e.id)
assert(e:campaign(5))
print("leader is " .. tostring(e2:leader()))
print("second candidate, try once: ", e2:campaign(0))       -- nil, "timeout"
print("candidates: " .. table.concat(assert(e2:participants()), ", "))
e:resign()
print("second candidate, waiting up to 5 s: ", e2:campaign(5))
print("leader is " .. tostring(e:leader()))
e2:resign()
other:close()
client:close()
