--- zkcoord.metrics: what a client has done, in Prometheus's text format.
--
--   local metrics = require "zkcoord.metrics"
--   print(metrics.prometheus(client))      -- the text exposition format
--
-- Every client keeps its metrics from connect on (always on: a few table
-- updates per request, no allocation per request once a series exists):
--
--   zkcoord_requests_total{op,result}        counter: requests answered, by result code
--   zkcoord_request_seconds{op}              histogram: send to reply
--   zkcoord_session_reconnects_total         counter: connected again in the same session
--   zkcoord_session_expirations_total        counter: sessions lost (expired, or given up
--                                            by the clock rule)
--   zkcoord_session_disconnected_seconds_total counter: time not connected
--   zkcoord_session_connected                gauge: 1 while connected
--   zkcoord_pending_requests, zkcoord_watches  gauges, read when the text is made
--   zkcoord_lock_acquires_total{path,result} counter: acquires by result (ok, timeout, ...)
--   zkcoord_lock_wait_seconds{path}          histogram: acquire call to grant
--   zkcoord_lock_hold_seconds{path}          histogram: grant to release
--   zkcoord_lock_lost_total{path,reason}     counter: holds lost
--   zkcoord_lock_cohort_handoffs_total{path,kind}  counter: cohort grants, kind
--                                            "local" (no ZooKeeper write) or "remote"
--
-- Labels stay bounded: `path` is the path of a lock the process made
-- (the first `max_paths`, 200 by default, and "other" after them), `op` and
-- `result` come from fixed sets. For a system of your own, pass
-- `tracer = fn(op, path, seconds, result)` to connect: it runs for every
-- answered request (path nil for a multi).
--
-- In nginx, each worker publishes its client's metrics into a
-- lua_shared_dict and any worker answers for all of them:
--
--   init_worker_by_lua_block { require("zkcoord.metrics").ngx_publish(client, "zk_metrics") }
--   location = /metrics { content_by_lua_block {
--       ngx.print(require("zkcoord.metrics").ngx_collect("zk_metrics")) } }
local registry = require "zkcoord.metrics.registry"
local text_format = require "zkcoord.metrics.text"
local contract = require "zkcoord.client.contract"

local type, ipairs, tostring, pcall, error = type, ipairs, tostring, pcall, error
local merge, render, encode, decode = text_format.merge, text_format.render, text_format.encode,
    text_format.decode

local _M = { _VERSION = require("zkcoord.version") }

-- Upper bounds of the histograms' buckets, in seconds.
_M.REQUEST_BUCKETS, _M.WAIT_BUCKETS = registry.REQUEST_BUCKETS, registry.WAIT_BUCKETS

--- A registry of one client's metrics (the client makes its own).
---@param opts table? `max_paths` (200), `tracer` fn(op, path, seconds, result)
-- @function new
_M.new = registry.new


local function registry_of(client, n)
    if type(client) ~= "table" or type(client.metrics) ~= "function" then
        error(("bad argument #%d to 'prometheus' (a zkcoord client expected, got %s)")
              :format(n, type(client)), 3)
    end
    return client:metrics()
end


--- The text exposition format (version 0.0.4) of one or more clients'
--- metrics, summed.
---@return string text
function _M.prometheus(client, ...)
    local sets = {}
    for i, c in ipairs { client, ... } do
        sets[i] = registry_of(c, i):samples(c)
    end
    if #sets == 0 then
        registry_of(nil, 1)
    end
    return render(merge(sets))
end


-- nginx ----------------------------------------------------------------------


--- nginx: publishes `client`'s metrics into lua_shared_dict `dict` every
--- `interval` seconds (default 5) from a timer, under this worker's pid;
--- an entry lives 3 intervals, so a worker that is gone drops out. Call it
--- from init_worker_by_lua*. `client` may be a function that returns the
--- client (nil until there is one), e.g. `require("zkcoord.ngx").client`.
function _M.ngx_publish(client, dict, interval)
    local ngx = _G.ngx
    local get = client
    if type(client) ~= "function" then
        registry_of(client, 1)
        get = function() return client end
    end
    local shm = ngx and ngx.shared[dict]
    if not shm then
        error("bad argument #2 to 'ngx_publish' (no lua_shared_dict " .. tostring(dict) .. ")", 2)
    end
    interval = interval or 5
    if type(interval) ~= "number" or interval ~= interval or interval <= 0 then
        error("bad argument #3 to 'ngx_publish' (interval must be a positive number)", 2)
    end
    local key = "zkcoord:" .. ngx.worker.pid()
    local function publish(premature)
        if premature then return end
        local ok, c = pcall(get)
        if not ok then
            ngx.log(ngx.ERR, "zkcoord.metrics: ", tostring(c))
            return
        end
        if type(c) ~= "table" or type(c.metrics) ~= "function" then
            return      -- not connected yet
        end
        if contract.is_closed(c) then
            shm:delete(key)
            return
        end
        shm:set(key, encode(c:metrics():samples(c)), 3 * interval)
    end
    -- timers only: init_worker cannot wait for a client
    local ok, err = ngx.timer.at(0, publish)
    if ok then
        ok, err = ngx.timer.every(interval, publish)
    end
    if not ok then
        return nil, err
    end
    return true
end


--- nginx: the text exposition format of every worker's published
--- metrics, summed; this worker's are read fresh when `client` is given.
function _M.ngx_collect(dict, client)
    local ngx = _G.ngx
    local shm = ngx and ngx.shared[dict]
    if not shm then
        error("bad argument #1 to 'ngx_collect' (no lua_shared_dict " .. tostring(dict) .. ")", 2)
    end
    local mine = ngx.worker.pid and "zkcoord:" .. ngx.worker.pid()
    local sets = {}
    for _, key in ipairs(shm:get_keys(0)) do
        if key:sub(1, 8) == "zkcoord:" and not (client and key == mine) then
            local text = shm:get(key)
            if text then sets[#sets + 1] = decode(text) end
        end
    end
    if client then
        sets[#sets + 1] = registry_of(client, 2):samples(client)
    end
    return render(merge(sets))
end


return _M
