-- zkcoord.cli.once: the record of `zkcoord once --period S PATH -- CMD`:
-- at most one successful run of CMD per period across hosts. Not a public
-- API.
--
-- Node layout: the runs are serialized by the exclusive lock PATH (the
-- `lock` verb's line, <PATH>/_c_<uuid>-lock-<seq>, taken without waiting:
-- a host that finds it held leaves the run to its holder). PATH's own data
-- records the last successful run: "<ms> <id>", the ZooKeeper server's
-- time of that run (the ctime of its lock node, ms since the epoch) and
-- who ran it (hostname:pid). The period of a time t is floor(t / S): the
-- server's clock, not the hosts', so hosts with skewed clocks agree on
-- the period (and a change of --period is judged by the same record). A
-- run whose CMD fails (exit status not 0) or whose lock is lost records
-- nothing: the next host (or the next cron tick) in that period runs CMD.
local deadlines = require "zkcoord.util.deadline"
local retries = require "zkcoord.util.retry"
local show = require "zkcoord.cli.show"

local _M = {}

local function period_of(t, seconds)
    return math.floor(t / seconds)
end

local function secs(seconds)
    return (seconds == math.floor(seconds) and "%.0fs" or "%gs"):format(seconds)
end

-- The last successful run recorded at `path`: its server time (seconds)
-- and id, or nil (none yet, or data not ours); or nil, err, detail.
local function last_run(c, path)
    local data, err, detail = c:get(path)
    if not data then
        return nil, err, detail
    end
    local ms, id = data:match("^(%d+) ?(.*)$")
    return { t = ms and tonumber(ms) / 1000, id = id }
end

-- Is the run of the period of `now` (a server time, seconds: our lock
-- node's ctime) done? true and a description of the run, false (and the
-- current period), or nil, err, detail.
function _M.done(c, path, now, seconds)
    local last, err, detail = last_run(c, path)
    if not last then
        return nil, err, detail
    end
    local p = period_of(now, seconds)
    if last.t and period_of(last.t, seconds) >= p then
        return true, ("period %d (%s) ran at %s by %s"):format(p, secs(seconds), show.utc(last.t),
                                                              last.id ~= "" and last.id or "?")
    end
    return false, ("period %d (%s)"):format(p, secs(seconds))
end

-- Records a successful run at server time `t` (seconds) by `id`, while the
-- lock is still held. The same data written twice is the same record, so
-- a write with an unknown outcome is sent again, up to the session
-- timeout. Returns true, or nil, err, detail.
function _M.record(c, path, t, id)
    local data = ("%.0f %s"):format(t * 1000, id)
    return retries.retry(c, deadlines.deadline(c:session_timeout()), nil, function()
        return c:set(path, data)
    end)
end

return _M
