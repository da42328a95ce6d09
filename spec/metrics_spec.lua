-- zkcoord.metrics against a real server: the text is Prometheus's
-- exposition format (every line checked against its rules), the counts
-- are what happened (requests, lock grants, timeouts, holds, losses,
-- reconnects, expirations), the tracer sees every request, labels stay
-- bounded, and nginx workers' metrics add up in one endpoint.
local zk = require "helpers.zk"
local nginx = require "helpers.nginx"
local tcpproxy = require "helpers.tcpproxy"
local zkcoord = require "zkcoord"
local metrics = require "zkcoord.metrics"

local NAME = "^[a-zA-Z_:][a-zA-Z0-9_:]*$"
local LABEL = "^[a-zA-Z_][a-zA-Z0-9_]*$"
local TYPES = { counter = true, gauge = true, histogram = true, summary = true, untyped = true }

local function parse_value(v)
    if v == "+Inf" or v == "-Inf" or v == "NaN" then return true end
    return v:match("^[-+]?%d+%.?%d*[eE]?[-+]?%d*$") and tonumber(v) ~= nil
end

-- Labels of `{...}` text: { name = value } or nil, why. Values are quoted,
-- with \\, \" and \n the only escapes.
local function parse_labels(text)
    local labels, i = {}, 1
    while i <= #text do
        local name, rest = text:match("^([^=]+)=()", i)
        if not name or not name:match(LABEL) then return nil, "bad label name at " .. i end
        if text:sub(rest, rest) ~= '"' then return nil, "unquoted label value" end
        local j, value = rest + 1, {}
        while true do
            local c = text:sub(j, j)
            if c == "" then return nil, "unterminated label value" end
            if c == '"' then break end
            if c == "\\" then
                local e = text:sub(j + 1, j + 1)
                if e ~= "\\" and e ~= '"' and e ~= "n" then return nil, "bad escape \\" .. e end
                value[#value + 1] = e == "n" and "\n" or e
                j = j + 2
            elseif c == "\n" then
                return nil, "raw newline in a label value"
            else
                value[#value + 1] = c
                j = j + 1
            end
        end
        if labels[name] then return nil, "label " .. name .. " twice" end
        labels[name] = table.concat(value)
        i = j + 1
        local sep = text:sub(i, i)
        if sep == "," then i = i + 1 elseif sep ~= "" then return nil, "junk after a label" end
    end
    return labels
end

-- Every rule of the text format a scraper enforces: returns a list of
-- violations (empty when the text is good) and the families it read.
local function check_exposition(text)
    local bad, families, seen_series, current = {}, {}, {}, nil
    if text:sub(-1) ~= "\n" then bad[#bad + 1] = "no final newline" end
    local n = 0
    for line in text:gmatch("([^\n]*)\n") do
        n = n + 1
        local function fail(why) bad[#bad + 1] = ("line %d: %s: %s"):format(n, why, line) end
        if line == "" then
            fail("empty line")
        elseif line:sub(1, 1) == "#" then
            local kw, name, rest = line:match("^# (%u+) (%S+) ?(.*)$")
            if kw == "HELP" or kw == "TYPE" then
                if not name:match(NAME) then fail("bad metric name") end
                local f = families[name] or { samples = {} }
                families[name] = f
                if kw == "TYPE" then
                    if not TYPES[rest] then fail("bad type") end
                    if f.type then fail("second TYPE") end
                    if #f.samples > 0 then fail("TYPE after samples") end
                    f.type = rest
                else
                    if f.help then fail("second HELP") end
                    f.help = rest
                end
                current = name
            end
        else
            local name, ltext, value = line:match("^([^{ ]+){(.*)} (%S+)$")
            if not name then
                name, value = line:match("^([^{ ]+) (%S+)$")
                ltext = ""
            end
            if not name then
                fail("not a sample")
            else
                if not name:match(NAME) then fail("bad metric name") end
                if not parse_value(value) then fail("bad value") end
                local labels, why = parse_labels(ltext)
                if not labels then fail(why) end
                local base = name:gsub("_bucket$", ""):gsub("_sum$", ""):gsub("_count$", "")
                local fam = families[name] and families[name].type and name or base
                local f = families[fam]
                if not f or not f.type then
                    fail("sample without a TYPE")
                else
                    if fam ~= current then fail("sample away from its family") end
                    if f.type == "counter" and not fam:match("_total$") then
                        fail("counter name without _total")
                    end
                    if f.type == "histogram" and fam == name then fail("bare histogram sample") end
                    local key = line:match("^(.*) %S+$")
                    if seen_series[key] then fail("series twice") end
                    seen_series[key] = true
                    f.samples[#f.samples + 1] = { name = name, labels = labels or {},
                                                  value = tonumber(value) or math.huge }
                end
            end
        end
    end
    -- histograms: buckets ascending and cumulative, +Inf equal to _count
    for fam, f in pairs(families) do
        if f.type == "histogram" then
            local by_series = {}
            for _, s in ipairs(f.samples) do
                local ls = {}
                for k, v in pairs(s.labels) do
                    if k ~= "le" then ls[#ls + 1] = k .. "=" .. v end
                end
                table.sort(ls)
                local key = table.concat(ls, ",")
                local h = by_series[key] or { buckets = {} }
                by_series[key] = h
                if s.name == fam .. "_bucket" then
                    local le = s.labels.le
                    if not le then bad[#bad + 1] = fam .. ": bucket without le" end
                    h.buckets[#h.buckets + 1] = { le = le == "+Inf" and math.huge or tonumber(le),
                                                  v = s.value }
                elseif s.name == fam .. "_count" then
                    h.count = s.value
                elseif s.name == fam .. "_sum" then
                    h.sum = s.value
                end
            end
            for key, h in pairs(by_series) do
                local last_le, last_v = -math.huge, 0
                for _, b in ipairs(h.buckets) do
                    if b.le <= last_le then bad[#bad + 1] = fam .. "{" .. key .. "}: le order" end
                    if b.v < last_v then bad[#bad + 1] = fam .. "{" .. key .. "}: not cumulative" end
                    last_le, last_v = b.le, b.v
                end
                if last_le ~= math.huge then bad[#bad + 1] = fam .. "{" .. key .. "}: no +Inf bucket" end
                if h.count ~= last_v then bad[#bad + 1] = fam .. "{" .. key .. "}: +Inf ~= _count" end
                if not h.sum then bad[#bad + 1] = fam .. "{" .. key .. "}: no _sum" end
            end
        end
    end
    return bad, families
end

-- The value of one series: name and labels (all of them).
local function value_of(families, name, labels)
    local base = name:gsub("_bucket$", ""):gsub("_sum$", ""):gsub("_count$", "")
    local f = families[name] or families[base]
    for _, s in ipairs(f and f.samples or {}) do
        if s.name == name then
            local same = true
            for k, v in pairs(labels or {}) do
                if s.labels[k] ~= v then same = false end
            end
            for k in pairs(s.labels) do
                if not (labels or {})[k] then same = false end
            end
            if same then return s.value end
        end
    end
    return nil
end


describe("the exposition checker", function()
    it("passes good text and names each broken rule", function()
        assert.same({}, (check_exposition(table.concat({
            "# HELP x_total a help", "# TYPE x_total counter", 'x_total{a="b\\"c"} 3',
            "# TYPE h histogram", 'h_bucket{le="1"} 1', 'h_bucket{le="+Inf"} 2', "h_sum 1.5",
            "h_count 2", "" }, "\n"))))
        local cases = {
            { "# TYPE x counter\nx 1\n", "counter name without _total" },
            { "x_total 1\n", "sample without a TYPE" },
            { "# TYPE x_total counter\nx_total{a=b} 1\n", "unquoted label value" },
            { "# TYPE x_total counter\nx_total 1\nx_total 2\n", "series twice" },
            { "# TYPE x_total counter\nx_total one\n", "bad value" },
            { "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
              "not cumulative" },
            { "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "no +Inf bucket" },
            { "# TYPE x_total counter\nx_total 1", "no final newline" },
        }
        for _, c in ipairs(cases) do
            local bad = check_exposition(c[1])
            assert.truthy(table.concat(bad, "\n"):find(c[2], 1, true), c[2] .. " not seen in: "
                          .. table.concat(bad, "; "))
        end
    end)
end)


describe("zkcoord.metrics #zk #nosan", function()
    local root, admin

    lazy_setup(function()
        root = zk.new_root("metrics")
        admin = zk.admin()
    end)

    lazy_teardown(function()
        zk.close_clients()
        zk.delete_tree(admin, root)
    end)

    it("counts requests, grants, timeouts, holds and losses, in the exposition format", function()
        local traced = {}
        local c = assert(zk.client { tracer = function(op, path, seconds, result)
            traced[#traced + 1] = { op, path, seconds, result }
        end })
        local other = assert(zk.client())
        local path = root .. "/lock-a"
        local lock, busy = c:lock(path), other:lock(path)
        assert(lock:acquire(5))
        assert.same({ nil, "timeout" }, { busy:acquire(0.2) })
        assert(lock:release())
        assert.is_nil((c:get(root .. "/none")))
        local bad, fam = check_exposition(metrics.prometheus(c))
        assert.same({}, bad)
        assert.equal(1, value_of(fam, "zkcoord_lock_acquires_total", { path = path, result = "ok" }))
        assert.equal(1, value_of(fam, "zkcoord_lock_wait_seconds_count", { path = path }))
        assert.equal(1, value_of(fam, "zkcoord_lock_hold_seconds_count", { path = path }))
        assert.is_true(value_of(fam, "zkcoord_requests_total", { op = "create", result = "ok" }) >= 1)
        assert.equal(1, value_of(fam, "zkcoord_requests_total", { op = "get", result = "nonode" }))
        assert.equal(1, value_of(fam, "zkcoord_session_connected"))
        -- the other client saw the timeout
        local _, fam2 = check_exposition(metrics.prometheus(other))
        assert.equal(1, value_of(fam2, "zkcoord_lock_acquires_total", { path = path, result = "timeout" }))
        -- both together: series add up
        local _, both = check_exposition(metrics.prometheus(c, other))
        assert.equal(2, value_of(both, "zkcoord_session_connected"))
        -- the tracer saw the failed get, with its path and a time
        local seen
        for _, t in ipairs(traced) do
            if t[1] == "get" and t[2] == root .. "/none" then seen = t end
        end
        assert.truthy(seen)
        assert.equal("nonode", seen[4])
        assert.is_true(seen[3] >= 0 and seen[3] < 5)
    end)

    it("counts a lost hold, a reconnect and an expiry", function()
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)"))))
        local c = assert(zkcoord.connect { servers = proxy.hosts, session_timeout = 4,
                                           connect_timeout = 5 })
        local path = root .. "/lock-b"
        local lock = c:lock(path)
        lock:on_lost(function() end)
        assert(lock:acquire(5))
        -- a cut the session survives: a reconnect
        local states = {}
        c:on_state(function(new) states[#states + 1] = new end)
        proxy:cut()
        assert(zk.wait_until(function() return states[2] == "connected" end, 8, c))
        assert.same({ "suspended", "connected" }, states)
        proxy:pass()
        -- an expiry: the hold is lost
        assert(zk.expire_session(c))
        assert(zk.wait_until(function() return not lock:held() end, 8, c))
        assert.same({ nil, "lost" }, { lock:release() })
        assert(zk.wait_until(function() return c:state() == "connected" end, 8, c))
        local bad, fam = check_exposition(metrics.prometheus(c))
        assert.same({}, bad)
        assert.equal(1, value_of(fam, "zkcoord_session_reconnects_total"))
        assert.equal(1, value_of(fam, "zkcoord_session_expirations_total"))
        assert.is_true(value_of(fam, "zkcoord_session_disconnected_seconds_total") > 0)
        local lost = 0
        for _, why in ipairs { "sessionexpired", "lost", "deleted" } do
            lost = lost + (value_of(fam, "zkcoord_lock_lost_total", { path = path, reason = why }) or 0)
        end
        assert.equal(1, lost)
        c:close()
        proxy:stop()
    end)

    it("counts a cohort's local and remote grants, and its holds", function()
        local c = assert(zk.client())
        local path = root .. "/lock-cohort"
        local lock = c:lock(path, { cohort = true })
        local order = {}
        -- three coroutines of one process: the first joins the line, the
        -- others are handed the node locally
        for i = 1, 3 do
            c:spawn(function()
                assert(lock:acquire(5))
                order[#order + 1] = i
                c:waiter():sleep(0.05)
                assert(lock:release())
            end)
        end
        assert.is_true(c:run(10))
        assert.equal(3, #order)
        local bad, fam = check_exposition(metrics.prometheus(c))
        assert.same({}, bad)
        assert.equal(1, value_of(fam, "zkcoord_lock_cohort_handoffs_total", { path = path, kind = "remote" }))
        assert.equal(2, value_of(fam, "zkcoord_lock_cohort_handoffs_total", { path = path, kind = "local" }))
        assert.equal(3, value_of(fam, "zkcoord_lock_hold_seconds_count", { path = path }))
        assert.is_true(value_of(fam, "zkcoord_lock_hold_seconds_sum", { path = path }) >= 0.1)
    end)

    it("keeps the path label bounded", function()
        local reg = metrics.new { max_paths = 2 }
        for i = 1, 5 do
            reg:lock_acquire("/p" .. i, "ok", 0.01)
        end
        local labels = {}
        for _, s in ipairs(reg:samples().zkcoord_lock_acquires_total) do
            labels[#labels + 1] = s.labels[1][2] .. "=" .. s.value
        end
        assert.same({ "/p1=1", "/p2=1", "other=3" }, labels)
    end)

    it("raises on a wrong argument", function()
        assert.has_error(function() metrics.prometheus() end)
        assert.has_error(function() metrics.prometheus({}) end)
    end)
end)


local APP = [==[
local zn = require "zkcoord.ngx"
local metrics = require "zkcoord.metrics"
local _M = {}

function _M.init_worker()
    zn.init_worker { servers = os.getenv("ZK_HOSTS"), session_timeout = 10, sock_dir = "/tmp" }
    assert(metrics.ngx_publish(zn.client, "zk_metrics", 0.2))
end

function _M.work()
    local c = assert(zn.client())
    local l = c:lock("@ROOT@/ngx-lock")
    assert(l:acquire(5))
    l:release()
    ngx.say(ngx.worker.pid())
end

function _M.metrics()
    ngx.print(metrics.ngx_collect("zk_metrics", zn.client()))
end

return _M
]==]

local HTTP = [[
    lua_shared_dict zk_metrics 1m;
    init_worker_by_lua_block { require("app").init_worker() }
    exit_worker_by_lua_block { require("zkcoord.ngx").exit_worker() }
    server {
        listen 127.0.0.1:@PORT@ reuseport;
        location = /work { content_by_lua_block { require("app").work() } }
        location = /metrics { content_by_lua_block { require("app").metrics() } }
    }
]]

describe("zkcoord.metrics in nginx #zk #ngx #nosan", function()
    local root, n, admin

    lazy_setup(function()
        root = zk.new_root("ngxmetrics")
        admin = zk.admin()
        n = assert(nginx.start {
            workers = 2,
            env = { ZK_HOSTS = zk.hosts() },
            vars = { ROOT = root },
            lua_modules = { app = APP },
            http = HTTP,
        })
    end)

    lazy_teardown(function()
        if n then n:destroy() end
        zk.close_clients()
        zk.delete_tree(admin, root)
    end)

    it("one endpoint adds up every worker's metrics", function()
        -- requests until both workers have served one (reuseport spreads them)
        local pids, served = {}, 0
        for _ = 1, 200 do
            local status, body = n:get("/work")
            assert.equal(200, status, tostring(body) .. n:log_tail())
            served = served + 1
            pids[body] = true
            local k = 0
            for _ in pairs(pids) do k = k + 1 end
            if k == 2 and served >= 10 then break end
        end
        local k = 0
        for _ in pairs(pids) do k = k + 1 end
        assert.equal(2, k, "both workers served")
        -- every worker publishes every 0.2 s: wait until the sum is all
        local fam, text
        assert(zk.wait_until(function()
            local status
            status, text = n:get("/metrics")
            assert.equal(200, status)
            local bad
            bad, fam = check_exposition(text)
            assert.same({}, bad)
            return value_of(fam, "zkcoord_lock_acquires_total",
                            { path = root .. "/ngx-lock", result = "ok" }) == served
        end, 5), text)
        assert.equal(2, value_of(fam, "zkcoord_session_connected"))
    end)
end)
