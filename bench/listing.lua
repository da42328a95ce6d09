-- bench/listing.lua: CPU of one wake-up in a long line, the engine's two
-- ways, in one process (no server).
--
--   luajit bench/listing.lua [--counts 1000,10000] [--rounds R] [--children]
--                            [--servers HOSTS]
--
-- A woken waiter gets the children of the line (N names, unsorted, as
-- ZooKeeper lists them) and asks its rule. "parse + rule" is what the
-- engine does for any rule (zkcoord.line.driver's parse: a table and a path
-- per name, a sort; then our index and the rule); "scan" is its one pass
-- for the built-in rules (zkcoord.line.driver's scan). Each is timed with
-- os.clock over repetitions of one shuffled listing, for the lock's rule
-- (rules.first) and an rwlock reader's (rules.none_below over Curator's
-- read/write names, one writer in ten); R rounds interleave the two ways
-- and the median is printed. --children adds what the wake-up cannot
-- avoid: the wall time and CPU of this process for one children() round
-- trip of a line of N nodes (--servers, else $ZK_HOSTS, else a private
-- standalone server).
local root = (arg and arg[0] or ""):match("^(.*)/bench/[^/]*$") or "."
package.path = root .. "/spec/?.lua;" .. package.path
require("helpers.tool").paths(root)

local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"
local drivers = require "zkcoord.line.driver"
local now = require("helpers.proc").now

local opts = require("helpers.options").parse(arg, {
    name = "listing.lua",
    usage = "usage: luajit bench/listing.lua [--counts 1000,10000] [--rounds R] [--children]"
        .. " [--servers HOSTS]",
    status = 64,
    defaults = { counts = "1000,10000", rounds = 5 },
    options = { ["--counts"] = "string", ["--rounds"] = "number", ["--children"] = "flag",
                ["--servers"] = "string" },
})

local MARKERS = { "downgrade-__READ__", "__READ__", "__WRIT__" }
local KINDS = {
    { what = "lock (rules.first)", marker = "lock-",
      driver = line.driver { marker = "lock-", rule = rules.first },
      marker_of = function() return "lock-" end },
    { what = "rwlock reader (rules.none_below)", marker = "__READ__",
      driver = line.driver { marker = "__READ__", markers = MARKERS,
                             rule = rules.none_below("__WRIT__") },
      marker_of = function(i) return i % 10 == 0 and "__WRIT__" or "__READ__" end },
}

local PARENT = "/bench/line"

-- A shuffled listing of n nodes, and ours: the middle one.
local function listing(kind, n)
    local names = {}
    for i = 1, n do
        names[i] = ("_c_%s-%s%010d"):format(line.uuid(), kind.marker_of(i), i)
    end
    local mine = ("_c_%s-%s%010d"):format(line.uuid(), kind.marker, n + 1)
    names[#names + 1] = mine
    for i = #names, 2, -1 do
        local j = math.random(i)
        names[i], names[j] = names[j], names[i]
    end
    return names, mine
end

-- What the engine did on every wake-up before the scan, and still does
-- for a rule without one.
local function parse_rule(d, names, mine)
    local entries = drivers.parse(d, PARENT, names)
    for i = 1, #entries do
        if entries[i].name == mine then
            return d.rule(entries, i)
        end
    end
end

local function scan(d, names, mine)
    return drivers.scan(d, PARENT, names, mine)
end

-- CPU seconds per call of fn(d, names, mine), over about 0.2 s.
local function per_call(fn, d, names, mine)
    local reps = math.max(5, math.floor(400000 / #names))
    collectgarbage()
    local t = os.clock()
    for _ = 1, reps do fn(d, names, mine) end
    return (os.clock() - t) / reps
end

local function median(t)
    table.sort(t)
    return t[math.ceil(#t / 2)]
end

local function loadavg()
    local f = io.open("/proc/loadavg")
    local s = f and f:read("*l") or "?"
    if f then f:close() end
    return s:match("^(%S+ %S+ %S+)") or s
end

print(("%s UTC, load average %s, %s, %d rounds"):format(os.date("!%Y-%m-%d %H:%M"), loadavg(),
                                                      jit and jit.version or _VERSION, opts.rounds))
print("| listing of N names | rule | parse + rule | scan | parse / scan |")
print("|---|---|---|---|---|")
for count in opts.counts:gmatch("%d+") do
    local n = tonumber(count)
    for _, kind in ipairs(KINDS) do
        local d = kind.driver
        local names, mine = listing(kind, n)
        -- both ways give the same verdict before either is timed
        local a, b = parse_rule(d, names, mine), scan(d, names, mine)
        assert(a == b or (type(a) == "table" and type(b) == "table" and a.name == b.name),
               "the scan disagrees with parse + rule")
        local tp, ts = {}, {}
        for r = 1, opts.rounds do
            tp[r] = per_call(parse_rule, d, names, mine)
            ts[r] = per_call(scan, d, names, mine)
        end
        local p, s = median(tp), median(ts)
        print(("| %d | %s | %.3f ms | %.3f ms | %.1fx |"):format(n, kind.what, p * 1e3, s * 1e3,
                                                                 p / s))
    end
end

-- One children() round trip of a line of n nodes: wall and CPU seconds
-- (medians of R rounds of 20).
local function listing_round_trip(client, n)
    local parent = ("/bench-listing/%d"):format(n)
    assert(client:create(parent, nil, { parents = true }))
    local batch = {}
    for i = 1, n do
        batch[#batch + 1] = client:send("create", ("%s/_c_%s-lock-"):format(parent, line.uuid()),
                                        nil, { sequential = true })
        if #batch == 500 or i == n then
            for _, f in ipairs(batch) do assert(f:wait(30)) end
            batch = {}
        end
    end
    assert(#assert(client:children(parent)) == n)
    local walls, cpus = {}, {}
    for r = 1, opts.rounds do
        local w, c = now(), os.clock()
        for _ = 1, 20 do client:children(parent) end
        walls[r] = (now() - w) / 20
        cpus[r] = (os.clock() - c) / 20
    end
    return median(walls), median(cpus)
end

if opts.children then
    local hosts, server = require("helpers.tool").servers(opts.servers, "listing.lua")
    local client = assert(require("zkcoord").connect(hosts))
    print("\n| listing of N names | children() round trip, wall | CPU of this process |")
    print("|---|---|---|")
    for count in opts.counts:gmatch("%d+") do
        local wall, cpu = listing_round_trip(client, tonumber(count))
        print(("| %s | %.2f ms | %.2f ms |"):format(count, wall * 1e3, cpu * 1e3))
    end
    client:close()
    if server then server:destroy() end
end
print(("load average after: %s"):format(loadavg()))
