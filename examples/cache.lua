-- cache.lua: mirror a subtree in memory and print every change.
--
--   luajit examples/cache.lua                       demo: writes a few changes itself (~2 s)
--   luajit examples/cache.lua /config 30            watch /config for 30 seconds
--
-- Reads (cache:get, cache:children) come from memory: no round trip.
-- args: [path] [seconds]      ZKCOORD_SERVERS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local top = here .. "/.."
package.path = top .. "/lua/?.lua;" .. top .. "/lua/?/init.lua;" .. package.path
package.cpath = top .. "/lua/?.so;" .. package.cpath

local zkcoord = require "zkcoord"

local path = arg and arg[1] or "/zkcoord-demo/cache"
local seconds = tonumber(arg and arg[2]) or 3
local demo = arg == nil or arg[1] == nil

local hosts = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local client, err, detail = zkcoord.connect { servers = hosts }
if not client then
    print("connect failed: " .. tostring(err) .. " " .. tostring(detail))
    os.exit(1)
end

local writer
if demo then
    -- No writer around: be our own, from a second session.
    writer = assert(zkcoord.connect { servers = hosts })
    writer:create(path, "root", { parents = true })
    writer:create(path .. "/db", "host=a")
end

-- Returns once the whole subtree is loaded (or nil, err).
local cache, cerr = client:cache(path)
if not cache then
    print("cache failed: " .. tostring(cerr))
    os.exit(1)
end
print(("mirroring %s on %s: children %s"):format(path, hosts,
      table.concat(cache:children(path) or {}, ",")))

-- First the mirror as it is ("added" per node, then "initialized"), then changes.
cache:on_change(function(ev)
    if ev.type == "initialized" then
        print("-- initialized")
    else
        print(("%-8s %s %s"):format(ev.type, ev.path,
              ev.data and ("%q (version %d)"):format(ev.data, ev.stat.version) or ""))
    end
end)

if demo then
    writer:set(path .. "/db", "host=b")
    client:dispatch(0.2)
    writer:create(path .. "/db/replica", "host=c")
    client:dispatch(0.2)
    print("from memory: " .. path .. "/db = " .. tostring(cache:get(path .. "/db")))
    writer:delete(path .. "/db/replica")
    writer:delete(path .. "/db")
    client:dispatch(0.2)
    writer:delete(path)
    client:dispatch(0.2)
    writer:close()
else
    local deadline = zkcoord.now() + seconds
    while zkcoord.now() < deadline do
        client:dispatch(0.1)
    end
end

cache:close()
client:close()
