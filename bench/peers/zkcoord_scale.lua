-- zkcoord_scale.lua: zkcoord's side of the scale curves (bench/scale.lua),
-- with the contract of CuratorBench.java and kazoo_bench.py:
--
--   luajit bench/peers/zkcoord_scale.lua SCENARIO HOSTS PATH SECONDS EXTRA
--
-- Prints one line of key=value pairs. SECONDS bounds each wait; what did
-- not finish in it is reported (a key = -1, or dnf=...).
--   scale_lock    EXTRA = "W,S": W coroutines of this process contend for
--                 one lock at PATH, spread over S sessions (coroutine k on
--                 session k mod S, a lock object each); the S sessions are
--                 polled together (bench/pollwait.lua). Once the line has
--                 formed (W nodes under the lock) and 0.5 s more, SECONDS
--                 are measured: handoffs/s and the handoff latency (the
--                 holder's release call to the next grant, on this
--                 process's clock).
--   scale_locks   EXTRA = N: one session takes N locks on PATH/l<k> (64
--                 coroutines acquiring in turn, on_lost registered), then its
--                 session is expired: Lua heap per held lock, and the time
--                 from the expiry until every lock has run on_lost.
--   scale_watches EXTRA = N: client:watch (kind data) on each of the N nodes
--                 PATH/n1..nN (the driver made them): Lua heap per watch,
--                 delivery latency of a change set by a second session, the
--                 time after an expiry until the server holds as many watches
--                 as before (wchs) and until every watch function ran again.
local root = (arg[0]:match("^(.*)/bench/peers/[^/]*$") or ".")
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/bench/?.lua;"
    .. package.path
package.cpath = root .. "/" .. (os.getenv("ZKCOORD_CPATH") or "lua/?.so") .. ";" .. package.cpath

local ffi = require "ffi"
local zkcoord = require "zkcoord"
local pollwait = require "pollwait"

local now = zkcoord.now
local scen, hosts, path, bound, extra = arg[1], arg[2], arg[3], tonumber(arg[4]), arg[5]
-- A wait's bound: the window and a minute; above 600 s, which the API
-- refuses as milliseconds by mistake, no limit (the window still ends it).
local WAIT = bound and (bound + 60 <= 600 and bound + 60 or math.huge)
if not (scen and hosts and path and bound and extra) then
    io.stderr:write("usage: zkcoord_scale.lua SCENARIO HOSTS PATH SECONDS EXTRA\n")
    os.exit(2)
end

local function quiet(level, msg)
    if level == "error" then io.stderr:write("zkcoord [error] ", msg, "\n") end
end

local function connect(o)
    o = o or {}
    o.servers, o.logger = hosts, quiet
    o.session_timeout = o.session_timeout or 10
    o.connect_timeout = 30
    local c, err = zkcoord.connect(o)
    if not c then
        print("error=connect:" .. tostring(err))
        os.exit(1)
    end
    return c
end

local function pct(sorted, p)
    if #sorted == 0 then return 0 end
    return 1000 * sorted[math.floor(p * (#sorted - 1) + 0.5) + 1]
end

local function rss_kb()
    local f = assert(io.open("/proc/self/status"))
    local text = f:read("*a")
    f:close()
    return tonumber(text:match("VmRSS:%s*(%d+)")) or 0
end

local function lua_bytes()
    collectgarbage()
    collectgarbage()
    return collectgarbage("count") * 1024
end

-- Expires `c`'s session: a second handle joins it and closes it. The
-- client may win its session back meanwhile (the close then fails), so
-- again until the session changed. Returns the time the close that took
-- effect was sent (the server may tell `c` before it answers it).
local function expire(c)
    local sid = c:session_id()
    local t
    for _ = 1, 10 do
        local other = zkcoord.connect { servers = hosts, session_id = sid,
                                        session_password = c:session_password(),
                                        reconnect = false, logger = quiet,
                                        session_timeout = c:session_timeout() }
        t = now()
        if other then other:close() end
        local t1 = now()
        while c:session_id() == sid and now() - t1 < 2 do c:dispatch(0.005) end
        if c:session_id() ~= sid then break end
    end
    return t
end

-- The server's number of watches: the four-letter word wchs over TCP.
if not pcall(ffi.typeof, "struct zks_sockaddr_in") then
    ffi.cdef [[
    struct zks_sockaddr_in { unsigned short family; unsigned short port; unsigned int addr;
                             char zero[8]; };
    int zks_socket(int, int, int) __asm__("socket");
    int zks_connect(int, const struct zks_sockaddr_in *, unsigned int) __asm__("connect");
    long zks_write(int, const char *, unsigned long) __asm__("write");
    long zks_read(int, char *, unsigned long) __asm__("read");
    int zks_close(int) __asm__("close");
    unsigned int zks_inet_addr(const char *) __asm__("inet_addr");
    unsigned short zks_htons(unsigned short) __asm__("htons");
    ]]
end
local function server_watches()
    local host, port = hosts:match("^([^,:]+):(%d+)")
    local fd = ffi.C.zks_socket(2, 1, 0)          -- AF_INET, SOCK_STREAM
    local sa = ffi.new("struct zks_sockaddr_in")
    sa.family, sa.port, sa.addr = 2, ffi.C.zks_htons(tonumber(port)), ffi.C.zks_inet_addr(host)
    if ffi.C.zks_connect(fd, sa, ffi.sizeof(sa)) ~= 0 then
        ffi.C.zks_close(fd)
        return -1
    end
    ffi.C.zks_write(fd, "wchs", 4)
    local buf, parts = ffi.new("char[4096]"), {}
    while true do
        local n = tonumber(ffi.C.zks_read(fd, buf, 4096))
        if n <= 0 then break end
        parts[#parts + 1] = ffi.string(buf, n)
    end
    ffi.C.zks_close(fd)
    return tonumber(table.concat(parts):match("Total watches:(%d+)")) or -1
end


-- scale_lock: the longest wait for the line to form before measuring.
local LINE = 90

if scen == "scale_lock" then
    local w, s = extra:match("^(%d+),(%d+)$")
    w, s = tonumber(w), tonumber(s)
    local t0 = now()
    local sched = pollwait.new()
    local sessions = {}
    for k = 1, s do
        sessions[k] = connect { wait = sched:wait_option() }
    end
    local begin_t, end_t = math.huge, math.huge
    local last_release, grants, lat = -1, 0, {}
    for k = 1, w do
        local lock = sessions[(k - 1) % s + 1]:lock(path)
        sched:spawn(function()
            while now() < end_t do
                if lock:acquire(WAIT) then
                    local ta = now()
                    if ta >= begin_t and ta <= end_t then
                        grants = grants + 1
                        if last_release >= begin_t then lat[#lat + 1] = ta - last_release end
                    end
                    last_release = now()
                    lock:release()
                end
            end
        end)
    end
    local setup = now() - t0
    -- The window opens once the line has formed (W nodes under the lock:
    -- the first burst of W creates and listings is over), at most LINE s.
    local line = -1
    sched:spawn(function()
        local w1 = sessions[1]:waiter()
        while now() - t0 < LINE do
            local st = sessions[1]:exists(path)
            if st and st.num_children >= w then
                line = now() - t0
                break
            end
            w1:sleep(0.02)
        end
        begin_t = now() + 0.5
        end_t = begin_t + bound
    end)
    while now() < end_t + 0.05 and now() - t0 < LINE + bound + 5 do
        sched:run(0.05)               -- the waiters still in line at the end are abandoned
    end
    table.sort(lat)
    print(("grants=%d secs=%.3f rate=%.1f p50_ms=%.3f p99_ms=%.3f setup_s=%.2f line_s=%.2f "
           .. "sessions=%d threads=%d rss_kb=%d%s"):format(grants, bound, grants / bound,
                                            pct(lat, 0.5), pct(lat, 0.99), setup, line, s, w, rss_kb(),
                                            #sched.errors > 0 and " error=coroutine" or ""))
    io.stdout:flush()
    for _, c in ipairs(sessions) do c:close() end
    os.exit(0)

elseif scen == "scale_locks" then
    local n = tonumber(extra)
    local c = connect()
    assert(c:create(path, nil, { parents = true }))
    local rss0, heap0 = rss_kb(), lua_bytes()
    local locks, lost, last_lost = {}, 0, nil
    local function on_lost()
        lost = lost + 1
        last_lost = now()
    end
    local t0 = now()
    local WORKERS = 64        -- coroutines on the session, each taking its share in turn
    for first = 1, WORKERS do
        c:spawn(function()
            for k = first, n, WORKERS do
                if now() - t0 > bound then return end
                local l = c:lock(("%s/l%d"):format(path, k))
                l:on_lost(on_lost)
                if l:acquire(60) then locks[#locks + 1] = l end
            end
        end)
    end
    c:run(WAIT)
    local took = now() - t0
    local held = #locks
    local heap1, rss1 = lua_bytes(), rss_kb()
    local te = expire(c)
    while lost < held and now() - te < bound do c:dispatch(0.005) end
    print(("held=%d of=%d acquire_s=%.2f rate=%.1f heap_per_lock=%.0f rss_per_lock=%.0f "
           .. "lost_s=%.3f lost=%d workers=%d"):format(held, n, took, held / took,
                                                      (heap1 - heap0) / math.max(1, held),
                                                      (rss1 - rss0) * 1024 / math.max(1, held),
                                                      lost >= held and last_lost - te or -1, lost,
                                                      WORKERS))
    io.stdout:flush()
    os.exit(0)

else
    local n = tonumber(extra)
    local c = connect { session_timeout = 4 }
    local writer = connect()
    local base = server_watches()
    local seen, delivered = {}, 0
    local rss0, heap0 = rss_kb(), lua_bytes()
    local ws = {}
    local t0 = now()
    for k = 1, n do
        if now() - t0 > bound then break end
        local key = k
        ws[k] = c:watch(("%s/n%d"):format(path, k), function(data)
            seen[key] = data
            delivered = delivered + 1
        end)
        if not ws[k] then break end
    end
    local arm = now() - t0
    local heap1, rss1 = lua_bytes(), rss_kb()
    if #ws < n then
        print(("dnf=arm armed=%d of=%d secs=%.1f"):format(#ws, n, arm))
        os.exit(0)
    end
    local lat = {}
    math.randomseed(42)
    for r = 1, 200 do
        local k = math.random(n)
        local v = "v" .. r
        local t = now()
        assert(writer:set(("%s/n%d"):format(path, k), v))
        while seen[k] ~= v and now() - t < 5 do c:dispatch(0.0002) end
        lat[#lat + 1] = now() - t
    end
    table.sort(lat)
    local w0 = server_watches()
    delivered = 0
    local te = expire(c)
    local redelivered
    -- expire() returned once the client had a new session: the old one's
    -- watches are gone from the server, so count until all are back
    local w = server_watches()
    while w < w0 and now() - te < bound do
        c:dispatch(0.01)
        if delivered >= n and not redelivered then redelivered = now() - te end
        w = server_watches()
    end
    local rearm = w >= w0 and now() - te or -1
    while delivered < n and now() - te < bound do c:dispatch(0.01) end
    redelivered = redelivered or (delivered >= n and now() - te or -1)
    print(("watches=%d arm_s=%.2f heap_per_watch=%.0f rss_per_watch=%.0f p50_ms=%.3f "
           .. "p99_ms=%.3f rearm_s=%.3f redelivered_s=%.3f server_watches=%d base=%d")
          :format(n, arm, (heap1 - heap0) / n, (rss1 - rss0) * 1024 / n, pct(lat, 0.5),
                  pct(lat, 0.99), rearm, redelivered, w0, base))
    io.stdout:flush()
    for _, x in ipairs(ws) do x:cancel() end
    c:close()
    writer:close()
    os.exit(0)
end
