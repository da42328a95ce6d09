-- demo.lua: starts a local ZooKeeper in a temp dir, runs the examples (some
-- as several processes at once), stops the server. Run by scripts/demo.sh.
package.path = "spec/?.lua;lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "lua/?.so;" .. package.cpath

local zkserver = require "helpers.zkserver"

-- Our headings and the examples (child processes) share stdout: line
-- buffering writes each heading before the example that follows it, also
-- when stdout is a pipe or a file (block-buffered by default).
io.stdout:setvbuf("line")

local srv, err = zkserver.start {}
if not srv then
    io.stderr:write("could not start ZooKeeper: ", tostring(err), "\n")
    os.exit(1)
end
print(("== ZooKeeper %s started in %s (%.1fs)"):format(srv.hosts, srv.dir, srv.ready_time or 0))

local failures = 0

local function run(title, cmd)
    print("\n== " .. title)
    print("$ " .. cmd)
    local r1, _, r3 = os.execute("ZKCOORD_SERVERS=" .. srv.hosts .. " " .. cmd)
    local ok = r1 == 0 or r1 == true and (r3 == nil or r3 == 0)
    if not ok then
        failures = failures + 1
        print("!! failed: " .. title)
    end
end

local function parallel(n, script, argsfn)
    local parts = {}
    for i = 1, n do
        parts[#parts + 1] = "luajit " .. script .. " " .. argsfn(i) .. ' & pids="$pids $!";'
    end
    -- wait for each (by pid: `jobs` lists nothing in dash's subshells)
    return "sh -c '" .. table.concat(parts, " ")
           .. " fail=0; for p in $pids; do wait $p || fail=1; done; exit $fail'"
end


local function exists(path)
    local f = io.open(path)
    if f then f:close() end
    return f ~= nil
end

run("basic client operations", "luajit examples/basic.lua")
run("3 processes take turns on one lock", parallel(3, "examples/lock.lua", function(i)
    return i .. " /zkcoord-demo/lock 3"
end))
if exists("examples/rwlock.lua") then
    run("readers share, writers exclude (2 writers, 3 readers)",
        parallel(5, "examples/rwlock.lua", function(i)
            return i .. " /zkcoord-demo/rwlock " .. (i <= 2 and "write" or "read")
        end))
end
if exists("examples/counter.lua") then
    run("4 processes add to one counter", parallel(4, "examples/counter.lua", function(i)
        return i .. " /zkcoord-demo/counter"
    end))
end
if exists("examples/watch.lua") then
    run("a watcher sees every update another process makes",
        "sh -c 'luajit examples/watch.lua /zkcoord-demo/config 5 & w=$!; sleep 1; "
        .. "for v in 1 2 3 4 5; do luajit -e \"package.path=[[lua/?.lua;lua/?/init.lua;]]..package.path "
        .. "package.cpath=[[lua/?.so;]]..package.cpath "
        .. "local c=require([[zkcoord]]).connect(os.getenv([[ZKCOORD_SERVERS]])) "
        .. "c:create([[/zkcoord-demo/config]],nil,{parents=true}) "
        .. "c:set([[/zkcoord-demo/config]],[[v$v]]) c:close()\"; sleep 0.2; done; wait $w'")
end
for _, name in ipairs({ "election", "semaphore", "barrier", "custom_recipe", "work_queue",
                         "partitioner", "group", "persistent_node", "multi_lock", "cache" }) do
    if exists("examples/" .. name .. ".lua") then
        run(name .. " example", "luajit examples/" .. name .. ".lua")
    end
end

-- The zkcoord command: a cron job that must run once across hosts. Three
-- "hosts" start it at the same moment; exactly one runs it, the others
-- exit 75 at once.
run("zkcoord lock: three hosts start the nightly job, one runs it", [[sh -c '
out=$(for h in a b c; do
        luajit bin/zkcoord --servers "$ZKCOORD_SERVERS" lock --timeout 0 /zkcoord-demo/nightly -- \
            sh -c "echo host $h runs the nightly job; sleep 1" &
      done; wait)
echo "$out"; test "$(echo "$out" | grep -c runs)" = 1']])

srv:destroy()
print(("\n== ZooKeeper stopped; %d example(s) failed"):format(failures))
os.exit(failures == 0 and 0 or 1)
