-- barrier.lua: a barrier (wait until lifted) and a double barrier (start
-- together, finish together) with two helper processes started from here.
--
--   luajit examples/barrier.lua        (~3 s)
-- args: none (--participant <name> is used for the helper processes)
--   ZKCOORD_SERVERS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local top = here .. "/.."
package.path = top .. "/lua/?.lua;" .. top .. "/lua/?/init.lua;" .. package.path
package.cpath = top .. "/lua/?.so;" .. package.cpath

local zkcoord = require "zkcoord"

local hosts = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local DB_PATH = "/zkcoord-demo/double-barrier"
local N = 3

local function connect()
    local c, err, detail = zkcoord.connect { servers = hosts }
    if not c then
        print("connect failed: " .. tostring(err) .. " " .. tostring(detail))
        os.exit(1)
    end
    return c
end

local function participate(client, name, work)
    local db = client:double_barrier(DB_PATH, N, { id = name })
    print(name .. ": at the barrier")
    local ok, err = db:enter(10)
    if not ok then
        print(name .. ": enter failed: " .. tostring(err))
        return
    end
    print(name .. ": in, all " .. N .. " arrived; working " .. work .. " s")
    client:waiter():sleep(work)
    print(name .. ": leaving")
    ok, err = db:leave(10)
    print(name .. (ok and ": out, everyone is done" or (": leave failed: " .. tostring(err))))
end

if arg and arg[1] == "--participant" then
    local client = connect()
    participate(client, arg[2], tonumber(arg[3]) or 0.2)
    client:close()
    return
end

local client = connect()

-- 1. A barrier: held while its node exists.
local b = client:barrier("/zkcoord-demo/barrier")
assert(b:create())
print("barrier set; wait(0.3): ", b:wait(0.3))          -- nil, "timeout"
print("barrier removed: ", b:remove())
print("wait now: ", b:wait(1))                          -- true

-- 2. A double barrier of 3: two helper processes and us.
local luajit = arg and arg[-1] or "luajit"
local helpers = {}
for i = 1, N - 1 do
    local cmd = ("%q %q --participant helper-%d %g 2>&1"):format(luajit, arg[0], i, 0.3 * i)
    helpers[i] = assert(io.popen(cmd, "r"))
end
client:waiter():sleep(0.5)                  -- the helpers arrive first and wait for us
participate(client, "main", 0.1)
for _, f in ipairs(helpers) do
    io.write(f:read("*a"))                  -- their story (each has finished by now)
    f:close()
end
client:close()
