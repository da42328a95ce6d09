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
local core = require "zkcoord.core"

local type, pairs, ipairs, tostring, tonumber = type, pairs, ipairs, tostring, tonumber
local setmetatable, error = setmetatable, error
local concat, sort = table.concat, table.sort
local format, gsub = string.format, string.gsub
local now = core.now

local _M = { _VERSION = require("zkcoord.version") }

-- Upper bounds of the histograms' buckets, in seconds.
local REQUEST_BUCKETS = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                          2.5, 5, 10 }
local WAIT_BUCKETS = { 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300 }
_M.REQUEST_BUCKETS, _M.WAIT_BUCKETS = REQUEST_BUCKETS, WAIT_BUCKETS

local HELP = {
    zkcoord_requests_total = { "counter", "ZooKeeper requests answered, by operation and result" },
    zkcoord_request_seconds = { "histogram", "Seconds from sending a request to its reply" },
    zkcoord_session_reconnects_total = { "counter",
                                         "Connections made again in the same session" },
    zkcoord_session_expirations_total = { "counter", "Sessions lost (expired or given up)" },
    zkcoord_session_disconnected_seconds_total = { "counter", "Seconds not connected" },
    zkcoord_session_connected = { "gauge", "1 while the session is connected" },
    zkcoord_pending_requests = { "gauge", "Requests waiting for a reply" },
    zkcoord_watches = { "gauge", "ZooKeeper watches set by this client" },
    zkcoord_lock_acquires_total = { "counter", "Lock acquires, by result" },
    zkcoord_lock_wait_seconds = { "histogram", "Seconds from an acquire call to the grant" },
    zkcoord_lock_hold_seconds = { "histogram", "Seconds from a grant to its release" },
    zkcoord_lock_lost_total = { "counter", "Lock holds lost, by reason" },
    zkcoord_lock_cohort_handoffs_total = { "counter",
                                           "Cohort grants, local (no write) or remote" },
}
local ORDER = {}
for name in pairs(HELP) do ORDER[#ORDER + 1] = name end
sort(ORDER)


-- A histogram: counts per bucket (not cumulative), sum, count.
local function new_histogram(bounds)
    local h = { bounds = bounds, sum = 0, count = 0 }
    for i = 1, #bounds + 1 do h[i] = 0 end
    return h
end

local function observe(h, v)
    local bounds = h.bounds
    local i = 1
    while i <= #bounds and v > bounds[i] do
        i = i + 1
    end
    h[i] = h[i] + 1
    h.sum = h.sum + v
    h.count = h.count + 1
end


local Registry = {}
local registry_mt = { __index = Registry }

--- A registry of one client's metrics (the client makes its own).
---@param opts table? `max_paths` (200), `tracer` fn(op, path, seconds, result)
function _M.new(opts)
    opts = opts or {}
    return setmetatable({
        max_paths = opts.max_paths or 200,
        tracer = opts.tracer,
        requests = {},        -- op -> { results = { name -> n }, h = histogram }
        paths = {},           -- lock path -> its label (path itself or "other")
        npaths = 0,
        locks = {},           -- label -> { acquires = {}, lost = {}, handoffs = {}, wait =, hold = }
        reconnects = 0,
        expirations = 0,
        disconnected = 0,     -- seconds, up to disconnected_at
        disconnected_at = false,
        connected = false,
    }, registry_mt)
end


--- A request was answered (or failed to go out): `seconds` after it was sent.
function Registry:request(op, result, seconds, path)
    local r = self.requests[op]
    if not r then
        r = { results = {}, h = new_histogram(REQUEST_BUCKETS) }
        self.requests[op] = r
    end
    local results = r.results
    results[result] = (results[result] or 0) + 1
    observe(r.h, seconds)
    local tracer = self.tracer
    if tracer then
        tracer(op, type(path) == "string" and path or nil, seconds, result)
    end
end


--- The session moved from `old` to `new` (client state names).
function Registry:state(new, old)
    local t = now()
    if new == "connected" then
        if self.disconnected_at then
            self.disconnected = self.disconnected + (t - self.disconnected_at)
            self.disconnected_at = false
        end
        if old == "suspended" then
            self.reconnects = self.reconnects + 1
        end
        self.connected = true
    else
        if new == "lost" then
            self.expirations = self.expirations + 1
        end
        if not self.disconnected_at and new ~= "closed" then
            self.disconnected_at = t
        elseif new == "closed" and self.disconnected_at then
            self.disconnected = self.disconnected + (t - self.disconnected_at)
            self.disconnected_at = false
        end
        self.connected = false
    end
end


-- The series of lock `path` (bounded: "other" past max_paths).
local function lock_series(self, path)
    local label = self.paths[path]
    if not label then
        if self.npaths < self.max_paths then
            self.npaths = self.npaths + 1
            label = path
        else
            label = "other"
        end
        self.paths[path] = label
    end
    local l = self.locks[label]
    if not l then
        l = { acquires = {}, lost = {}, handoffs = {}, wait = new_histogram(WAIT_BUCKETS),
              hold = new_histogram(WAIT_BUCKETS) }
        self.locks[label] = l
    end
    return l
end

local function inc(t, k)
    t[k] = (t[k] or 0) + 1
end

--- An acquire of lock `path` ended with `result` ("ok" or its error) after `seconds`.
function Registry:lock_acquire(path, result, seconds)
    local l = lock_series(self, path)
    inc(l.acquires, result)
    if result == "ok" then
        observe(l.wait, seconds)
    end
end

--- A hold of lock `path` was released after `seconds`.
function Registry:lock_hold(path, seconds)
    observe(lock_series(self, path).hold, seconds)
end

--- A hold of lock `path` was lost (`reason`: "lost", "sessionexpired" ...).
function Registry:lock_lost(path, reason)
    inc(lock_series(self, path).lost, tostring(reason))
end

--- The cohort granted lock `path`: `kind` "local" or "remote".
function Registry:cohort_handoff(path, kind)
    inc(lock_series(self, path).handoffs, kind)
end


-- Text exposition ------------------------------------------------------------

local function escape(v)
    return (gsub(gsub(gsub(tostring(v), "\\", "\\\\"), "\n", "\\n"), '"', '\\"'))
end

local function num(v)
    if v == 1 / 0 then return "+Inf" end
    if v % 1 == 0 and v > -1e15 and v < 1e15 then return format("%d", v) end
    local s = format("%.15g", v)      -- the shortest form that reads back the same
    if tonumber(s) ~= v then s = format("%.17g", v) end
    return s
end

-- Samples: name -> list of { labels = {{k, v}, ...}, value = n } or histogram.
local function add(samples, name, labels, value)
    local s = samples[name]
    if not s then
        s = {}
        samples[name] = s
    end
    s[#s + 1] = { labels = labels, value = value }
end

local function label_text(labels, extra_k, extra_v)
    local parts = {}
    for i, kv in ipairs(labels) do
        parts[i] = kv[1] .. '="' .. escape(kv[2]) .. '"'
    end
    if extra_k then
        parts[#parts + 1] = extra_k .. '="' .. extra_v .. '"'
    end
    return #parts > 0 and "{" .. concat(parts, ",") .. "}" or ""
end

local function sorted_keys(t)
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = k end
    sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    return keys
end


--- The registry's samples as plain tables (what ngx_publish stores):
--- name -> list of { labels = {{k, v}...}, value = n | histogram }.
function Registry:samples(client)
    local out = {}
    for _, op in ipairs(sorted_keys(self.requests)) do
        local r = self.requests[op]
        for _, res in ipairs(sorted_keys(r.results)) do
            add(out, "zkcoord_requests_total", { { "op", op }, { "result", res } }, r.results[res])
        end
        add(out, "zkcoord_request_seconds", { { "op", op } }, r.h)
    end
    local disconnected = self.disconnected
    if self.disconnected_at then
        disconnected = disconnected + (now() - self.disconnected_at)
    end
    add(out, "zkcoord_session_reconnects_total", {}, self.reconnects)
    add(out, "zkcoord_session_expirations_total", {}, self.expirations)
    add(out, "zkcoord_session_disconnected_seconds_total", {}, disconnected)
    add(out, "zkcoord_session_connected", {}, self.connected and 1 or 0)
    if client then
        local st = client:stats()
        add(out, "zkcoord_pending_requests", {}, st.pending)
        add(out, "zkcoord_watches", {}, st.watches)
    end
    for _, path in ipairs(sorted_keys(self.locks)) do
        local l = self.locks[path]
        for _, res in ipairs(sorted_keys(l.acquires)) do
            add(out, "zkcoord_lock_acquires_total", { { "path", path }, { "result", res } },
                l.acquires[res])
        end
        for _, why in ipairs(sorted_keys(l.lost)) do
            add(out, "zkcoord_lock_lost_total", { { "path", path }, { "reason", why } }, l.lost[why])
        end
        for _, kind in ipairs(sorted_keys(l.handoffs)) do
            add(out, "zkcoord_lock_cohort_handoffs_total", { { "path", path }, { "kind", kind } },
                l.handoffs[kind])
        end
        add(out, "zkcoord_lock_wait_seconds", { { "path", path } }, l.wait)
        add(out, "zkcoord_lock_hold_seconds", { { "path", path } }, l.hold)
    end
    return out
end


-- Adds sample sets together (several clients, or nginx workers): series
-- with the same labels sum, histograms bucket by bucket.
local function merge(sets)
    local out, index = {}, {}
    for _, set in ipairs(sets) do
        for name, list in pairs(set) do
            for _, s in ipairs(list) do
                local key = name .. label_text(s.labels)
                local have = index[key]
                if not have then
                    local v = s.value
                    if type(v) == "table" then
                        local h = { bounds = v.bounds, sum = v.sum, count = v.count }
                        for i = 1, #v.bounds + 1 do h[i] = v[i] end
                        v = h
                    end
                    have = { labels = s.labels, value = v }
                    index[key] = have
                    add(out, name, have.labels, v)
                    out[name][#out[name]] = have
                elseif type(have.value) == "table" then
                    local h, v = have.value, s.value
                    for i = 1, #h.bounds + 1 do h[i] = h[i] + v[i] end
                    h.sum, h.count = h.sum + v.sum, h.count + v.count
                else
                    have.value = have.value + s.value
                end
            end
        end
    end
    return out
end


local function render(samples)
    local lines = {}
    for _, name in ipairs(ORDER) do
        local list = samples[name]
        if list and #list > 0 then
            local kind, help = HELP[name][1], HELP[name][2]
            lines[#lines + 1] = "# HELP " .. name .. " " .. help
            lines[#lines + 1] = "# TYPE " .. name .. " " .. kind
            for _, s in ipairs(list) do
                local v = s.value
                if kind == "histogram" then
                    local cum = 0
                    for i, b in ipairs(v.bounds) do
                        cum = cum + v[i]
                        lines[#lines + 1] = name .. "_bucket" .. label_text(s.labels, "le", num(b))
                                            .. " " .. num(cum)
                    end
                    lines[#lines + 1] = name .. "_bucket" .. label_text(s.labels, "le", "+Inf")
                                        .. " " .. num(v.count)
                    lines[#lines + 1] = name .. "_sum" .. label_text(s.labels) .. " " .. num(v.sum)
                    lines[#lines + 1] = name .. "_count" .. label_text(s.labels) .. " "
                                        .. num(v.count)
                else
                    lines[#lines + 1] = name .. label_text(s.labels) .. " " .. num(v)
                end
            end
        end
    end
    lines[#lines + 1] = ""
    return concat(lines, "\n")
end


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

local function encode(samples)
    -- name \t labels (k=v;...) \t value or bucket counts, one series a line;
    -- label text is escaped already, so \t and \n never appear in it raw.
    local out = {}
    for name, list in pairs(samples) do
        for _, s in ipairs(list) do
            local ls = {}
            for i, kv in ipairs(s.labels) do ls[i] = kv[1] .. "=" .. escape(kv[2]) end
            local v = s.value
            local vt
            if type(v) == "table" then
                local parts = { num(v.sum), num(v.count) }
                for i = 1, #v.bounds + 1 do parts[#parts + 1] = num(v[i]) end
                vt = concat(parts, ",")
            else
                vt = num(v)
            end
            out[#out + 1] = name .. "\t" .. concat(ls, ";") .. "\t" .. vt
        end
    end
    return concat(out, "\n")
end

local function unescape(v)
    return (gsub(v, "\\(.)", { n = "\n", ['"'] = '"', ["\\"] = "\\" }))
end

local function decode(text)
    local samples = {}
    for line in text:gmatch("[^\n]+") do
        local name, ls, vt = line:match("^([^\t]+)\t([^\t]*)\t([^\t]+)$")
        if name and HELP[name] then
            local labels = {}
            for k, v in ls:gmatch("([%w_]+)=([^;]*)") do
                labels[#labels + 1] = { k, unescape(v) }
            end
            local value
            if HELP[name][1] == "histogram" then
                local nums = {}
                for x in vt:gmatch("[^,]+") do nums[#nums + 1] = tonumber(x) end
                local bounds = name == "zkcoord_request_seconds" and REQUEST_BUCKETS
                               or WAIT_BUCKETS
                value = { bounds = bounds, sum = nums[1], count = nums[2] }
                for i = 1, #bounds + 1 do value[i] = nums[i + 2] or 0 end
            else
                value = tonumber(vt)
            end
            add(samples, name, labels, value)
        end
    end
    return samples
end


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
        if c:is_closed() then
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
