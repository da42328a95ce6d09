--- k-of-n runs across processes, and how long a slot stayed free while
--- someone waited.
--
-- Each worker process logs "want T", "acquired T", "released T" (T: the
-- monotonic clock, shared by the processes of one machine). Replaying the
-- merged logs gives, at every moment, the holders and the waiters; a slot
-- is idle while holders < n and waiters > 0. A worker logs "released"
-- just before it gives the slot back (the delete goes out at once) and
-- "acquired" just after it got one, with the send time of the last
-- request the server answered: the read that showed the grant (or a later
-- one). An idle time ends at that send time, not at the log: a process
-- descheduled between the grant's reply and its log line (a loaded
-- machine: 33-45 % of the handoffs' idle time at load 2 under ASan) was not
-- leaving a slot free. Every handoff still counts as a short idle time:
-- the waiter's wake on the watch and its read.
local proc = require "helpers.proc"

local _M = {}

--- The worker (run with helpers.zk.spawn_lua). args: path, name, n,
--- rounds, hold (seconds; 0: 20-100 ms at random), kind ("semaphore":
--- client:semaphore, "rule": one line with queue.rule_fewer_than(n)).
_M.WORKER = [[
local zkcoord = require "zkcoord"
local queue = require "zkcoord.queue"
local core = require "zkcoord.core"
local path, name, n, rounds, hold, kind = ...
n, rounds, hold = tonumber(n), tonumber(rounds), tonumber(hold)
local seed = 0
for i = 1, #name do seed = seed * 31 + name:byte(i) end
math.randomseed(seed)
io.stdout:setvbuf("line")
local function log(what, extra)
    io.stdout:write(what, " ", string.format("%.6f", core.now()), " ", extra or "", "\n")
end
local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS"), session_timeout = 4 })
local take, give
if kind == "rule" then
    local q = queue.new(c, path, { marker = "slot-", rule = queue.rule_fewer_than(n),
                                  data = name })
    take = function() return q:enter(30) end
    give = function() return q:leave() end
else
    local sem = c:semaphore(path, n, { data = name })
    local lease
    take = function()
        local err
        lease, err = sem:acquire(30)
        return lease, err
    end
    give = function() return lease:release() end
end
log("ready")
for _ = 1, rounds do
    log("want")
    local ok, err = take()
    if not ok then log("error", tostring(err)) break end
    -- the send time of the newest answered request (client internals: no
    -- public accessor; a spec measure)
    log("acquired", string.format("%.6f", c._s:last_heard()))
    c:waiter():sleep(hold > 0 and hold or 0.02 + math.random() * 0.08)
    log("released")
    give()
    c:waiter():sleep(0.005 + math.random() * 0.02)
end
log("done")
c:close()
]]


--- The events of one worker's log: { what =, t =, extra = }.
function _M.read(file)
    local out = {}
    for line in (proc.read_file(file) or ""):gmatch("[^\n]+") do
        local what, t, extra = line:match("^(%S+) (%S+) ?(.*)$")
        if what and tonumber(t) then
            out[#out + 1] = { what = what, t = tonumber(t), extra = extra }
        end
    end
    return out
end


--- Replays the logs of one run of n slots. Returns { max_idle =,
--- idle_share =, long_idles =, max_holders =, grants =, errors =, span = }
--- (seconds; long_idles: how many idle times lasted over `long`, default
--- 0.5 s).
function _M.analyze(logs, n, long)
    long = long or 0.5
    local all = {}
    local errors = 0
    for _, file in ipairs(logs) do
        for _, e in ipairs(_M.read(file)) do
            if e.what == "want" or e.what == "acquired" or e.what == "released" then
                all[#all + 1] = e
            elseif e.what == "error" then
                errors = errors + 1
            end
        end
    end
    table.sort(all, function(a, b) return a.t < b.t end)
    local holders, waiters, max_holders, grants = 0, 0, 0, 0
    local idle_since, max_idle, idle_total, long_idles = nil, 0, 0, 0
    for _, e in ipairs(all) do
        if e.what == "want" then
            waiters = waiters + 1
        elseif e.what == "acquired" then
            waiters, holders, grants = waiters - 1, holders + 1, grants + 1
        else
            holders = holders - 1
        end
        if holders > max_holders then
            max_holders = holders
        end
        local idle = holders < n and waiters > 0
        if idle and not idle_since then
            idle_since = e.t
        elseif not idle and idle_since then
            -- only a grant ends an idle time: at the request that showed it
            local heard = tonumber(e.extra)
            local d = (heard and heard < e.t and math.max(heard, idle_since) or e.t) - idle_since
            idle_total = idle_total + d
            if d > max_idle then max_idle = d end
            if d > long then long_idles = long_idles + 1 end
            idle_since = nil
        end
    end
    local span = #all > 1 and all[#all].t - all[1].t or 0
    return { max_idle = max_idle, idle_share = span > 0 and idle_total / span or 0,
             long_idles = long_idles,
             max_holders = max_holders, grants = grants, errors = errors, span = span }
end


return _M
