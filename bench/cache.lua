-- bench/cache.lua: what a tree cache (client:cache) costs per node.
--
--   luajit bench/cache.lua [--sizes 1000,10000] [--sets 200] [--servers HOSTS]
--
-- For each size N it creates a tree of N nodes under a fresh namespace (a
-- root, N/100 groups, 100 leaves per group, 32 bytes of data each), then in
-- a second client measures:
--   * the initial load: the time client:cache(root) takes to return, next
--     to the same reads (get and children of each node) sent by a client
--     that knows every path: without watches, 1,000 in flight, and with a
--     watch each, all in flight (the server's and the connection's share);
--   * memory: collectgarbage("count") after a full collection, before the
--     cache and after it (the difference / N: Lua heap per cached node,
--     the client's watch entries included; the C client's own memory is not
--     in the Lua heap);
-- and once, on the smallest tree, the latency from a set() sent by another
-- client to the "updated" event in the caching client (p50 / p99 over
-- --sets sets, one at a time).
--
-- Servers: --servers, else $ZK_HOSTS, else a private standalone server
-- (spec/helpers/zkserver) stopped at the end.
local root = (arg and arg[0] or ""):match("^(.*)/bench/[^/]*$") or "."
package.path = root .. "/spec/?.lua;" .. package.path
local tool = require "helpers.tool"
tool.paths(root)

local zkcoord = require "zkcoord"
local now = zkcoord.now

local options = require "helpers.options"

-- "1000,10000" -> { 1000, 10000 }
local function sizes(text)
    local list = {}
    for n in text:gmatch("%d+") do list[#list + 1] = tonumber(n) end
    return list
end

local opts = options.parse(arg, {
    name = "cache.lua",
    usage = "usage: luajit bench/cache.lua [--sizes 1000,10000] [--sets 200] [--servers HOSTS]",
    defaults = { sizes = { 1000, 10000 }, sets = 200 },
    options = { ["--sizes"] = sizes, ["--sets"] = "number", ["--servers"] = "string" },
})

local hosts, server = tool.servers(opts.servers, "cache.lua")

local writer = assert(zkcoord.connect { servers = hosts, session_timeout = 10 })
local ns = ("/bench-cache-%d"):format(os.time())
assert(writer:create(ns))

local DATA = ("x"):rep(32)

-- N nodes: the root, groups, leaves (pipelined creates, 1,000 in flight).
local function make_tree(path, n)
    local paths = { path }
    local groups = math.max(1, math.floor(n / 100))
    for g = 1, groups do
        paths[#paths + 1] = ("%s/g%03d"):format(path, g)
    end
    local g = 0
    while #paths < n do
        g = g % groups + 1
        paths[#paths + 1] = ("%s/g%03d/n%05d"):format(path, g, #paths)
    end
    local fs = {}
    for i, p in ipairs(paths) do
        fs[#fs + 1] = writer:send("create", p, DATA)
        if #fs == 1000 or i == #paths then
            for _, f in ipairs(fs) do assert(f:wait()) end
            fs = {}
        end
    end
    return paths
end

local function heap_kib()
    collectgarbage()
    collectgarbage()
    return collectgarbage("count")
end

local function pct(sorted, p)
    return sorted[math.max(1, math.ceil(#sorted * p))]
end

print(("zkcoord %s, %s, servers %s"):format(zkcoord.version, jit and jit.version or _VERSION,
                                            hosts))
for k, n in ipairs(opts.sizes) do
    local path = ("%s/t%d"):format(ns, k)
    local paths = make_tree(path, n)
    -- References: the same reads (get and children of every node) by a
    -- client that knows every path: without watches, 1,000 in flight; with
    -- a watch each, all in flight (as the cache sends a level).
    local function reads(watch, window)
        local ref = assert(zkcoord.connect { servers = hosts, session_timeout = 10 })
        local r0 = now()
        local fs = {}
        for i, p in ipairs(paths) do
            fs[#fs + 1] = ref:send("get", p, watch)
            fs[#fs + 1] = ref:send("children", p, watch)
            if #fs >= window or i == #paths then
                for _, f in ipairs(fs) do assert(f:wait()) end
                fs = {}
            end
        end
        local t = now() - r0
        ref:close()
        return t
    end
    local raw = reads(nil, 1000)
    local raw_watched = reads(function() end, math.huge)
    local reader = assert(zkcoord.connect { servers = hosts, session_timeout = 10 })
    local before = heap_kib()
    local t0 = now()
    local cache, err = reader:cache(path, { timeout = 120 })
    local load = now() - t0
    assert(cache, "cache failed: " .. tostring(err))
    local after = heap_kib()
    assert(#assert(cache:children(path .. "/g001")) > 0)
    local per_node = (after - before) * 1024 / #paths
    print(("%6d nodes: initial load %.0f ms (%.0f us/node); the same reads without a cache: "
           .. "%.0f ms, with watches %.0f ms; Lua heap +%.0f KiB = %.0f bytes/node, %d watches")
          :format(#paths, load * 1000, load * 1e6 / #paths, raw * 1000, raw_watched * 1000,
                  after - before, per_node, reader:stats().watches))

    if k == 1 and opts.sets > 0 then
        -- set() on the writer -> "updated" in the reader
        local target = paths[#paths]
        local ev, seen
        cache:on_change(function(e)
            if e.type == "updated" and e.path == target and ev then
                seen = now()
                ev:set()
            end
        end)
        local lat = {}
        for i = 1, opts.sets do
            ev = reader:waiter():event()
            seen = nil
            local s0 = now()
            local f = writer:send("set", target, tostring(i))
            assert(ev:wait(5), "no updated event")
            assert(f:wait())
            lat[#lat + 1] = (seen - s0) * 1000
        end
        table.sort(lat)
        print(("set() -> \"updated\" over %d sets: p50 %.2f ms, p99 %.2f ms, max %.2f ms")
              :format(#lat, pct(lat, 0.5), pct(lat, 0.99), lat[#lat]))
    end
    local c0 = now()
    cache:close()
    print(("%6d nodes: close() %.0f ms, %d watches left"):format(#paths, (now() - c0) * 1000,
                                                              reader:stats().watches))
    reader:close()
end

local function delete_tree(p)
    local names = writer:children(p) or {}
    for _, name in ipairs(names) do delete_tree(p .. "/" .. name) end
    writer:delete(p)
end
delete_tree(ns)
writer:close()
if server then
    server:destroy()
end
