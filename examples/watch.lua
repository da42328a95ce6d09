-- watch.lua: print every value of a node as it changes.
--
--   luajit examples/watch.lua                      demo: writes a few values itself (~2 s)
--   luajit examples/watch.lua /config/db 10        wait for 10 updates (at most 60 s)
--   luajit examples/watch.lua /config/db 30s       run for 30 seconds
--
-- Try it with a second shell writing to the node, e.g. zkCli.sh `set /config/db x`.
-- args: [path] [count | <seconds>s]      ZKCOORD_SERVERS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local top = here .. "/.."
package.path = top .. "/lua/?.lua;" .. top .. "/lua/?/init.lua;" .. package.path
package.cpath = top .. "/lua/?.so;" .. package.cpath

local zkcoord = require "zkcoord"

local path = arg and arg[1] or "/zkcoord-demo/watch"
local limit = arg and arg[2]
local demo = arg == nil or arg[1] == nil
local max_updates, seconds = nil, 3
if limit then
    local s = limit:match("^(%d+%.?%d*)s$")
    if s then
        seconds = tonumber(s)
    else
        max_updates = assert(tonumber(limit), "second argument: a count or <seconds>s")
        seconds = 60
    end
end

local hosts = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local client, err, detail = zkcoord.connect { servers = hosts }
if not client then
    print("connect failed: " .. tostring(err) .. " " .. tostring(detail))
    os.exit(1)
end

local updates = 0
local function show(data, stat)
    if data == nil then
        print(("%s: (does not exist)"):format(path))
    else
        print(("%s = %q (version %d)"):format(path, data, stat.version))
    end
end

-- fn runs once now with the current state, then on every change.
print(("watching %s on %s"):format(path, hosts))
local w, werr = client:watch(path, function(data, stat)
    show(data, stat)
    updates = updates + 1
end)
if not w then
    print("watch failed: " .. tostring(werr))
    client:close()
    os.exit(1)
end
updates = 0      -- the first call was the current state, not an update

local deadline = zkcoord.now() + seconds
if demo then
    -- No writer around: be our own, from a second session.
    local writer = assert(zkcoord.connect { servers = hosts })
    if not writer:exists(path) then
        writer:create(path, "initial", { parents = true })
        client:dispatch(0.2)
    end
    for i = 1, 4 do
        writer:set(path, "value " .. i)
        client:dispatch(0.15)
    end
    -- Rapid writes: the watch may fold some, but always ends on the latest.
    for i = 5, 9 do
        writer:set(path, "value " .. i)
    end
    client:dispatch(0.3)
    writer:delete(path)
    client:dispatch(0.2)
    writer:create(path, "back again")
    client:dispatch(0.2)
    writer:delete(path)
    writer:close()
    client:dispatch(0.2)
else
    while zkcoord.now() < deadline and not (max_updates and updates >= max_updates) do
        client:dispatch(0.1)
    end
end

print(("%d updates seen; cancelling"):format(updates))
w:cancel()
client:close()
