-- ttl_lease.lua: a lease that outlives its holder for a while, written as a
-- driver on zkcoord.line, in one file.
--
-- At most `k` holders at once (default 1), in arrival order. A holder's
-- node is a persistent-sequential TTL node (driver mode "ttl"): it stays
-- through the holder's session loss, and even its crash, and the server
-- deletes it once nobody wrote it for `ttl` seconds. A live holder calls
-- renew() well within the TTL; a holder that stops renewing (it died, it
-- hangs) keeps the lease for `ttl` more seconds, plus up to the server's
-- TTL check period (znode.container.checkIntervalMs, 60 s by default):
-- until then nobody else gets it. That is the point: a job whose effects
-- outlive the process that ran it (a half-sent batch, a mounted volume) is
-- not started again before the lease is surely gone, whatever happened to
-- the holder's session. An ephemeral lock (client:lock) frees at once.
--
-- The driver is all there is to it: the marker names the nodes, mode and
-- ttl make them TTL nodes, the rule is rules.first for one holder (each
-- waiter watches the node below its own: a lease that ends wakes one) or
-- rules.fewer_than(k). The engine does the rest: the pipelined create,
-- finding our node by its uuid after a lost reply (by the uuid alone: no
-- session owns a TTL node), the guaranteed delete on release or timeout.
-- The servers need zookeeper.extendedTypesEnabled=true (TTL nodes);
-- spec/ttl_lease_spec.lua runs this file against a real one.
--
--   luajit examples/ttl_lease.lua [path] [wait]   two sessions; b waits at
--        most `wait` seconds (default 75) for the lease of a, which "dies"
-- ZKCOORD_SERVERS (default 127.0.0.1:2181), LEASE_TTL (seconds, default 2)
local as_module = (...) == "module"    -- spec: loadfile(this)("module")
if not as_module then
    local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
    local top = here .. "/.."
    package.path = top .. "/lua/?.lua;" .. top .. "/lua/?/init.lua;" .. package.path
    package.cpath = top .. "/lua/?.so;" .. package.cpath
end

local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"

local ttl_lease = {}
local Lease = {}
Lease.__index = Lease


--- ttl_lease.new(client, path, { ttl = seconds, k = 1, data = "..." })
function ttl_lease.new(client, path, opts)
    local k = opts.k or 1
    return setmetatable({
        client = client,
        path = path,
        data = opts.data or "",
        driver = line.driver {
            marker = "lease-",
            mode = "ttl",
            ttl = opts.ttl,
            rule = k == 1 and rules.first or rules.fewer_than(k),
        },
        q = nil,              -- our place in the line while we hold the lease
        lost_fns = {},
    }, Lease)
end


-- The position reported a loss: someone deleted our node, or its TTL ran
-- out (we renewed too late). Static: the lease is the on_lost argument.
local function lost(reason, self)
    for _, fn in ipairs(self.lost_fns) do
        fn(reason)
    end
end


--- Waits for the lease at most `timeout` seconds (nil: no limit, 0: once).
---@return true|nil ok, string? err "timeout" | "closed" | a ZooKeeper code
function Lease:acquire(timeout)
    if self:held() then
        return true
    end
    local q = line.new(self.client, self.path, self.driver, self.data)
    q:on_lost(lost, self)
    local ok, err = q:enter(timeout)
    if not ok then
        return nil, err
    end
    self.q = q
    return true
end


--- Writes the node again: the server counts the TTL from the last write.
---@return true|nil ok, string? err "notheld" | "lost" (the TTL ran out) | a code
function Lease:renew()
    local q = self.q
    if not q then
        return nil, "notheld"
    elseif not q:is_through() then
        self.q = nil           -- reported to on_lost already (or the client closed)
        q:leave()
        return nil, "lost"
    end
    local stat, err = self.client:set(q:node(), self.data)
    if stat then
        return true
    elseif err == "nonode" then
        self.q = nil
        q:leave()
        return nil, "lost"
    end
    return nil, err    -- e.g. connectionloss: try again, within the TTL
end


--- Gives the lease back at once (the delete is guaranteed, not waited for).
function Lease:release()
    local q = self.q
    if not q then
        return nil, "notheld"
    end
    self.q = nil
    q:leave()
    return true
end


--- Do we hold it? True across a session loss: the node outlives sessions.
function Lease:held()
    return self.q ~= nil and self.q:is_through()
end


function Lease:node()
    return self.q and self.q:node()
end


--- fn(reason) when a held lease ends without release(): "deleted".
function Lease:on_lost(fn)
    self.lost_fns[#self.lost_fns + 1] = fn
end


if as_module then
    return ttl_lease
end


-- The demo: a takes the lease and renews it; b waits; a "dies" (its client
-- closes without releasing) and b gets the lease once a's TTL has run out.
local zkcoord = require "zkcoord"
local hosts = os.getenv("ZKCOORD_SERVERS") or "127.0.0.1:2181"
local path = arg and arg[1] or "/zkcoord-demo/ttl-lease"
local wait = tonumber(arg and arg[2]) or 75
local ttl = tonumber(os.getenv("LEASE_TTL")) or 2

local function connect()
    local c, err, detail = zkcoord.connect { servers = hosts }
    if not c then
        print("connect failed: " .. tostring(err) .. " " .. tostring(detail))
        os.exit(1)
    end
    return c
end

local a, b = connect(), connect()
local la = ttl_lease.new(a, path, { ttl = ttl, data = "a" })
local lb = ttl_lease.new(b, path, { ttl = ttl, data = "b" })
local ok, err = la:acquire(5)
print("a takes the lease:", ok, err)
if not ok then
    print("(TTL nodes need zookeeper.extendedTypesEnabled=true on the servers)")
    os.exit(1)
end
print("b tries for 0.25 TTL:", lb:acquire(ttl / 4))   -- nil, "timeout"
for _ = 1, 6 do                                        -- 1.5 TTLs, renewed 4 times a TTL
    assert(la:renew())
    a:waiter():sleep(ttl / 4)
end
assert(la:renew())
print("a renewed; b tries once:", lb:acquire(0))       -- nil, "timeout": still a's
local node = la:node()
a:close()                                              -- a "dies" without releasing
print("a's client closed; its node is still there:", b:exists(node) ~= false)
local t0 = zkcoord.now()
ok, err = lb:acquire(wait)
print(("b takes the lease after %.1f s:"):format(zkcoord.now() - t0), ok, err)
lb:release()
b:close()
print(ok and "done" or "failed")
os.exit(ok and 0 or 1)
