-- Every bad argument raises, with a clear message in Lua's style, before
-- anything reaches the server or the C core: the fuzzer's findings K2-K6
-- and K14 (tools/fuzz/known.lua), each with the exact message it raises now.
local zk = require "helpers.zk"
local zkcoord = require "zkcoord"
local queue = require "zkcoord.queue"
local ffi = require "ffi"
local contract = require "zkcoord.contract"

-- Values that are not the object a method belongs to: none of them may be
-- indexed by the check (a number, a boolean, cdata ...).
local function wrong_selves(extra)
    local t = { 5, true, false, "x", {}, function() end, ffi.new("int64_t", 7),
                ffi.new("void *"), io.stdout, coroutine.create(function() end),
                newproxy(true), zkcoord, setmetatable({}, { __index = function()
                    error("the check indexed its self")
                end }) }
    for _, v in ipairs(extra or {}) do t[#t + 1] = v end
    return t
end

-- Raises exactly `msg`, blaming the caller (this file), not the library.
local function raises_here(msg, fn, ...)
    local ok, err = pcall(fn, ...)
    assert.is_false(ok, "did not raise: " .. msg)
    assert.is_string(err)
    local where, text = err:match("^(.-:%d+): (.*)$")
    assert.equal(msg, text or err)
    assert.matches("arguments_spec%.lua:%d+$", where or "?", 1, false,
                   "blames " .. tostring(where) .. ", not the caller")
end

-- connect with `opts` over working ones raises exactly "bad argument #1 to
-- 'connect' (<msg>)", blaming this file.
local function bad_connect(msg, opts)
    local o = { servers = zk.hosts(), connect_timeout = 2 }
    for k, v in pairs(opts) do o[k] = v end
    raises_here("bad argument #1 to 'connect' (" .. msg .. ")",
                function() local _ = zkcoord.connect(o) end)
end

local NAN, HUGE = 0 / 0, math.huge

describe("argument checks #zk", function()
    local root, c

    before_each(function()
        root = zk.new_root("args")
        c = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    describe("K2: every client method checks self", function()
        local METHODS = { "fd", "process", "log", "remove_listener", "session_id",
                          "session_password", "session_timeout", "state", "stats", "waiter",
                          "spawn", "run", "dispatch", "on_state", "wait_connected", "close",
                          "send", "get", "create", "multi", "delete_guaranteed",
                          "remove_watches", "lock", "queue" }

        it("raises '<m>' must be called on a zkcoord client for any other self", function()
            for _, name in ipairs(METHODS) do
                local msg = ("'%s' must be called on a zkcoord client (use client:%s(...))")
                    :format(name, name)
                for _, bad in ipairs(wrong_selves({ c:send("exists", "/") })) do
                    assert.has_error(function() c[name](bad) end, msg)
                end
                assert.has_error(function() c[name]() end, msg)
            end
            -- the message blames the caller
            raises_here("'state' must be called on a zkcoord client (use client:state(...))",
                        function() local _ = c.state(5) end)
            raises_here("'fd' must be called on a zkcoord client (use client:fd(...))",
                        function() local _ = c.fd(ffi.new("int64_t", 7)) end)
        end)

        it("still works on a client", function()
            assert.equal("connected", c:state())
            assert.is_number(c:fd())
            c:process()
            assert.matches("^%x+$", c:session_id())
            assert.equal(16, #c:session_password())
            assert.is_number(c:session_timeout())
            assert.is_table(c:waiter())
            assert.equal("connected", c:stats().state)
            local fn = c:on_state(function() end)
            assert.is_true(c:remove_listener(fn))
            assert.is_false(c:remove_listener(fn))
            c:log("debug", "hello")
        end)

        it("checks the arguments of log, remove_listener and spawn", function()
            raises_here("bad argument #1 to 'log' (level must be 'error', 'warn', 'info' or 'debug')",
                        function() c:log(5, "x") end)
            raises_here("bad argument #1 to 'log' (level must be 'error', 'warn', 'info' or 'debug')",
                        function() c:log(nil, "x") end)
            raises_here("bad argument #2 to 'log' (message must be a string, got table)",
                        function() c:log("error", {}) end)
            raises_here("bad argument #1 to 'remove_listener' (function expected, got number)",
                        function() c:remove_listener(5) end)
            raises_here("bad argument #1 to 'spawn' (function expected, got nil)",
                        function() c:spawn() end)
        end)
    end)

    describe("K3: futures", function()
        it("wait and on_done check self", function()
            local f = c:send("exists", "/")
            for _, bad in ipairs(wrong_selves({ c })) do
                assert.has_error(function() f.wait(bad) end,
                                 "'wait' must be called on a future (use future:wait(...))")
                assert.has_error(function() f.on_done(bad, print) end,
                                 "'on_done' must be called on a future (use future:on_done(...))")
            end
            raises_here("'wait' must be called on a future (use future:wait(...))",
                        function() local _ = f.wait(nil, 1) end)
            assert.is_table(f:wait())
        end)

        it("wait refuses a timeout that is not nil or a number >= 0 (NaN too)", function()
            local msg = "bad argument #1 to 'wait' (timeout must be nil or a number >= 0)"
            for _, bad in ipairs({ "x", "1", -1, -1e-9, NAN, -HUGE, {}, true, print,
                                   ffi.new("int64_t", 1) }) do
                local f = c:send("exists", "/")
                raises_here(msg, function() local _ = f:wait(bad) end)
                assert.is_table(f:wait(5))      -- the future is still usable
            end
            -- also once the results are there
            local done = c:send("exists", "/")
            done:wait()
            raises_here(msg, function() local _ = done:wait(-1) end)
            -- and on a future that failed before it was sent
            c:close()
            local failed = c:send("get", "/a")
            raises_here(msg, function() local _ = failed:wait("x") end)
            assert.same({ nil, "closed" }, { failed:wait(0) })
        end)

        it("on_done refuses a non-function", function()
            local f = c:send("exists", "/")
            for _, bad in ipairs({ 5, "x", {}, true }) do
                raises_here("bad argument #1 to 'on_done' (function expected, got " .. type(bad)
                            .. ")", function() local _ = f:on_done(bad) end)
            end
            raises_here("bad argument #1 to 'on_done' (function expected, got nil)",
                        function() local _ = f:on_done() end)
            local got
            f:on_done(function(stat) got = stat end)
            c:dispatch(0.5)
            assert.is_table(got)
        end)
    end)

    describe("K4: lock methods check self", function()
        it("raises '<m>' must be called on a lock, never indexes the self", function()
            local l = c:lock("/lk")
            local other = c:rwlock("/rw")
            for _, name in ipairs({ "acquire", "release", "held", "token", "node", "count",
                                    "on_lost", "contenders" }) do
                local msg = ("'%s' must be called on a lock (use lock:%s(...))"):format(name, name)
                for _, bad in ipairs(wrong_selves({ c, other, c:counter("/ctr") })) do
                    assert.has_error(function() l[name](bad) end, msg)
                end
                assert.has_error(function() l[name]() end, msg)
            end
            raises_here("'acquire' must be called on a lock (use lock:acquire(...))",
                        function() local _ = l.acquire(5, 1) end)
            raises_here("'release' must be called on a lock (use lock:release(...))",
                        function() local _ = l.release(true) end)
            raises_here("'held' must be called on a lock (use lock:held(...))",
                        function() local _ = l.held(ffi.new("int64_t", 7)) end)
        end)

        it("still works on a lock, and on the locks of a rwlock", function()
            local l = c:lock("/lk")
            assert.is_true(l:acquire(5))
            assert.is_true(l:held())
            assert.equal(1, l:count())
            assert.is_number(l:token())
            assert.is_string(l:node())
            assert.equal(1, #l:contenders())
            l:on_lost(function() end)
            assert.is_true(l:release())
            local r = c:rwlock("/rw"):read_lock()
            assert.is_true(r:acquire(5))
            assert.is_true(r:held())
            assert.is_true(r:release())
            raises_here("bad argument #1 to 'acquire' (timeout must be nil or a number >= 0)",
                        function() local _ = l:acquire(NAN) end)
        end)
    end)

    describe("K5: queue", function()
        local function q_opts(extra)
            local o = { marker = "m-", rule = queue.rule_first }
            for k, v in pairs(extra or {}) do o[k] = v end
            return o
        end

        it("methods check self", function()
            local q = queue.new(c, "/q", q_opts())
            for _, name in ipairs({ "enter", "leave", "entries", "participants", "is_through",
                                    "node", "seq", "stat", "on_lost", "parse", "watch_line" }) do
                local msg = ("'%s' must be called on a line position (use q:%s(...))")
                    :format(name, name)
                for _, bad in ipairs(wrong_selves({ c, c:lock("/lk") })) do
                    assert.has_error(function() q[name](bad) end, msg)
                end
            end
            raises_here("'enter' must be called on a line position (use q:enter(...))",
                        function() local _ = q.enter(5, 1) end)
        end)

        it("enter refuses a timeout that is not nil or a number >= 0", function()
            local q = queue.new(c, "/q", q_opts())
            for _, bad in ipairs({ "0.1", "x", -1, NAN, -HUGE, {}, true }) do
                raises_here("bad argument #1 to 'enter' (timeout must be nil or a number >= 0)",
                            function() local _ = q:enter(bad) end)
            end
            assert.same({}, q:entries())           -- nothing was created
            assert.is_true(q:enter(1))
            assert.is_true(q:is_through())
            assert.equal(1, #q:entries())
            q:leave()
        end)

        it("on_lost and parse check their arguments", function()
            local q = queue.new(c, "/q", q_opts())
            raises_here("bad argument #1 to 'on_lost' (function expected, got number)",
                        function() local _ = q:on_lost(5) end)
            raises_here("bad argument #1 to 'parse' (names must be an array of strings, got string)",
                        function() local _ = q:parse("m-1") end)
            raises_here("bad argument #1 to 'parse' (names[2] must be a string)",
                        function() local _ = q:parse({ "a", 5 }) end)
            assert.equal(1, #q:parse({ "_c_x-m-0000000001", "other" }))
        end)

        it("new checks the client, markers and the other options", function()
            local function bad(msg, client, opts)
                raises_here("bad argument #3 to 'line.new' (" .. msg .. ")",
                            function() local _ = queue.new(client or c, "/q", opts) end)
            end
            raises_here("bad argument #1 to 'line.new' (zkcoord client expected, got number)",
                        function() local _ = queue.new(5, "/q", q_opts()) end)
            raises_here("bad argument #1 to 'line.new' (zkcoord client expected, got table)",
                        function() local _ = queue.new({}, "/q", q_opts()) end)
            bad("opts must be a table with a marker and a rule function, got nil", c, nil)
            local marker_msg = "marker must be a non-empty string without '/' or control characters"
            for _, m in ipairs({ "", 5, "a/b", "a\0b", "a\nb" }) do
                bad(marker_msg, c, q_opts({ marker = m }))
            end
            bad(marker_msg, c, { rule = queue.rule_first })
            bad("rule must be a function, got string", c, q_opts({ rule = "rule" }))
            bad("unknown option 'bogus' (marker, markers, rule, data, parents, persistent)", c,
                q_opts({ bogus = 1 }))
            bad("persistent must be a boolean, got string", c, q_opts({ persistent = "yes" }))
            local markers_msg = "markers must be a non-empty array of strings, without holes"
            bad(markers_msg, c, q_opts({ markers = "m-" }))          -- was: ipairs on a string
            bad(markers_msg, c, q_opts({ markers = {} }))
            bad(markers_msg, c, q_opts({ markers = { "m-", nil, "x-" } }))
            bad(markers_msg, c, q_opts({ markers = { "m-", x = "x-" } }))
            bad("markers[2] must be a non-empty string without '/' or control characters", c,
                q_opts({ markers = { "m-", 5 } }))
            bad("markers[1] must be a non-empty string without '/' or control characters", c,
                q_opts({ markers = { "" } }))
            bad("markers must be distinct: 'm-' is there twice", c,
                q_opts({ markers = { "m-", "m-" } }))
            bad("opts.marker must be one of opts.markers", c, q_opts({ markers = { "x-" } }))
            bad("data must be a string, got number", c, q_opts({ data = 5 }))
            bad("parents must be 'container' or 'persistent'", c, q_opts({ parents = 5 }))
            -- valid ones
            assert.is_table(queue.new(c, "/q", q_opts({ markers = { "x-", "m-" }, data = "d",
                                                         parents = "persistent" })))
            assert.is_table(c:queue("/q", q_opts()))
        end)

        it("a rule's bad verdict raises in 'enter', shows it, and leaves no node", function()
            local function verdict_msg(what)
                return "bad rule verdict in 'enter' (the rule of the line at /q returned " .. what
                       .. ": a rule returns true, line.ANY or one of the entries it was given)"
            end
            local q = queue.new(c, "/q", q_opts({ rule = function() return "junk" end }))
            raises_here(verdict_msg('the string "junk"'), function() local _ = q:enter(1) end)
            q = queue.new(c, "/q", q_opts({ rule = function() end }))
            raises_here(verdict_msg("nil"), function() local _ = q:enter(1) end)
            q = queue.new(c, "/q", q_opts({ rule = function() return false end }))
            raises_here(verdict_msg("a boolean (false)"), function() local _ = q:enter(1) end)
            -- a table that looks like an entry but is not one of those given
            q = queue.new(c, "/q", q_opts({ rule = function(entries, me)
                return { name = entries[me].name, path = entries[me].path }
            end }))
            local ok, err = pcall(q.enter, q, 1)
            assert.is_false(ok)
            assert.matches("returned an entry that is not in the line it was given (_c_",
                           err, 1, true)
            -- our own entry: waiting on it would never end
            q = queue.new(c, "/q", q_opts({ rule = function(entries, me) return entries[me] end }))
            raises_here("bad rule verdict in 'enter' (the rule of the line at /q returned our "
                        .. "own entry: waiting on it would never end)",
                        function() local _ = q:enter(1) end)
            c:sync("/q")
            assert.equal(0, #(c:children("/q") or {}))
        end)

        it("a rule maker passed uncalled raises with a hint; a rule that raises leaves no node",
           function()
            local q = queue.new(c, "/q", q_opts({ rule = queue.rule_fewer_than }))
            raises_here("bad argument #1 to 'rules.fewer_than' (n must be an integer >= 1, "
                        .. "got a table: pass rules.fewer_than(n) as the rule, not "
                        .. "rules.fewer_than)", function() local _ = q:enter(1) end)
            raises_here("bad argument #1 to 'rules.fewer_than' (n must be an integer >= 1, "
                        .. "got 0)", function() local _ = queue.rule_fewer_than(0) end)
            q = queue.new(c, "/q", q_opts({ rule = function() error("rule bug", 0) end }))
            assert.has_error(function() q:enter(1) end, "rule bug")
            c:sync("/q")
            assert.equal(0, #(c:children("/q") or {}))
            assert.is_nil(q:node())
        end)
    end)

    describe("K6: connect options are checked by content", function()
        local bad = bad_connect

        it("auth entries", function()
            local entry = "must be a table with a non-empty string scheme and a string credentials"
            bad("auth[1] " .. entry, { auth = { 5 } })
            bad("auth[1] " .. entry, { auth = { scheme = 5 } })
            bad("auth[1] " .. entry, { auth = { credentials = "u:p" } })
            bad("auth[1] " .. entry, { auth = { scheme = "digest" } })
            bad("auth[1] " .. entry, { auth = { scheme = "", credentials = "u:p" } })
            bad("auth[2] " .. entry, { auth = { { scheme = "digest", credentials = "u:p" }, {} } })
            bad("auth must be { scheme =, credentials = } or an array of them, without holes",
                { auth = { { scheme = "digest", credentials = "u:p" }, nil,
                           { scheme = "digest", credentials = "u:q" } } })
            bad("auth must be { scheme =, credentials = } or an array of them, without holes",
                { auth = { x = 1 } })
            -- valid: one entry, an array, none
            local a = zk.client { chroot = root, auth = { scheme = "digest", credentials = "a:b" } }
            local b = zk.client { chroot = root, auth = { { scheme = "digest", credentials = "a:b" },
                                                          { scheme = "digest", credentials = "c:d" } } }
            assert.equal("connected", a:state())
            assert.equal("connected", b:state())
            assert.equal("connected", zk.client { chroot = root, auth = {} }:state())
        end)

        it("retry", function()
            local tries = "retry.max_tries must be an integer >= 1"
            for _, v in ipairs({ "x", 0, -1, 1.5, NAN, HUGE, {} }) do
                bad(tries, { retry = { max_tries = v } })
            end
            for _, k in ipairs({ "base_delay", "max_delay" }) do
                for _, v in ipairs({ "x", -1, NAN, -HUGE, true }) do
                    bad("retry." .. k .. " must be a number of seconds >= 0",
                        { retry = { [k] = v } })
                end
                bad("retry." .. k .. " must be at most 600 seconds (math.huge is no limit only "
                    .. "for timeouts)", { retry = { [k] = HUGE } })
                bad("retry." .. k .. " = 1000 is over 600: seconds, not milliseconds",
                    { retry = { [k] = 1000 } })
            end
            bad("unknown retry option 'tries' (max_tries, base_delay, max_delay)",
                { retry = { tries = 3 } })
            assert.equal("connected", zk.client { chroot = root,
                retry = { max_tries = 2, base_delay = 0, max_delay = 0.5 } }:state())
        end)

        it("wait", function()
            assert.is_nil(rawget(_G, "ngx"))
            bad("wait = 'ngx' needs OpenResty (there is no ngx API here): use 'blocking' or 'auto'",
                { wait = "ngx" })
            bad("wait must be 'auto', 'blocking', 'ngx' or a waiter table", { wait = "bogus" })
            bad("wait has no method 'event' (a waiter needs event, sleep and defer)", { wait = {} })
            bad("wait has no method 'defer' (a waiter needs event, sleep and defer)",
                { wait = { event = print, sleep = print } })
            bad("wait.new must be a function (client) -> waiter", { wait = { new = 5 } })
            bad("the waiter that wait.new(client) returned must be a table, got number",
                { wait = { new = function() return 5 end } })
            bad("the waiter that wait.new(client) returned has no method 'event' (a waiter needs "
                .. "event, sleep and defer)", { wait = { new = function() return {} end } })
            -- valid: a waiter module, by name or as a table
            assert.equal("connected", zk.client { chroot = root, wait = "blocking" }:state())
            assert.equal("connected", zk.client { chroot = root,
                                                  wait = require "zkcoord.wait.blocking" }:state())
        end)

        it("zk_log_level, max_packet_size, resolve_interval", function()
            for _, v in ipairs({ 5, -1, 1.5, NAN, HUGE }) do
                bad("zk_log_level must be an integer from 0 (off) to 4 (debug)", { zk_log_level = v })
            end
            for _, v in ipairs({ 0, -1, 1.5, NAN, HUGE }) do
                bad("max_packet_size must be a positive integer (bytes)", { max_packet_size = v })
            end
            for _, v in ipairs({ -2, -0.5, NAN }) do
                bad("resolve_interval must be -1 (only on connection loss) or a number of "
                    .. "seconds >= 0", { resolve_interval = v })
            end
            bad("resolve_interval = 10000000000 is over 600: seconds, not milliseconds",
                { resolve_interval = 1e10 })
            assert.equal("connected", zk.client { chroot = root, zk_log_level = 0,
                                                  resolve_interval = -1 }:state())
        end)

        it("session_id and session_password", function()
            local pw = ("p"):rep(16)
            for _, v in ipairs({ "zz", "", "0123456789abcde", "0123456789abcdef0",
                                 "0123456789abcdeg", "0x23456789abcdef" }) do
                bad("session_id must be 16 hex digits, as client:session_id() returns",
                    { session_id = v, session_password = pw })
            end
            bad("session_id needs session_password (client:session_password())",
                { session_id = "0123456789abcdef" })
            bad("session_password needs session_id", { session_password = pw })
            for _, v in ipairs({ "short", "", ("p"):rep(17) }) do
                bad("session_password must be 16 bytes, as client:session_password() returns",
                    { session_id = "0123456789abcdef", session_password = v })
            end
            -- valid: resume a session (here a throwaway one), its id in upper case too
            local quiet = function() end
            local victim = zk.client { chroot = root, reconnect = false, logger = quiet }
            local sid, spw = victim:session_id(), victim:session_password()
            local again = assert(zkcoord.connect { servers = zk.hosts(), session_id = sid:upper(),
                                                   session_password = spw, reconnect = false,
                                                   logger = quiet })
            assert.equal(sid, again:session_id())
            again:close()
        end)

        it("servers arrays without holes", function()
            bad("servers must be a string or a non-empty array without holes",
                { servers = { zk.hosts(), nil, zk.hosts() } })
            bad("servers[2] must be a non-empty string", { servers = { zk.hosts(), 5 } })
            assert.equal("connected", zk.client { chroot = root, servers = { zk.hosts() } }:state())
        end)
    end)

    describe("K14: multi ops with holes", function()
        it("raises instead of sending an empty list", function()
            local op = { op = "create", path = "/m" }
            local holes = "bad argument #1 to 'multi' (ops must be an array without holes)"
            assert.has_error(function() c:multi({ nil, op, op }) end, holes)
            assert.has_error(function() c:multi({ op, nil, op }) end, holes)
            assert.has_error(function() c:send("multi", { nil, op }) end, holes)
            local ops = { op }
            ops[4] = op
            assert.has_error(function() c:multi(ops) end, holes)
            assert.has_error(function() c:multi({ op, x = op }) end,
                             "bad argument #1 to 'multi' (ops must be a non-empty array (a key "
                             .. "is not a positive integer: x))")
            assert.has_error(function() c:multi({}) end,
                             "bad argument #1 to 'multi' (ops must be a non-empty array)")
            assert.is_false(c:exists("/m"))
            -- an array still works
            local r = assert(c:multi({ op, { op = "create", path = "/m/a" } }))
            assert.equal("/m/a", r[2].path)
        end)
    end)
    describe("one rule for every wait's timeout (issue 21.5)", function()
        -- Every call of the API that waits, each with the position and
        -- function name its timeout is checked under; NaN waited for ever
        -- in the waiter (sleep, event:wait), a negative number or a
        -- numeric string returned false there at once.
        local function waits()
            local w = c:waiter()
            local line = { marker = "m-", rule = queue.rule_first }
            return {
                { "sleep", 1, function(t) return w:sleep(t) end },
                { "wait", 1, function(t) return w:event():wait(t) end },
                { "wait", 1, function(t) return c:send("exists", "/"):wait(t) end },
                { "dispatch", 1, function(t) return c:dispatch(t) end },
                { "wait_connected", 1, function(t) return c:wait_connected(t) end },
                { "run", 1, function(t) return c:run(t) end },
                { "acquire", 1, function(t) return c:lock("/l"):acquire(t) end },
                { "acquire", 1, function(t) return c:rwlock("/rw"):read_lock():acquire(t) end },
                { "acquire", 1, function(t) return c:rwlock("/rww"):write_lock():acquire(t) end },
                { "acquire", 1, function(t) return c:semaphore("/s", 2):acquire(t) end },
                { "acquire", 1, function(t) return c:multi_lock({ "/m1", "/m2" }):acquire(t) end },
                { "campaign", 1, function(t) return c:election("/e"):campaign(t) end },
                { "wait", 1, function(t) return c:barrier("/b"):wait(t) end },
                { "enter", 1, function(t) return c:double_barrier("/db", 1):enter(t) end },
                { "leave", 1, function(t) return c:double_barrier("/db2", 1):leave(t) end },
                { "join", 1, function(t) return c:group("/g", { id = "me" }):join(t) end },
                { "take", 1, function(t) return c:work_queue("/wq"):take(t) end },
                { "put", 2, function(t) return c:work_queue("/wq"):put("x", { timeout = t }) end },
                { "enter", 1, function(t) return queue.new(c, "/q", line):enter(t) end },
                { "wait", 1, function(t) return c:persistent_node("/pn"):wait(t) end },
                { "cache", 2, function(t) return c:cache("/", { timeout = t }) end },
                { "watch", 3, function(t) return c:watch("/", function() end, { timeout = t }) end },
                { "counter", 2, function(t) return c:counter("/ctr", { timeout = t }) end },
            }
        end

        it("NaN, negative numbers and non-numbers raise, in the same words everywhere", function()
            for _, wait in ipairs(waits()) do
                local name, n, call = wait[1], wait[2], wait[3]
                -- sleep has no "no timeout": nil raises there too
                local msg = ("bad argument #%d to '%s' (timeout must be %sa number >= 0)")
                    :format(n, name, name == "sleep" and "" or "nil or ")
                for _, bad in ipairs({ -1, -1e-9, -HUGE, "1", "0", NAN, {}, true, print,
                                       ffi.new("int64_t", 1), ffi.cast("void *", nil) }) do
                    raises_here(msg, function() local _ = call(bad) end)
                end
                if name == "sleep" then
                    raises_here(msg, function() local _ = call(nil) end)
                end
            end
            -- nothing was made by a refused call (a persistent node is made by
            -- its constructor, before its wait)
            zk.admin():sync(root)
            assert.same({ "pn" }, zk.admin():children(root))
        end)

        it("a finite timeout above 600 is milliseconds by mistake: raises (issue 28.7)",
           function()
            -- lock:acquire(5000) waited 83 minutes. The waiter's primitives
            -- (sleep, an event's or a future's wait: entries 1-3) take any
            -- number >= 0: the library's own waits pass sums of bounds there.
            -- First a wait that returns at once if taken (a free lock): the
            -- others would wait for their 5000 s.
            raises_here("bad argument #1 to 'acquire' (timeout = 5000 is over 600: seconds, not "
                        .. "milliseconds (math.huge: no limit))",
                        function() local _ = c:lock("/free"):acquire(5000) end)
            for i, wait in ipairs(waits()) do
                local name, n, call = wait[1], wait[2], wait[3]
                if i > 3 then
                    for _, v in ipairs({ 5000, 600.5, 1e300, 2 ^ 63 }) do
                        raises_here(("bad argument #%d to '%s' (timeout = %.17g is over 600: "
                                     .. "seconds, not milliseconds (math.huge: no limit))")
                                    :format(n, name, v), function() local _ = call(v) end)
                    end
                end
            end
            -- nothing was made by a refused call
            zk.admin():sync(root)
            assert.same({ "pn" }, zk.admin():children(root))
            -- 600 itself is a timeout; a run's and a process's too
            assert.is_true(c:lock("/l600"):acquire(600))
            raises_here("bad argument #2 to 'run' (timeout = 5000 is over 600: seconds, not "
                        .. "milliseconds (math.huge: no limit))",
                        function() c:lock("/l600"):run(function() end, 5000) end)
            raises_here("bad argument #2 to 'process' (timeout = 5000 is over 600: seconds, not "
                        .. "milliseconds (math.huge: no limit))",
                        function() c:work_queue("/wq"):process(function() end, 5000) end)
            raises_here("bad argument #2 to 'delete' (timeout = 5000 is over 600: seconds, not "
                        .. "milliseconds (math.huge: no limit))",
                        function() c:delete("/x", { recursive = true, timeout = 5000 }) end)
            -- the primitives take more: they return when what they wait for comes
            assert.is_table(c:send("exists", "/"):wait(5000))
            local ev = c:waiter():event()
            ev:set()
            assert.is_true(ev:wait(5000))
        end)

        it("math.huge is no limit: each wait ends when what it waits for happens", function()
            local got = {}
            for i, wait in ipairs(waits()) do
                local name, call = wait[1], wait[3]
                -- these wait for something nobody does here: for ever
                if name ~= "sleep" and name ~= "dispatch" and name ~= "take" and i ~= 2 then
                    local ok, r = pcall(call, HUGE)
                    assert.is_true(ok, name .. ": " .. tostring(r))
                    got[i] = r
                end
            end
            assert.truthy(got[7], "lock:acquire(math.huge)")
            assert.is_true(c:work_queue("/wq"):take(HUGE) ~= nil)
            -- an event set later by a watch: the wait returns true when it is set
            local other = zk.client { chroot = root }
            local ev = c:waiter():event()
            assert(c:create("/x", "0"))
            c:get("/x", function() ev:set() end)
            local t0 = zkcoord.now()
            c:spawn(function() c:waiter():sleep(0.2); other:set("/x", "1") end)
            c:spawn(function() got.ev = ev:wait(HUGE) end)
            assert.is_true(c:run(10))
            assert.is_true(got.ev)
            assert.is_true(zkcoord.now() - t0 >= 0.15)
        end)
    end)

    describe("create flags are booleans (issue 21.5)", function()
        it("client:create and a multi's create refuse a flag that is not a boolean", function()
            for _, flag in ipairs({ "ephemeral", "sequential", "container" }) do
                for _, v in ipairs({ "yes", "no", 1, 0, {}, ffi.cast("void *", nil) }) do
                    raises_here(("bad argument #3 to 'create' (%s must be a boolean, got %s)")
                                :format(flag, type(v)),
                                function() c:create("/f", "", { [flag] = v }) end)
                    raises_here(("bad argument #1 to 'multi' (%s must be a boolean, got %s)")
                                :format(flag, type(v)),
                                function() c:multi { { op = "create", path = "/f", [flag] = v } } end)
                end
            end
            for _, v in ipairs({ "yes", 1, {} }) do
                raises_here("bad argument #3 to 'create' (parents must be a boolean, 'container' or "
                            .. "'persistent')",
                            function() c:create("/p/f", "", { parents = v }) end)
            end
            assert.is_false(c:exists("/f"))
            assert.is_false(c:exists("/p"))
            -- booleans, nil and the parents words still work
            assert.equal("/f", (c:create("/f", "", { ephemeral = false, sequential = false })))
            assert.equal("/e", (c:create("/e", "", { ephemeral = true })))
            assert.equal("/p/f", (c:create("/p/f", "", { parents = "persistent" })))
            assert.equal("/q/f", (c:create("/q/f", "", { parents = true })))
        end)
    end)

    describe("input gaps of the fault run (issue 28.7)", function()
        it("delete's recursive flag is a boolean, as create's flags", function()
            assert(c:create("/d/x", "", { parents = true }))
            for _, v in ipairs({ "yes", "no", 1, 0, {}, ffi.cast("void *", nil) }) do
                raises_here(("bad argument #2 to 'delete' (recursive must be a boolean, got %s)")
                            :format(type(v)),
                            function() c:delete("/d", { recursive = v }) end)
                raises_here(("bad argument #2 to 'delete' (recursive must be a boolean, got %s)")
                            :format(type(v)),
                            function() c:send("delete", "/d", { recursive = v }) end)
            end
            assert.is_true(c:exists("/d/x") ~= false)
            assert.same({ nil, "notempty" }, { c:delete("/d", { recursive = false }) })
            assert.is_true(c:delete("/d", { recursive = true }))
            assert.is_false(c:exists("/d"))
        end)

        it("cohort_time is a duration: above 600 raises, as other durations", function()
            for _, ctor in ipairs({ "lock", "rwlock" }) do
                for _, v in ipairs({ 1e9, 600.5, HUGE }) do
                    local msg = v == HUGE
                        and "cohort_time must be at most 600 seconds (math.huge is no limit only "
                            .. "for timeouts)"
                        or ("cohort_time = %.17g is over 600: seconds, not milliseconds"):format(v)
                    raises_here(("bad argument #2 to '%s' (%s)"):format(ctor, msg),
                                function() c[ctor](c, "/l", { cohort = true, cohort_time = v }) end)
                end
                for _, v in ipairs({ -1, NAN, "1", {} }) do
                    raises_here(("bad argument #2 to '%s' (cohort_time must be a number of "
                                 .. "seconds >= 0)"):format(ctor),
                                function() c[ctor](c, "/l", { cohort = true, cohort_time = v }) end)
                end
                -- 0 (no time bound) and 600 are fine
                c[ctor](c, "/l", { cohort = true, cohort_time = 0 })
                c[ctor](c, "/l", { cohort = true, cohort_time = 600 })
            end
        end)

        it("the cohort_* options need cohort = true (they were ignored)", function()
            for _, ctor in ipairs({ "lock", "rwlock" }) do
                for _, on in ipairs({ false, "nil" }) do
                    for k, v in pairs({ cohort_handoffs = 3, cohort_time = 0.5 }) do
                        local opts = { [k] = v }
                        if on ~= "nil" then
                            opts.cohort = on
                        end
                        raises_here(("bad argument #2 to '%s' (%s needs cohort = true)")
                                    :format(ctor, k),
                                    function() c[ctor](c, "/l", opts) end)
                    end
                end
                raises_here(("bad argument #2 to '%s' (cohort must be a boolean)"):format(ctor),
                            function() c[ctor](c, "/l", { cohort = "yes" }) end)
                raises_here(("bad argument #2 to '%s' (cohort_handoffs must be an integer >= 0)")
                            :format(ctor),
                            function() c[ctor](c, "/l", { cohort = true, cohort_handoffs = NAN }) end)
                c[ctor](c, "/l", { cohort = false })
                c[ctor](c, "/l", { cohort = true, cohort_handoffs = 0, cohort_time = 0.5 })
            end
            -- a multi-lock passes its options to its locks
            raises_here("bad argument #2 to 'lock' (cohort_handoffs needs cohort = true)",
                        function() c:multi_lock({ "/a", "/b" }, { cohort_handoffs = 3 }) end)
        end)

        it("lock's reentrant is a boolean ('no' was taken for true)", function()
            for _, v in ipairs({ "no", 0, {} }) do
                raises_here("bad argument #2 to 'lock' (reentrant must be a boolean)",
                            function() c:lock("/l", { reentrant = v }) end)
                raises_here("bad argument #2 to 'lock' (reentrant must be a boolean)",
                            function() c:multi_lock({ "/a", "/b" }, { reentrant = v }) end)
            end
            local l = c:lock("/l", { reentrant = false })
            assert.is_true(l:acquire(5))
            local ok, err = l:acquire(0)
            assert.is_nil(ok)
            assert.equal("invalid", err)
            assert.is_true(l:release())
        end)

        it("election run's rejoin is a boolean ('no' was taken for true)", function()
            local e = c:election("/e")
            for _, v in ipairs({ "no", 0, {} }) do
                raises_here("bad argument #2 to 'run' (rejoin must be a boolean)",
                            function() e:run(function() end, { rejoin = v }) end)
            end
            zk.admin():sync(root)
            assert.same({}, zk.admin():children(root))    -- no campaign
            assert.same({ true, 1 }, { e:run(function() return true, 1 end, { rejoin = false }) })
        end)

        it("ensure_path's container is a boolean ('no' made containers)", function()
            for _, v in ipairs({ "no", 0, {} }) do
                raises_here(("bad argument #2 to 'ensure_path' (container must be a boolean, got %s)")
                            :format(type(v)),
                            function() c:ensure_path("/c/d", { container = v }) end)
            end
            assert.is_false(c:exists("/c"))
            assert.is_true(c:ensure_path("/c/d", { container = false }))
            assert.is_table(c:exists("/c/d"))
        end)

        it("client:retry's deadline is a number, not NaN", function()
            local n = 0
            local function flaky() n = n + 1; return nil, "connectionloss" end
            raises_here("bad argument #1 to 'retry' (deadline must be a number (a zkcoord.now() "
                        .. "time) or nil)", function() c:retry(NAN, flaky) end)
            assert.equal(0, n)     -- refused before the first try
            assert.same({ nil, "timeout" }, { c:retry(zkcoord.now() + 0.2, flaky) })
        end)

        it("cohort.number refuses what is not a token pair", function()
            local cohort = require "zkcoord.cohort"
            for _, z in ipairs({ -1, -HUGE, NAN, HUGE, 1.5, "5", {}, ffi.new("int64_t", 5) }) do
                raises_here("bad argument #1 to 'number' (czxid must be an integer >= 0)",
                            function() cohort.number(z, 0) end)
            end
            for _, n in ipairs({ -1, 4096, 1e9, NAN, HUGE, 0.5, "3", nil }) do
                raises_here("bad argument #2 to 'number' (n must be an integer from 0 to 4095)",
                            function() cohort.number(5, n) end)
            end
            assert.equal(5 * 4096 + 4095, cohort.number(5, 4095))
            assert.equal(0, cohort.number(0, 0))
            assert.is_nil(cohort.number(2 ^ 41, 0))
        end)
    end)

    describe("connect: the servers, chroot and durations (issues 21.5, 24.6)", function()
        local bad = bad_connect

        it("a NUL or control character in servers raises (it connected to what preceded it)",
           function()
            local nul = "servers must not contain NUL or control characters"
            bad(nul, { servers = zk.hosts() .. "\0junk" })
            bad(nul, { servers = zk.hosts() .. "\n" })
            bad("servers[2] must not contain NUL or control characters",
                { servers = { zk.hosts(), "127.0.0.1:1\0" } })
            raises_here("bad argument #1 to 'connect' (" .. nul .. ")",
                        function() local _ = zkcoord.connect(zk.hosts() .. "\0") end)
            bad("servers must be host:port or host (port 2181), got '127.0.0.1:x'",
                { servers = "127.0.0.1:x" })
            bad("chroot given twice: in servers ('/a') and as option chroot",
                { servers = zk.hosts() .. "/a", chroot = "/b" })
        end)

        it("a server without a port gets 2181 (kazoo's default); host:port/chroot works",
           function()
            local options = require "zkcoord.client.options"
            local c1 = options.check { servers = "a,b:1,[::1],c:2" }
            assert.equal("a:2181,b:1,[::1]:2181,c:2", c1.hosts)
            assert.same({ host = "::1", port = "2181", name = "[::1]:2181" }, c1.endpoints[3])
            assert.equal("a:2181,b:2181", options.check { servers = { "a", "b" } }.hosts)
            -- the chroot in the servers string, as kazoo and libzookeeper take it
            local c2 = assert(zkcoord.connect(zk.hosts() .. root))
            assert(c2:create("/in", "x"))
            assert.equal("x", (zk.admin():get(root .. "/in")))
            c2:close()
        end)

        it("a duration above 600 s is milliseconds by mistake: raises", function()
            for _, k in ipairs({ "session_timeout", "connect_timeout", "request_timeout",
                                 "lost_after", "resolve_interval", "handshake_timeout" }) do
                bad(k .. " = 10000 is over 600: seconds, not milliseconds", { [k] = 10000 })
                bad(k .. " = 600.5 is over 600: seconds, not milliseconds", { [k] = 600.5 })
            end
            for _, k in ipairs({ "session_timeout", "connect_timeout", "request_timeout",
                                 "lost_after" }) do
                for _, v in ipairs({ 0, -1, NAN, -HUGE }) do
                    bad(k .. " must be a positive number of seconds", { [k] = v })
                end
            end
            for _, k in ipairs({ "session_timeout", "lost_after" }) do
                bad(k .. " must be at most 600 seconds (math.huge is no limit only for timeouts)",
                    { [k] = HUGE })
            end
            -- 0 (and math.huge) turn the handshake watchdog off
            for _, v in ipairs({ -1, NAN, -HUGE }) do
                bad("handshake_timeout must be a number of seconds >= 0", { handshake_timeout = v })
            end
            -- a recipe's delays follow the same rule
            for _, k in ipairs({ "base_delay", "max_delay" }) do
                raises_here("bad argument #2 to 'counter' (" .. k .. " = 5000 is over 600: seconds, "
                            .. "not milliseconds)", function() c:counter("/n", { [k] = 5000 }) end)
                raises_here("bad argument #2 to 'counter' (" .. k .. " must be a number of seconds "
                            .. ">= 0)", function() c:counter("/n", { [k] = NAN }) end)
            end
            -- 600 is fine; math.huge is no limit for the connect and request timeouts
            local c3 = zk.client { chroot = root, request_timeout = HUGE, connect_timeout = HUGE,
                                   lost_after = 600 }
            assert.equal(HUGE, contract.request_timeout(c3))
            assert.is_false(c3:exists("/nothing"))
        end)
    end)

    describe("the caller is blamed, at any depth inside zkcoord", function()
        it("for sync calls, send, recipe constructors and a NULL cdata", function()
            local ffi_null = ffi.cast("void *", nil)
            raises_here("bad argument #1 to 'create' (path must start with '/': rel)",
                        function() c:create("rel") end)
            raises_here("bad argument #2 to 'create' (data must be a string or nil, got number)",
                        function() c:create("/x", 5) end)
            raises_here("bad argument #3 to 'set' (version must be an integer >= -1)",
                        function() c:send("set", "/x", "d", "v") end)
            raises_here("bad argument #1 to 'counter' (path must start with '/': rel)",
                        function() c:counter("rel") end)
            raises_here("bad argument #1 to 'lock' (path must start with '/': rel)",
                        function() c:lock("rel") end)
            -- A NULL cdata equals nil in LuaJIT: refused, not taken for "no data/version".
            raises_here("bad argument #1 to 'multi' (data must be a string or nil, got cdata)",
                        function() c:multi { { op = "set", path = "/x", data = ffi_null } } end)
            raises_here("bad argument #3 to 'set' (version must be an integer >= -1)",
                        function() c:set("/x", "d", ffi_null) end)
        end)
    end)
end)
