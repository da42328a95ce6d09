-- partitioner.lua: N partitions shared by the live members, written on zkcoord.queue.
--   luajit examples/partitioner.lua     ZK_HOSTS (default 127.0.0.1:2181)
-- Each member is an ephemeral entry that never waits (rule_always); watch_line
-- tells every member the line, in sequence order, now and after every change:
-- member i of m owns the partitions p with p % m == i - 1. (Simple, not exact:
-- for a moment two members may both think they own a partition that moves.)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../lua/?.lua;" .. here .. "/../lua/?/init.lua;" .. package.path
package.cpath = here .. "/../lua/?.so;" .. package.cpath
local zkcoord, queue = require "zkcoord", require "zkcoord.queue"

local function partitioner(client, path, partitions, id, on_change)
    local q = queue.new(client, path, { marker = "member-", rule = queue.rule_always, data = id })
    local w = assert(q:watch_line(function(entries, me)
        local owned = {}
        for p = 0, me and partitions - 1 or -1 do
            if p % #entries == me - 1 then owned[#owned + 1] = p end
        end
        on_change(owned)                         -- me == nil: not (or no longer) a member
    end))
    assert(q:enter(5))
    q:on_lost(function() q:enter(5) end)         -- session expired: join again
    return { leave = function() w:cancel(); return q:leave() end }
end

local hosts = os.getenv("ZK_HOSTS") or "127.0.0.1:2181"
local path = "/zkcoord-demo/partitions-" .. os.time()
local clients, members = {}, {}
for i, id in ipairs { "a", "b", "c" } do
    clients[i] = assert(zkcoord.connect(hosts))
    members[i] = partitioner(clients[i], path, 6, id, function(owned)
        print(id .. " owns { " .. table.concat(owned, ", ") .. " }")
    end)
end
for _, c in ipairs(clients) do c:dispatch(0.2) end   -- let every member hear the line
print("-- b leaves")
members[2].leave()
for _, c in ipairs(clients) do c:dispatch(0.2) end
for _, c in ipairs(clients) do c:close() end
