-- basic.lua: connect, write, read, watch, pipeline, and close.
--   ZKCOORD_SERVERS=127.0.0.1:2181 luajit examples/basic.lua
local dir = (arg and arg[0] or ""):match("^(.*)/examples/[^/]*$") or "."
package.path = dir .. "/lua/?.lua;" .. dir .. "/lua/?/init.lua;" .. package.path
package.cpath = dir .. "/lua/?.so;" .. package.cpath

local zkcoord = require "zkcoord"

local hosts = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local client, err, detail = zkcoord.connect { servers = hosts, session_timeout = 10 }
if not client then
    print("connect failed: " .. err .. " (" .. tostring(detail) .. ")")
    os.exit(1)
end
print(("connected to %s, session %s"):format(hosts, client:session_id()))

local root = "/zkcoord-demo/basic"
assert(client:create(root, "hello", { parents = true }) or true)
local data, stat = assert(client:get(root))
print(("get %s -> %q (version %d)"):format(root, data, stat.version))

-- A one-shot watch, fired by our own write.
client:get(root, function(ev)
    print(("watch: %s %s"):format(ev.type, ev.path))
end)
assert(client:set(root, "world"))
client:dispatch(0.1)

-- Errors are values: a code you can compare.
local ok, e = client:create(root)
print(("create again -> %s, %s"):format(tostring(ok), e))

-- Pipelining: 100 requests in flight, one wait each.
local t0 = zkcoord.now()
local futures = {}
for i = 1, 100 do
    futures[i] = client:send("exists", root)
end
for i = 1, 100 do
    assert(futures[i]:wait())
end
print(("100 pipelined exists in %.1f ms"):format((zkcoord.now() - t0) * 1000))

-- An ephemeral node lives as long as the session.
local eph = assert(client:create(root .. "/me-", "", { ephemeral = true, sequential = true }))
print("ephemeral node " .. eph)

assert(client:delete(eph))
assert(client:delete(root))
client:close()
print("closed")
