--- zkcoord.metrics.registry: one client's metrics as it records them
--- (internal): the metrics' names and kinds, histograms, the registry a
--- client updates on every request and state change, and its samples.
local core = require "zkcoord.core"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local setmetatable = setmetatable
local sort = table.sort
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
_M.HELP, _M.ORDER = HELP, ORDER


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


-- Samples: name -> list of { labels = {{k, v}, ...}, value = n } or histogram.
local function add(samples, name, labels, value)
    local s = samples[name]
    if not s then
        s = {}
        samples[name] = s
    end
    s[#s + 1] = { labels = labels, value = value }
end
_M.add = add

local function sorted_keys(t)
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = k end
    sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    return keys
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


return _M
