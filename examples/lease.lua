-- lease.lua: a job that runs on one host at a time, keeping to the same
-- host while it lives (kazoo's NonBlockingLease; kazoo processes share
-- these leases); then at most two hosts of three (MultiNonBlockingLease).
--   luajit examples/lease.lua     ZKCOORD_SERVERS (default 127.0.0.1:2181)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../lua/?.lua;" .. here .. "/../lua/?/init.lua;" .. package.path
package.cpath = here .. "/../lua/?.so;" .. package.cpath
local zkcoord = require "zkcoord"

local servers = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local base = "/zkcoord-demo/leases-" .. os.time()
local client = assert(zkcoord.connect { servers = servers })

-- Each host asks every run; the lease outlasts the period (70 min for an
-- hourly job), so the host that has it keeps it, and another takes over
-- only when the holder stopped renewing for a whole term.
local function hourly_run(host)
    local lease = client:lease(base .. "/cleanup", 70 * 60, { identifier = host })
    local ok, holder = lease:obtain()
    if ok then
        print(host .. ": running the cleanup, lease until " .. os.date("!%H:%M:%S", lease:ends()))
    elseif ok == false then
        print(host .. ": skipped, " .. holder.holder .. " has it")
    else
        print(host .. ": failed: " .. tostring(holder))
    end
end
hourly_run("host-a")     -- obtains it
hourly_run("host-b")     -- refused: host-a's term runs
hourly_run("host-a")     -- renews it

-- At most two hosts reindex at once.
for _, host in ipairs { "host-a", "host-b", "host-c" } do
    local ml = client:multi_lease(base .. "/reindex", 2, 600, { identifier = host })
    local ok, slot = ml:obtain()
    print(host .. " reindexes:", ok, slot)
end

-- A lease outlives sessions by design; the demo cleans up after itself.
client:delete(base, { recursive = true })
client:close()
