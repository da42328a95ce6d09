-- counter.lua: a shared counter; every add returns a value no other add gets.
-- Run several at once; together they add workers x count:
--   for i in 1 2 3 4; do luajit examples/counter.lua $i /zkcoord-demo/counter & done; wait
-- args: [worker id] [counter path] [count]
local dir = (arg and arg[0] or ""):match("^(.*)/examples/[^/]*$") or "."
package.path = dir .. "/lua/?.lua;" .. dir .. "/lua/?/init.lua;" .. package.path
package.cpath = dir .. "/lua/?.so;" .. package.cpath

local zkcoord = require "zkcoord"

io.stdout:setvbuf("line")   -- several run at once: show lines as they happen

local id = arg and arg[1] or "1"
local path = arg and arg[2] or "/zkcoord-demo/counter"
local count = tonumber(arg and arg[3]) or 10

local client = assert(zkcoord.connect { servers = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181" })
local counter = client:counter(path, { initial = 0 })   -- created on first use

print(("worker %s: %s is %d, adding 1 %d times"):format(id, path, assert(counter:get()), count))
local mine = {}
for _ = 1, count do
    local v, err = counter:add(1)
    if not v then
        print(("worker %s: add failed: %s"):format(id, err))
        break
    end
    mine[#mine + 1] = v
end
local s = counter:stats()
print(("worker %s: my adds returned %s"):format(id, table.concat(mine, " ")))
print(("worker %s: %d adds, %d writes tried, %d lost a race and were retried; now %d")
      :format(id, s.adds, s.cas_attempts, s.cas_failures, assert(counter:get())))
client:close()
