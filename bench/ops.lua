-- bench/ops.lua: what the Lua layer costs over libzookeeper_mt.
--   luajit bench/ops.lua [rounds] [--doc]
-- Starts its own ZooKeeper, builds bench/raw_ops.c, and runs, interleaved
-- on the same server: the round trip of one exists() and the throughput of
-- exists() with WINDOW requests in flight, for zkcoord and for raw C.
-- Prints medians and their ratio; --doc also rewrites the ops section of
-- docs/PERFORMANCE.md.
package.path = "spec/?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "lua/?.so;" .. package.cpath

local zkserver = require "helpers.zkserver"
local zkcoord = require "zkcoord"

local opts, rest = require("helpers.options").parse(arg, {
    name = "ops.lua", usage = "usage: luajit bench/ops.lua [rounds] [--doc]", positional = 1,
    options = { ["--doc"] = "flag" },
})
local rounds = tonumber(rest[1]) or 5
local write_doc = opts.doc
local SEQ_N, PIPE_N, WINDOW = 2000, 50000, 100

local sh = require("helpers.proc").output

assert(os.execute("cc -O2 -o bench/raw_ops bench/raw_ops.c -lzookeeper_mt -lpthread") == 0
       or true)
local srv = assert(zkserver.start {})
local path = "/bench-ops"
local c = assert(zkcoord.connect { servers = srv.hosts })
c:create(path, "x")

local function lua_round()
    local t0 = zkcoord.now()
    for _ = 1, SEQ_N do assert(c:exists(path)) end
    local rtt = (zkcoord.now() - t0) / SEQ_N
    local ring = {}
    t0 = zkcoord.now()
    for i = 1, PIPE_N do
        local slot = i % WINDOW
        if ring[slot] then assert(ring[slot]:wait()) end
        ring[slot] = c:send("exists", path)
    end
    for _, f in pairs(ring) do assert(f:wait()) end
    return rtt * 1e6, PIPE_N / (zkcoord.now() - t0)
end

local function c_round()
    local out = sh(("bench/raw_ops %s %s %d %d %d"):format(srv.hosts, path, SEQ_N, PIPE_N, WINDOW))
    local rtt, tput = out:match("rtt_us=([%d.]+) pipelined_ops_s=(%d+)")
    assert(rtt, "raw_ops failed: " .. out)
    return tonumber(rtt), tonumber(tput)
end

local function median(t)
    table.sort(t)
    return t[math.ceil(#t / 2)]
end

lua_round() -- warm up the JIT and the server
local lr, lt, cr, ct = {}, {}, {}, {}
for i = 1, rounds do
    cr[i], ct[i] = c_round()
    lr[i], lt[i] = lua_round()
end
c:close()
srv:destroy()

local rows = {
    ("| round trip of one `exists` | %.0f µs | %.0f µs | %.2fx |"):format(
        median(lr), median(cr), median(lr) / median(cr)),
    ("| pipelined `exists`, %d in flight | %.0f ops/s | %.0f ops/s | %.2fx |"):format(
        WINDOW, median(lt), median(ct), median(ct) / median(lt)),
}
local table_md = table.concat({
    "| measure | zkcoord (LuaJIT) | raw C libzookeeper_mt | cost of the Lua layer |",
    "|---|---|---|---|",
    rows[1], rows[2] }, "\n")
print(table_md)
print(("(medians of %d interleaved rounds; %d sequential, %d pipelined requests each)")
      :format(rounds, SEQ_N, PIPE_N))

if write_doc then
    local doc = "docs/PERFORMANCE.md"
    local f = io.open(doc)
    local text = f and f:read("*a") or "# Performance\n"
    if f then f:close() end
    local cpu = sh("grep -m1 'model name' /proc/cpuinfo"):gsub("model name%s*:%s*", ""):gsub("\n", "")
    local section = table.concat({
        "<!-- ops:begin -->",
        "## Client overhead: zkcoord vs raw libzookeeper_mt",
        "",
        "Command: `luajit bench/ops.lua --doc` (starts its own ZooKeeper, forceSync=no,",
        "on 127.0.0.1; interleaves the two programs on the same server).",
        ("Measured %s on %s, %d cores."):format(os.date("!%Y-%m-%d"), cpu,
            tonumber(sh("nproc")) or 0),
        "",
        table_md,
        "",
        ("Medians of %d interleaved rounds; each round does %d sequential and %d"):format(
            rounds, SEQ_N, PIPE_N),
        "pipelined requests. The last column is zkcoord's time over raw C's (lower is better).",
        "<!-- ops:end -->",
    }, "\n")
    if text:find("<!%-%- ops:begin %-%->") then
        text = text:gsub("<!%-%- ops:begin %-%->.-<!%-%- ops:end %-%->", function() return section end)
    else
        text = text .. "\n" .. section .. "\n"
    end
    f = assert(io.open(doc, "w"))
    f:write(text)
    f:close()
    print("wrote " .. doc)
end
