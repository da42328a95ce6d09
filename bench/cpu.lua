-- bench/cpu.lua: CPU per uncontended lock cycle on the calling thread,
-- zkcoord against the raw C program (bench/peers/raw_bench.c).
--   luajit bench/cpu.lua [--doc] [--rounds 5] [--cycles 3000] [--no-callgrind]
--                        [--cg-runs 1] [--before REV] [--functions] [--profile JPOPTS]
--   luajit bench/cpu.lua child HOSTS PATH CYCLES     (one zkcoord process)
-- Starts its own standalone ZooKeeper on 127.0.0.1 (forceSync=no) and
-- builds raw_bench with cc. Each program, in its own process, runs
-- CYCLES/10 cycles of warm-up and then CYCLES acquire+release cycles on a
-- fresh path, and reports the CPU the loop took on the calling thread
-- (CLOCK_THREAD_CPUTIME_ID) and in the whole process (every thread:
-- libzookeeper_mt's I/O and completion threads too), over CYCLES. Rounds
-- alternate which program goes first; medians are printed.
-- Then instruction counts, which do not depend on the machine's load:
-- each program under `valgrind --tool=callgrind --separate-threads=yes`
-- at two cycle counts; the difference over the difference in cycles is
-- the instructions per cycle (setup and warm-up cancel out), per thread,
-- and for the calling thread per object (luajit, core.so, libzookeeper,
-- libc, JIT-compiled code: "???").
-- Also the client's cost of one wake-up in a long line: the CPU of
-- parsing and sorting a listing of 1,000 and 10,000 lock nodes
-- (zkcoord.queue's parse, what every woken waiter does with the children
-- of the lock), against a one-pass scan for the two facts the exclusive
-- lock's rule needs (the lowest node, our predecessor).
-- --cg-runs N: N callgrind runs of each program at each cycle count,
-- medians printed (LuaJIT's traces and string hashes vary a little
-- between processes: the zkcoord figure spreads by a few per cent).
-- --before REV: also measures the zkcoord side of git revision REV of this
-- repository (exported with git archive into the temp dir and built with
-- its scripts/build.sh), in the same rounds and callgrind runs, and prints
-- before -> after.
-- --functions: also where the zkcoord side's calling-thread instructions go,
-- by kind of work (pattern matching, allocation and GC, table work ...):
-- callgrind of the child run by a small LuaJIT host built here against
-- libluajit-5.1.a (/usr/bin/luajit has no symbols), at the same two cycle
-- counts, exclusive cost per function summed by kind.
-- --profile JPOPTS: also runs the zkcoord side once under LuaJIT's
-- sampling profiler (luajit -jp=JPOPTS, e.g. F, v or Fl) and prints it.
-- --doc writes the section between <!-- cpu:begin --> and <!-- cpu:end -->
-- of docs/PERFORMANCE.md.
local root = (arg and arg[0] or ""):match("^(.*)/bench/[^/]*$") or "."
package.path = root .. "/spec/?.lua;" .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;"
    .. package.path
package.cpath = root .. "/" .. (os.getenv("ZKCOORD_CPATH") or "lua/?.so") .. ";" .. package.cpath

local ffi = require "ffi"
local zkcoord = require "zkcoord"

pcall(ffi.cdef, [[
    struct zkb_timespec { long tv_sec; long tv_nsec; };
    int clock_gettime(int, struct zkb_timespec *);
]])
local CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID = 2, 3
local ts = ffi.new("struct zkb_timespec")
local function cpu_clock(id)
    ffi.C.clock_gettime(id, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

-- The zkcoord side: the loop of bench/peers/zkcoord_bench.lua's
-- lock_uncontended, without its timing of each cycle.
if arg[1] == "child" then
    local hosts, path, cycles = arg[2], arg[3], assert(tonumber(arg[4]), "cycles")
    local c = assert(zkcoord.connect { servers = hosts, session_timeout = 10,
                                       connect_timeout = 30 })
    local lock = c:lock(path)
    for _ = 1, math.floor(cycles / 10) do
        assert(lock:acquire(600))
        lock:release()
    end
    local t0 = zkcoord.now()
    local c0, p0 = cpu_clock(CLOCK_THREAD_CPUTIME_ID), cpu_clock(CLOCK_PROCESS_CPUTIME_ID)
    for _ = 1, cycles do
        assert(lock:acquire(600))
        lock:release()
    end
    print(("cycles=%d secs=%.6f thread_cpu_s=%.6f process_cpu_s=%.6f"):format(cycles,
        zkcoord.now() - t0, cpu_clock(CLOCK_THREAD_CPUTIME_ID) - c0,
        cpu_clock(CLOCK_PROCESS_CPUTIME_ID) - p0))
    io.stdout:flush()
    c:close()
    os.exit(0, true)    -- close the state: the profiler (-jp) writes its report then
end

local proc = require "helpers.proc"
local zkserver = require "helpers.zkserver"

local opts = { rounds = 5, cycles = 3000, doc = false, callgrind = true, profile = nil,
               cg_runs = 1, before = nil, functions = false }
do
    local i = 1
    while arg[i] do
        local a = arg[i]
        if a == "--doc" then
            opts.doc = true
        elseif a == "--no-callgrind" then
            opts.callgrind = false
        elseif a == "--functions" then
            opts.functions = true
        elseif (a == "--profile" or a == "--before") and arg[i + 1] then
            opts[a:sub(3)] = arg[i + 1]
            i = i + 1
        elseif (a == "--rounds" or a == "--cycles" or a == "--cg-runs") and tonumber(arg[i + 1]) then
            opts[a:sub(3):gsub("%-", "_")] = tonumber(arg[i + 1])
            i = i + 1
        else
            io.stderr:write("usage: luajit bench/cpu.lua [--doc] [--rounds N] [--cycles N]"
                            .. " [--no-callgrind] [--cg-runs N] [--before REV] [--functions]"
                            .. " [--profile JPOPTS]\n")
            os.exit(64)
        end
        i = i + 1
    end
end

local sh = proc.output

local function median(list)
    local s = {}
    for i, v in ipairs(list) do s[i] = v end
    table.sort(s)
    return s[math.max(1, math.ceil(#s / 2))]
end

local function kv(line)
    local t = {}
    for k, v in (line or ""):gmatch("([%w_]+)=(%S+)") do t[k] = tonumber(v) or v end
    return t
end

local load_before = sh("cut -d' ' -f1-3 /proc/loadavg"):gsub("\n", "")
local started = os.date("!%Y-%m-%d %H:%M UTC")
local tmp = assert(proc.mktemp_dir("zkcoord-cpu-"))
local raw = tmp .. "/raw_bench"
local out = sh(("cc -O2 -Wall -o %s %s/bench/peers/raw_bench.c -lzookeeper_mt -lpthread 2>&1")
    :format(proc.shquote(raw), proc.shquote(root)))
assert(proc.read_file(raw), "cc failed: " .. out)
local luajit = arg[-1] or "luajit"
local self_path = arg[0]

-- The tree of --before REV, built: its own bench/cpu.lua runs its child.
local before_tree, before_rev
if opts.before then
    before_rev = sh(("git -C %s rev-parse --short %s 2>&1"):format(proc.shquote(root),
        proc.shquote(opts.before))):gsub("\n", "")
    before_tree = tmp .. "/before"
    out = sh(("mkdir -p %s && git -C %s archive %s | tar -x -C %s && bash %s/scripts/build.sh 2>&1")
        :format(proc.shquote(before_tree), proc.shquote(root), proc.shquote(opts.before),
                proc.shquote(before_tree), proc.shquote(before_tree)))
    assert(proc.read_file(before_tree .. "/lua/zkcoord/core.so"),
           "--before " .. opts.before .. ": build failed: " .. out)
end

local srv = assert(zkserver.start {})
local admin = assert(zkcoord.connect { servers = srv.hosts })
assert(admin:create("/cpu"))
local runs = 0

-- argv of one program's run on a fresh path.
local function command(lib, cycles)
    runs = runs + 1
    local path = ("/cpu/%s-%d"):format(lib, runs)
    if lib == "zkcoord" then
        return { luajit, self_path, "child", srv.hosts, path, tostring(cycles) }
    elseif lib == "before" then
        return { luajit, before_tree .. "/bench/cpu.lua", "child", srv.hosts, path,
                 tostring(cycles) }
    end
    return { raw, "lock_cpu", srv.hosts, path, tostring(cycles) }
end

local function quote_all(argv)
    local q = {}
    for i, a in ipairs(argv) do q[i] = proc.shquote(a) end
    return table.concat(q, " ")
end

-- One pass over the names, no table per entry and no sort: the lowest
-- sequence number and the predecessor of `mine` (Curator's node shape:
-- the last 10 characters after "lock-").
local function scan_listing(names, mine)
    local low, pred, pred_seq = math.huge, nil, -1
    for i = 1, #names do
        local name = names[i]
        local s = tonumber(name:sub(-10))
        if s and name:sub(-15, -11) == "lock-" then
            if s < low then low = s end
            if s < mine and s > pred_seq then pred, pred_seq = name, s end
        end
    end
    return low, pred
end

-- CPU (this process) per listing of n lock nodes: parse+sort, one-pass scan.
local function listing_cost(n)
    local q = require("zkcoord.queue").new(admin, "/cpu/listing",
                                           { marker = "lock-", rule = function() return true end })
    local names = {}
    for i = 1, n do names[i] = ("_c_%s-lock-%010d"):format(q.uuid(), i) end
    for i = n, 2, -1 do                         -- ZooKeeper lists children unsorted
        local j = math.random(i)
        names[i], names[j] = names[j], names[i]
    end
    local reps = math.max(3, math.floor(50000 / n))
    local t = os.clock()
    for _ = 1, reps do q:parse(names) end
    local parse = (os.clock() - t) / reps
    t = os.clock()
    for _ = 1, reps do scan_listing(names, math.floor(n / 2)) end
    return parse, (os.clock() - t) / reps
end

-- Kinds of work by function name (the first kind that names a part of it),
-- or by object for libzookeeper and the core.
local KINDS = {
    { "Lua pattern matching", { "match", "classend", "max_expand", "min_expand", "str_find_aux",
                                "lj_str_find", "capture", "gsub", "add_value", "add_s" } },
    { "allocation and GC (`lj_alloc_*`, `gc_*`, malloc)", { "lj_alloc", "gc_", "propagatemark",
        "malloc", "_int_free", "calloc", "lj_mem_", "lj_gc", "free @", "sweep", "atomic" } },
    { "table work (`lj_tab_*`, `lua_rawset`)", { "lj_tab", "newtab", "rehash", "hashkey", "hash_",
        "lj_meta_t", "countint", "numusehash", "countarray", "resize", "lua_rawset", "lua_rawget",
        "lua_createtable" } },
    { "string interning and concatenation", { "lj_str_new", "lj_buf", "lj_strfmt", "lj_meta_cat",
                                              "lj_strscan", "str_", "memcmp" } },
    { "JIT-compiled code", { "0x0" } },
    { "interpreter, trace exits, stitching, JIT compiler", { "lj_BC", "lj_vm", "lj_cont",
        "lj_trace", "lj_record", "lj_snap", "lj_asm", "lj_opt", "lj_ir", "lj_crecord",
        "lj_dispatch", "lj_func", "lj_meta_call", "lj_ff", "lj_lib", "lj_state", "lj_err" } },
    { "libzookeeper (request submission)", {} },
    { "Lua C API called by the core", { "lua_", "luaL_", "index2adr", "lj_cf" } },
    { "the core's own code", {} },
}
local function kind_of(fn, obj)
    if obj:find("libzookeeper", 1, true) then return 7 end
    if obj == "core.so" then return 9 end
    local name = fn .. " @" .. obj
    for i, k in ipairs(KINDS) do
        for _, part in ipairs(k[2]) do
            if name:find(part, 1, true) then return i end
        end
    end
    return #KINDS + 1
end

-- A LuaJIT host with symbols: LuaJIT's static library and a main that runs
-- a script with arg[].
local function build_host()
    local src, exe = tmp .. "/host.c", tmp .. "/luajit-sym"
    assert(proc.write_file(src, table.concat({
        "#include <stdio.h>", "#include <lua.h>", "#include <lauxlib.h>", "#include <lualib.h>",
        "int main(int argc, char **argv) {",
        "    lua_State *L = luaL_newstate(); int i; luaL_openlibs(L);",
        "    lua_createtable(L, argc, 1);",
        "    for (i = 0; i < argc; i++) { lua_pushstring(L, argv[i]); lua_rawseti(L, -2, i - 1); }",
        "    lua_setglobal(L, \"arg\");",
        "    if (luaL_dofile(L, argv[1])) { fprintf(stderr, \"%s\\n\", lua_tostring(L, -1)); return 1; }",
        "    lua_close(L); return 0; }", "" }, "\n")))
    local lib = sh("cc -print-file-name=libluajit-5.1.a"):gsub("\n", "")
    local cflags = sh("pkg-config --cflags luajit 2>/dev/null"):gsub("\n", "")
    local o = sh(("cc -O2 -o %s %s %s -Wl,-E %s -lm -ldl 2>&1"):format(proc.shquote(exe),
        proc.shquote(src), cflags, proc.shquote(lib)))
    assert(proc.read_file(exe), "symbol host: cc failed: " .. o)
    return exe
end

local LIBS = { "zkcoord", "raw", opts.before and "before" or nil }
local res = {}
for _, lib in ipairs(LIBS) do res[lib] = { thread = {}, process = {}, wall = {} } end
local cg = {}
local listing = {}

local ok, err = pcall(function()
    for round = 1, opts.rounds do
        for k = 0, #LIBS - 1 do
            local lib = LIBS[(round + k) % #LIBS + 1]
            io.stderr:write(("round %d: %s ...\n"):format(round, lib))
            local line = sh(quote_all(command(lib, opts.cycles)) .. " 2>&1")
            local t = kv(line)
            assert(t.cycles, lib .. ": " .. line)
            local r = res[lib]
            r.thread[#r.thread + 1] = t.thread_cpu_s / t.cycles
            r.process[#r.process + 1] = t.process_cpu_s / t.cycles
            r.wall[#r.wall + 1] = t.secs / t.cycles
        end
    end
    for _, n in ipairs({ 1000, 10000 }) do
        listing[#listing + 1] = { n, listing_cost(n) }
    end
    if opts.profile then
        local argv = command("zkcoord", opts.cycles * 3)
        table.insert(argv, 2, "-jp=" .. opts.profile .. "," .. tmp .. "/profile.txt")
        io.stderr:write("profile: ", sh(quote_all(argv) .. " 2>&1"))
        print("LuaJIT profile (-jp=" .. opts.profile .. ") of the zkcoord side:")
        print(proc.read_file(tmp .. "/profile.txt"))
    end
    if not opts.callgrind then
        return
    end
    -- Instruction counts: two cycle counts, per thread (file suffix -01 is
    -- the calling thread), per object for the calling thread.
    local A, B = 200, 1200
    for run = 1, opts.cg_runs do
      for _, lib in ipairs(LIBS) do
        cg[lib] = cg[lib] or {}
        cg[lib][run] = {}
        for _, cycles in ipairs({ A, B }) do
            io.stderr:write(("callgrind %d: %s, %d cycles ...\n"):format(run, lib, cycles))
            local base = ("%s/cg.%s.%d.%d"):format(tmp, lib, cycles, run)
            local line = sh(("valgrind -q --tool=callgrind --separate-threads=yes "
                             .. "--smc-check=all-non-file --callgrind-out-file=%s %s 2>&1")
                            :format(proc.shquote(base), quote_all(command(lib, cycles))))
            assert(kv(line).cycles, lib .. " under callgrind: " .. line)
            local threads, objects = {}, {}
            for t = 1, 9 do
                local file = ("%s-%02d"):format(base, t)
                local text = proc.read_file(file)
                if not text then break end
                threads[t] = tonumber(text:match("\ntotals:%s*(%d+)")
                                      or text:match("\nsummary:%s*(%d+)")) or 0
                if t == 1 then
                    local ann = sh(("callgrind_annotate --inclusive=no --tree=none --threshold=100 %s"
                                    .. " 2>/dev/null")
                                   :format(proc.shquote(file)))
                    for ir, obj in ann:gmatch("\n%s*([%d,]+)%s+%b()%s+[^\n]-%[([^%]\n]+)%]") do
                        obj = obj:match("[^/]+$")
                        objects[obj] = (objects[obj] or 0) + tonumber((ir:gsub(",", "")))
                    end
                end
            end
            cg[lib][run][cycles] = { threads = threads, objects = objects }
        end
      end
    end
    cg.A, cg.B = A, B
    if not opts.functions then
        return
    end
    local host = build_host()
    local fns = {}
    for _, cycles in ipairs({ A, B }) do
        io.stderr:write(("functions: zkcoord under the symbol host, %d cycles ...\n"):format(cycles))
        local base = ("%s/fn.%d"):format(tmp, cycles)
        local argv = command("zkcoord", cycles)
        argv[1] = host
        local line = sh(("valgrind -q --tool=callgrind --separate-threads=yes "
                         .. "--smc-check=all-non-file --callgrind-out-file=%s %s 2>&1")
                        :format(proc.shquote(base), quote_all(argv)))
        assert(kv(line).cycles, "zkcoord under the symbol host: " .. line)
        local text = proc.read_file(base .. "-01")
        local f = { [0] = tonumber(text:match("\ntotals:%s*(%d+)")
                                   or text:match("\nsummary:%s*(%d+)")) }
        local ann = sh(("callgrind_annotate --inclusive=no --tree=none --threshold=100 %s 2>/dev/null")
                       :format(proc.shquote(base .. "-01")))
        for ir, fn, obj in ann:gmatch("\n%s*([%d,]+)%s+%b()%s+([^\n]-) %[([^%]\n]+)%]") do
            local k = kind_of(fn, obj:match("[^/]+$"))
            f[k] = (f[k] or 0) + tonumber((ir:gsub(",", "")))
        end
        fns[cycles] = f
    end
    cg.functions = {}
    for k = 0, #KINDS + 1 do
        cg.functions[k] = ((fns[B][k] or 0) - (fns[A][k] or 0)) / (B - A)
    end
end)

admin:close()
srv:destroy()
local load_after = sh("cut -d' ' -f1-3 /proc/loadavg"):gsub("\n", "")
if not ok then
    proc.rm_rf(tmp)
    error(err, 0)
end

-- Report ------------------------------------------------------------------------

local function us(x) return ("%.1f µs"):format(x * 1e6) end
local z, r = res.zkcoord, res.raw
local lines = {
    "| per uncontended acquire+release cycle (median of " .. opts.rounds .. " rounds) "
        .. "| zkcoord | raw C | zkcoord / raw C |",
    "|---|---|---|---|",
}
local function row(label, a, b, fmt)
    lines[#lines + 1] = ("| %s | %s | %s | %.2fx |"):format(label, fmt(a), fmt(b), a / b)
end
row("CPU of the calling thread (CLOCK_THREAD_CPUTIME_ID)", median(z.thread), median(r.thread), us)
row("CPU of the whole process (all threads)", median(z.process), median(r.process), us)
row("wall time of a cycle", median(z.wall), median(r.wall), us)

local per = {}
local function inum(x) return ("%d"):format(math.floor(x + 0.5)) end
if cg.A then
    local d = cg.B - cg.A
    -- Per run: the difference between the two cycle counts over d; then the
    -- median over the runs, of each figure on its own.
    for _, lib in ipairs(LIBS) do
        local mains, totals, objs = {}, {}, {}
        for run, c in ipairs(cg[lib]) do
            local a, b = c[cg.A], c[cg.B]
            local total = 0
            for t, n in pairs(b.threads) do
                total = total + (n - (a.threads[t] or 0))
            end
            mains[run], totals[run] = (b.threads[1] - a.threads[1]) / d, total / d
            for obj, n in pairs(b.objects) do
                objs[obj] = objs[obj] or {}
                table.insert(objs[obj], (n - (a.objects[obj] or 0)) / d)
            end
        end
        per[lib] = { main = median(mains), total = median(totals), objects = {},
                     mains = mains }
        for obj, list in pairs(objs) do
            per[lib].objects[obj] = median(list)
        end
    end
    local runs_note = opts.cg_runs > 1 and (", median of %d runs"):format(opts.cg_runs) or ""
    row("instructions of the calling thread (callgrind" .. runs_note .. ")", per.zkcoord.main,
        per.raw.main, inum)
    row("instructions of all threads (callgrind" .. runs_note .. ")", per.zkcoord.total,
        per.raw.total, inum)
end
local table_md = table.concat(lines, "\n")
print(table_md)

-- --before: the same measures of REV's zkcoord side, and each side's ratio
-- to raw C.
local before_md = ""
if opts.before then
    local b = res.before
    local bl = {
        "",
        ("zkcoord before (%s, `--before %s`) and after (this tree), same rounds:"):format(
            before_rev, opts.before),
        "",
        "| per cycle | before | after | after / before | / raw C, before → after |",
        "|---|---|---|---|---|",
    }
    local function brow(label, x, y, raw_v, fmt)
        bl[#bl + 1] = ("| %s | %s | %s | %.3f | %.2fx → %.2fx |"):format(label, fmt(x), fmt(y),
            y / x, x / raw_v, y / raw_v)
    end
    brow("CPU of the calling thread", median(b.thread), median(z.thread), median(r.thread), us)
    brow("CPU of the whole process", median(b.process), median(z.process), median(r.process), us)
    brow("wall time", median(b.wall), median(z.wall), median(r.wall), us)
    if per.before then
        brow("instructions of the calling thread", per.before.main, per.zkcoord.main,
             per.raw.main, inum)
        brow("instructions of all threads", per.before.total, per.zkcoord.total,
             per.raw.total, inum)
        local function each(list)
            local t = {}
            for i, v in ipairs(list) do t[i] = inum(v) end
            return table.concat(t, ", ")
        end
        bl[#bl + 1] = ""
        bl[#bl + 1] = ("Calling-thread instructions per cycle in each callgrind run: before %s;"
            .. " after %s."):format(each(per.before.mains), each(per.zkcoord.mains))
    end
    before_md = table.concat(bl, "\n")
    print(before_md)
end

local function breakdown(lib, limit)
    local list = {}
    for k, v in pairs(per[lib].objects) do
        if v >= 1 then
            list[#list + 1] = { k = k, v = v }
        end
    end
    table.sort(list, function(x, y) return x.v > y.v end)
    local rows = {}
    for i = 1, math.min(limit, #list) do
        rows[i] = ("| %s | %d |"):format((list[i].k:gsub("|", "\\|")), math.floor(list[i].v + 0.5))
    end
    return table.concat(rows, "\n")
end

local listing_md = { "",
    "One wake-up in a long line: CPU of this process per listing of N lock nodes (mean",
    "of repeated parses of one shuffled list; `os.clock`):", "",
    "| N | `queue:parse` (a table per node, sorted) | one-pass scan (lowest, predecessor) |",
    "|---|---|---|" }
for _, l in ipairs(listing) do
    listing_md[#listing_md + 1] = ("| %d | %.2f ms (%.2f µs per node) | %.3f ms |"):format(
        l[1], l[2] * 1e3, l[2] / l[1] * 1e6, l[3] * 1e3)
end
listing_md = table.concat(listing_md, "\n")
print(listing_md)

local functions_md = ""
if cg.functions then
    local f = cg.functions
    local fl = {
        "",
        "Where the zkcoord side's calling-thread instructions go (`--functions`: callgrind of",
        "the child run by a LuaJIT host with symbols, exclusive cost per function by kind;",
        ("%d instructions per cycle in that run):"):format(math.floor(f[0] + 0.5)),
        "",
        "| kind of work | instructions per cycle | share |",
        "|---|---|---|",
    }
    local function frow(label, v)
        fl[#fl + 1] = ("| %s | %d | %.1f %% |"):format(label, math.floor(v + 0.5), v / f[0] * 100)
    end
    for i, k in ipairs(KINDS) do frow(k[1], f[i]) end
    frow("the rest (libc mutexes, `memchr` ...)", f[#KINDS + 1])
    functions_md = table.concat(fl, "\n")
    print(functions_md)
end

local extra = ""
if per.zkcoord then
    extra = table.concat({
        "",
        "Instructions of the calling thread per cycle, by object (callgrind; `???` is",
        "LuaJIT's JIT-compiled code):",
        "",
        "| object (zkcoord) | instructions per cycle |",
        "|---|---|",
        breakdown("zkcoord", 6),
        "",
        "| object (raw C) | instructions per cycle |",
        "|---|---|",
        breakdown("raw", 4),

    }, "\n")
    print(extra)
end

if opts.doc then
    local doc = root .. "/docs/PERFORMANCE.md"
    local cpuname = sh("grep -m1 'model name' /proc/cpuinfo"):gsub("model name%s*:%s*", "")
                                                           :gsub("\n", "")
    local section = table.concat({
        "<!-- cpu:begin -->",
        "## CPU per uncontended lock cycle: zkcoord vs raw C (issue 14 item 4)",
        "",
        ("Command: `luajit bench/cpu.lua --doc --rounds %d --cycles %d%s%s` (its own standalone")
            :format(opts.rounds, opts.cycles,
                    (opts.cg_runs > 1 and " --cg-runs " .. opts.cg_runs or "")
                        .. (opts.functions and " --functions" or ""),
                    opts.before and " --before " .. opts.before or ""),
        "ZooKeeper on 127.0.0.1, forceSync=no; each program in its own process, one session,",
        "one lock path of its own, no contention). Measured " .. started .. " on " .. cpuname .. ", "
            .. sh("nproc"):gsub("\n", "") .. " cores shared with other work",
        ("(load average before %s, after %s): CPU times are noisy, the callgrind"):format(
            load_before, load_after),
        "instruction counts are the stable figure.",
        "",
        table_md,
        before_md,
        functions_md,
        extra,
        listing_md,
        "<!-- cpu:end -->",
    }, "\n")
    dofile(root .. "/bench/doc_section.lua")(doc, "cpu", section)
end
proc.rm_rf(tmp)
