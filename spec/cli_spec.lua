-- The zkcoord command (bin/zkcoord) against a real ZooKeeper: every verb,
-- every exit status, run as a separate process the way a user runs it.
local zk = require "helpers.zk"
local proc = require "helpers.proc"
local tcpproxy = require "helpers.tcpproxy"

local ROOT = os.getenv("PWD") or "."
local BIN = ROOT .. "/bin/zkcoord"
-- The command on another VM: ZKCOORD_CLI_LUA=lua5.4 and ZKCOORD_CLI_CPATH
-- its core (build-lua5.4/lib/?.so after `scripts/build.sh --lua 5.4`).
local CLI_LUA, CLI_CPATH = os.getenv("ZKCOORD_CLI_LUA"), os.getenv("ZKCOORD_CLI_CPATH")

local seq = 0
local function tmpfile(name)
    seq = seq + 1
    return ("%s/cli-%d-%s"):format(zk.tmpdir(), seq, name)
end


local function env()
    local e = zk.lua_env()
    e.ZKCOORD_SERVERS = zk.hosts()
    return e
end


-- Runs bin/zkcoord with `args` in the background. Returns a handle with
-- pid (zkcoord's own), and wait(timeout) -> exit status, stdout, stderr.
-- A small sh wrapper records the status. (A background job of sh starts
-- with SIGINT ignored; zkcoord blocks and reads its signals, which the
-- kernel then still delivers, and gives CMD default dispositions.)
local WRAPPER = [[
pidf=$1; rcf=$2; shift 2
"$@" &
p=$!
echo "$p" > "$pidf.tmp" && mv "$pidf.tmp" "$pidf"
wait "$p"
echo $? > "$rcf.tmp" && mv "$rcf.tmp" "$rcf"
]]

local function start(args, opts)
    opts = opts or {}
    local h = { out = tmpfile("out"), err = tmpfile("err"), pidf = tmpfile("pid"),
                rcf = tmpfile("rc") }
    local argv = { "sh", "-c", WRAPPER, "sh", h.pidf, h.rcf }
    if CLI_LUA and not opts.bin then argv[#argv + 1] = CLI_LUA end
    argv[#argv + 1] = opts.bin or BIN
    for _, a in ipairs(args) do argv[#argv + 1] = tostring(a) end
    local e = env()
    e.ZKCOORD_CPATH = CLI_LUA and CLI_CPATH or nil
    for k, v in pairs(opts.env or {}) do e[k] = v end
    assert(proc.spawn(argv, { stdout = h.out, stderr = h.err, env = e, owner = true }))
    assert(zk.wait_until(function() return proc.read_file(h.pidf) end, 10),
           "zkcoord did not start")
    h.pid = tonumber(proc.read_file(h.pidf))
    function h.wait(timeout)
        local rc = zk.wait_until(function()
            return tonumber(proc.read_file(h.rcf) or "")
        end, timeout or 15)
        return rc, proc.read_file(h.out) or "", proc.read_file(h.err) or ""
    end
    function h.running()
        return proc.read_file(h.rcf) == nil
    end
    return h
end


-- Runs bin/zkcoord to the end: exit status, stdout, stderr.
local function run(args, timeout, opts)
    local h = start(args, opts)
    local rc, out, err = h.wait(timeout)
    assert(rc, "zkcoord " .. table.concat(args, " ") .. " did not finish")
    return rc, out, err
end


local function lines(text)
    local out = {}
    for l in (text or ""):gmatch("[^\n]+") do out[#out + 1] = l end
    return out
end


-- The lock nodes at and below `path` as `zkcoord locks` prints them
-- (after its header line).
local LOCKS_HEADER = "LOCK\tSTATE\tKIND\tNODE\tDATA\tSESSION\tAGE"

local function locks(path)
    local rc, out, err = run({ "locks", path })
    assert(rc == 0, "locks failed: " .. err)
    local ls = lines(out)
    assert(ls[1] == LOCKS_HEADER, "no header: " .. out)
    local rows = {}
    for k = 2, #ls do
        local l = ls[k]
        local lock, state, kind, node, data, session, age = l:match(
            "^(%S+)\t(%S+)\t(%S+)\t(%S+)\t([^\t]*)\t(%S+)\t(%S+)$")
        assert(state, "unexpected locks line: " .. l)
        rows[#rows + 1] = { lock = lock, state = state, kind = kind, node = node, data = data,
                            session = session, age = age }
    end
    return rows
end


-- Waits until `zkcoord locks path` lists n nodes; a failed listing (the
-- parent not created yet is "nonode") counts as not yet.
local function wait_locks(path, n)
    return zk.wait_until(function()
        local ok, rows = pcall(locks, path)
        return ok and #rows == n
    end, 10)
end


describe("zkcoord command #zk", function()
    local root, admin

    before_each(function()
        root = zk.new_root("cli")
        admin = zk.admin()
    end)

    after_each(function()
        zk.delete_tree(admin, root)
    end)

    describe("usage", function()
        it("exits 64 with one line and where the help is on stderr for bad usage", function()
            local cases = {
                {},
                { "frobnicate", "/x" },
                { "get" },
                { "get", "relative" },
                { "get", "/a", "/b" },
                { "--bogus", "get", "/x" },
                { "--servers", "", "get", "/x" },
                { "lock", "--timeout", "soon", "/x", "--", "true" },
                { "lock", "/x" },
                { "lock", "/x", "--" },
                { "lock", "/x", "--timeout", "1", "--", "true" },
                { "elect", "--nope", "/x", "--", "true" },
                { "create", "-q", "/x" },
                { "rm", "-r", "/" },
                { "counter", "/x", "add" },
                { "counter", "/x", "mul", "2" },
                { "counter", "/x", "add", "1.5" },
                -- beyond what a double holds exactly: the counter refuses it
                { "counter", "/x", "add", "9007199254740992" },
                { "counter", "/x", "set", "-9007199254740992" },
                { "counter", "/x", "set", "99999999999999999999999" },
            }
            for _, args in ipairs(cases) do
                local rc, out, err = run(args)
                assert.are.equal(64, rc, table.concat(args, " ") .. ": " .. err)
                assert.are.equal("", out)
                local l = lines(err)
                assert.are.equal(2, #l, err)
                assert.truthy(l[1]:find("^zkcoord: "), err)
                local verb = args[1] and not args[1]:find("^%-") and args[1] ~= "frobnicate" and args[1]
                assert.are.equal(verb and ("see 'zkcoord " .. verb .. " --help'")
                                 or "see 'zkcoord --help'", l[2])
            end
        end)

        it("prints help for each verb on stdout and exits 0", function()
            for _, verb in ipairs({ "lock", "elect", "locks", "get", "set", "create", "rm",
                                    "ls", "stat", "tree", "watch", "counter" }) do
                local rc, out = run({ verb, "--help" })
                assert.are.equal(0, rc)
                assert.truthy(out:find("usage: zkcoord " .. verb, 1, true), out)
                local rc2, out2 = run({ "help", verb })
                assert.are.equal(0, rc2)
                assert.are.equal(out, out2)
            end
            local rc, out = run({ "--help" })
            assert.are.equal(0, rc)
            assert.truthy(out:find("counter PATH", 1, true))
        end)
    end)

    describe("unreachable servers", function()
        it("exit 69 within the connect timeout, and the command never runs", function()
            local port = assert(proc.free_port())     -- nobody listens there
            local marker = tmpfile("ran")
            local t0 = proc.now()
            local rc, _, err = run({ "--servers", "127.0.0.1:" .. port, "--connect-timeout", "1",
                                     "lock", root .. "/l", "--", "touch", marker })
            local took = proc.now() - t0
            assert.are.equal(69, rc)
            assert.truthy(err:find("cannot reach ZooKeeper", 1, true), err)
            assert.is_nil(proc.read_file(marker))
            -- measured at load 2: 1.44-1.54 s
            assert.is_true(took < 5, "took " .. took)
            -- ZKCOORD_SERVERS is used when --servers is not given
            rc, _, err = run({ "--connect-timeout", "1", "get", "/" }, nil,
                             { env = { ZKCOORD_SERVERS = "127.0.0.1:" .. port } })
            assert.are.equal(69, rc)
            assert.truthy(err:find("127.0.0.1:" .. port, 1, true), err)
        end)
    end)

    describe("connecting", function()
        -- A server that accepts connections and never answers; and whether
        -- a client has connected to it.
        local function silent_server()
            local fd, port = assert(proc.tcp_listen("127.0.0.1", 0))
            finally(function() proc.sys.C.zkh_close(fd) end)
            return "127.0.0.1:" .. port, function()
                return (proc.sys.poll1(fd, proc.sys.S.POLLIN, 0) or 0) > 0
            end
        end

        it("a signal while connecting ends the command at once with 128+N", function()
            local marker = tmpfile("ran")
            for sig, n in pairs({ TERM = 15, INT = 2, HUP = 1 }) do
                local hosts, contacted = silent_server()
                local h = start({ "--servers", hosts, "--connect-timeout", "8", "lock",
                                  root .. "/l", "--", "touch", marker })
                assert.truthy(zk.wait_until(contacted, 10))     -- connecting
                local t0 = proc.now()
                assert(proc.kill(h.pid, sig))
                local rc, _, err = h.wait(10)
                local took = proc.now() - t0
                assert.are.equal(128 + n, rc, err)
                assert.truthy(err:find("SIG" .. sig .. " while connecting", 1, true), err)
                assert.is_true(took < 4, "took " .. took)
            end
            assert.is_nil(proc.read_file(marker))
        end)

        it("a server that is not ZooKeeper (HTTP 400): exit 69 naming it, at once (was 75)",
           function()
            local http = assert(tcpproxy.start("127.0.0.1", 1))
            finally(function() http:stop() end)
            assert(http:reply("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                              .. "Connection: close\r\n\r\n"))
            local marker = tmpfile("ran")
            local t0 = proc.now()
            local rc, _, err = run({ "--servers", http.hosts, "--connect-timeout", "8", "lock",
                                     root .. "/l", "--", "touch", marker })
            local took = proc.now() - t0
            assert.are.equal(69, rc, err)
            assert.truthy(err:find("cannot reach ZooKeeper at " .. http.hosts, 1, true), err)
            assert.truthy(err:find(http.hosts .. " did not answer as a ZooKeeper server", 1, true),
                          err)
            assert.is_nil(proc.read_file(marker))
            assert.is_true(took < 5, "took " .. took)
        end)

        it("a server that comes up 2 s after the command started is waited for (was exit 69)",
           function()
            local zk_port = tonumber(zk.hosts():match(":(%d+)"))
            for _, args in ipairs({ { "lock", root .. "/l", "--", "true" }, { "get", "/" } }) do
                local late = assert(tcpproxy.start("127.0.0.1", zk_port,
                                                   { port = assert(proc.free_port()), after = 2 }))
                local t0 = proc.now()
                local argv = { "--servers", late.hosts, "--connect-timeout", "20" }
                for _, a in ipairs(args) do argv[#argv + 1] = a end
                local rc, _, err = run(argv, 30)
                local took = proc.now() - t0
                late:stop()
                assert.are.equal(0, rc, args[1] .. ": " .. err)
                -- it waited (the server is up 2 s after the proxy was spawned, before t0)
                assert.is_true(took >= 1.5 and took < 20, args[1] .. " took " .. took)
            end
        end)

        it("-w counts the connect: a silent server ends the wait at -w, exit 75", function()
            local hosts = silent_server()
            local t0 = proc.now()
            local rc, _, err = run({ "--servers", hosts, "--connect-timeout", "8", "lock", "-w", "1",
                                     "--verbose", root .. "/l", "--", "true" })
            local took = proc.now() - t0
            assert.are.equal(75, rc, err)
            assert.truthy(err:find("not acquired within 1s", 1, true), err)
            assert.truthy(err:find("no session yet", 1, true), err)
            assert.is_true(took < 5, "took " .. took)
        end)
    end)

    describe("plain verbs", function()
        it("set PATH - reads the data from stdin, as it is", function()
            local p = root .. "/stdin"
            assert(admin:create(p, "old"))
            local argv = { "-c", 'printf "a\\nb\\n" | "$@"', "sh" }
            if CLI_LUA then argv[#argv + 1] = CLI_LUA end
            for _, a in ipairs({ BIN, "set", p, "-" }) do argv[#argv + 1] = a end
            local rc, _, err = run(argv, nil, { bin = "sh" })
            assert.are.equal(0, rc, err)
            assert.are.equal("a\nb\n", (admin:get(p)))
        end)

        it("a bad PATH is told by what is wrong with it", function()
            for path, says in pairs({ ["/a/b/"] = "PATH must not end with '/': /a/b/",
                                      ["a/b"] = "PATH must start with '/': a/b",
                                      ["/a//b"] = "PATH must not contain empty segments: /a//b" }) do
                local rc, _, err = run({ "get", path })
                assert.are.equal(64, rc)
                assert.are.equal("zkcoord: get: " .. says, lines(err)[1])
            end
        end)

        it("create, get, set, ls, stat, tree, rm, with errors on stderr and status 1", function()
            local p = root .. "/cfg"
            local _
            local rc, out, err = run({ "create", "-p", p .. "/db", "v1" })
            assert.are.equal(0, rc, err)
            assert.are.equal(p .. "/db\n", out)
            rc, out = run({ "get", p .. "/db" })
            assert.are.equal(0, rc)
            assert.are.equal("v1\n", out)
            assert.are.equal(0, (run({ "set", p .. "/db", "v2" })))
            assert.are.equal("v2", (admin:get(p .. "/db")))

            rc, out = run({ "create", "-s", p .. "/job-", "x" })
            assert.are.equal(0, rc)
            local jobname = out:match("^" .. p:gsub("%-", "%%-") .. "/(job%-%d+)\n$")
            assert.truthy(jobname, out)

            rc, out = run({ "ls", p })
            assert.are.equal(0, rc)
            assert.are.same({ "db", jobname }, lines(out))
            rc, out = run({ "ls", "-l", p })
            assert.are.equal(0, rc)
            local l = lines(out)
            assert.are.equal(2, #l)
            assert.truthy(l[1]:match("^db\t2\t0\t%-\t%d%d%d%d%-%d%d%-%d%dT"), l[1])

            rc, out = run({ "stat", p .. "/db" })
            assert.are.equal(0, rc)
            local st = assert(admin:exists(p .. "/db"))
            assert.truthy(out:find("version\t1\n", 1, true), out)
            assert.truthy(out:find(("czxid\t%.0f\n"):format(st.czxid), 1, true), out)
            assert.truthy(out:find("ephemeral_owner\t-\n", 1, true), out)

            rc, out = run({ "tree", p })
            assert.are.equal(0, rc)
            assert.are.same({ p, p .. "/db", p .. "/" .. jobname }, lines(out))

            -- runtime failures: status 1, the ZooKeeper code on stderr, nothing on stdout
            rc, out, err = run({ "get", p .. "/missing" })
            assert.are.equal(1, rc)
            assert.are.equal("", out)
            assert.truthy(err:find("nonode (ZNONODE -101)", 1, true), err)
            rc, _, err = run({ "create", p .. "/db" })
            assert.are.equal(1, rc)
            assert.truthy(err:find("nodeexists (ZNODEEXISTS -110)", 1, true), err)
            rc, _, err = run({ "set", p .. "/missing", "x" })
            assert.are.equal(1, rc)
            assert.truthy(err:find("ZNONODE", 1, true), err)
            rc, _, err = run({ "rm", p })
            assert.are.equal(1, rc)
            assert.truthy(err:find("notempty (ZNOTEMPTY -111)", 1, true), err)
            for _, verb in ipairs({ "ls", "stat", "tree", "locks" }) do
                rc, _, err = run({ verb, p .. "/missing" })
                assert.are.equal(1, rc, verb)
                assert.truthy(err:find("ZNONODE", 1, true), verb .. ": " .. err)
            end

            assert.are.equal(0, (run({ "rm", p .. "/db" })))
            assert.is_false(admin:exists(p .. "/db"))
            assert.are.equal(0, (run({ "rm", "-r", p })))
            assert.is_false(admin:exists(p))
            rc, _, err = run({ "rm", "-r", p })
            assert.are.equal(1, rc)
            assert.truthy(err:find("ZNONODE", 1, true), err)
        end)

        it("chroot and auth are global options", function()
            assert(admin:create(root .. "/app"))
            local rc, out, err = run({ "--chroot", root .. "/app", "create", "/x", "in" })
            assert.are.equal(0, rc, err)
            assert.are.equal("/x\n", out)
            assert.are.equal("in", (admin:get(root .. "/app/x")))
            -- a node readable only by user:secret
            local c = zk.client { auth = { scheme = "digest", credentials = "user:secret" } }
            assert(c:create(root .. "/secret", "s3", { acl = "creator_all" }))
            c:close()
            rc, out = run({ "--auth", "user:secret", "get", root .. "/secret" })
            assert.are.equal(0, rc)
            assert.are.equal("s3\n", out)
            local _
            rc, _, err = run({ "get", root .. "/secret" })
            assert.are.equal(1, rc)
            assert.truthy(err:find("noauth (ZNOAUTH -102)", 1, true), err)
        end)

        it("counter prints the value after get, add and set", function()
            local p = root .. "/n"
            local function counter(...)
                local rc, out, err = run({ "counter", p, ... })
                assert.are.equal(0, rc, err)
                return out
            end
            assert.are.equal("0\n", counter())
            assert.are.equal("5\n", counter("add", "5"))
            assert.are.equal("3\n", counter("add", "-2"))
            assert.are.equal("42\n", counter("set", "42"))
            assert.are.equal("42", (admin:get(p)))
            -- the ends of the range (leading zeros are fine)
            assert.are.equal("-9007199254740991\n", counter("set", "-09007199254740991"))
            assert.are.equal("9007199254740991\n", counter("set", "+9007199254740991"))
            assert(admin:set(p, "not a number"))
            local rc, _, err = run({ "counter", p, "add", "1" })
            assert.are.equal(1, rc)
            assert.truthy(err:find("invalid", 1, true), err)
        end)

        it("watch prints the value now and on every change until SIGTERM, then exits 0",
           function()
            local p = root .. "/w"
            assert(admin:create(p, "v1"))
            local h = start({ "watch", p })
            local function out() return proc.read_file(h.out) or "" end
            assert.truthy(zk.wait_until(function() return out() == "v1\n" end, 10), out())
            assert(admin:set(p, "v2"))
            assert.truthy(zk.wait_until(function() return out() == "v1\nv2\n" end, 10), out())
            assert(admin:delete(p))
            assert.truthy(zk.wait_until(function()
                return (proc.read_file(h.err) or ""):find("does not exist", 1, true)
            end, 10))
            assert(admin:create(p, "v3"))
            assert.truthy(zk.wait_until(function() return out() == "v1\nv2\nv3\n" end, 10),
                          out())
            assert(proc.kill(h.pid, "TERM"))
            assert.are.equal(0, (h.wait(5)))

            -- children
            local h2 = start({ "watch", "--children", p })
            local function out2() return proc.read_file(h2.out) or "" end
            assert.truthy(zk.wait_until(function() return out2() == "\n" end, 10))
            assert(admin:create(p .. "/a"))
            assert.truthy(zk.wait_until(function() return out2() == "\na\n" end, 10), out2())
            assert(admin:create(p .. "/b"))
            assert.truthy(zk.wait_until(function() return out2() == "\na\na b\n" end, 10),
                          out2())
            assert(proc.kill(h2.pid, "INT"))
            assert.are.equal(0, (h2.wait(5)))
        end)
    end)

    describe("lock", function()
        it("runs CMD with the token and node, and exits with CMD's status", function()
            local p = root .. "/l"
            local rc, out, err = run({ "lock", p, "--", "sh", "-c",
                'echo "$ZKCOORD_FENCING_TOKEN $ZKCOORD_LOCK_NODE"; exit 3' })
            assert.are.equal(3, rc, err)
            local token, node = out:match("^(%d+) (%S+)\n$")
            assert.truthy(token, out)
            assert.truthy(node:match("^" .. p:gsub("%-", "%%-") .. "/_c_[%x%-]+%-lock%-%d+$"), node)
            -- released: nothing left
            assert.are.same({}, admin:children(p))
            -- the token grows with every grant
            local _, out2 = run({ "lock", p, "sh", "-c", 'echo "$ZKCOORD_FENCING_TOKEN"' })
            assert.is_true(tonumber(out2) > tonumber(token))
            -- a signal death is 128+N; a missing command 127
            rc = run({ "lock", p, "--", "sh", "-c", "kill -KILL $$" })
            assert.are.equal(137, rc)
            rc, _, err = run({ "lock", p, "--", "/nonexistent/command" })
            assert.are.equal(127, rc)
            assert.truthy(err:find("/nonexistent/command", 1, true), err)
            local notexec = tmpfile("notexec")
            assert(proc.write_file(notexec, "data, not a program\n"))
            rc, _, err = run({ "lock", p, "--", notexec })
            assert.are.equal(126, rc)
            assert.truthy(err:find("Permission denied", 1, true), err)
            -- without "--" too
            rc = run({ "lock", p, "sh", "-c", "exit 4" })
            assert.are.equal(4, rc)
            assert.are.same({}, admin:children(p))
        end)

        it("CMD inherits the descriptors zkcoord was given, none of its own", function()
            -- zkcoord's own: the session's socket, the client's eventfd, the signalfd
            local list = 'for f in /proc/$$/fd/*; do echo "${f##*/}"; done'
            local rc, base = run({ "-c", list }, nil, { bin = "sh" })
            assert.are.equal(0, rc)
            local out, err
            rc, out, err = run({ "lock", root .. "/fds", "--", "sh", "-c", list })
            assert.are.equal(0, rc, err)
            assert.truthy(base:find("^0\n1\n"), base)
            assert.are.equal(base, out)
        end)

        it("excludes: 4 concurrent wrappers never overlap, tokens grow", function()
            local p = root .. "/mutex"
            local log = tmpfile("mutex.log")
            local body = ('echo "start $ZKCOORD_FENCING_TOKEN $(date +%%s.%%N)" >> %s; sleep 0.2; '
                          .. 'echo "end $(date +%%s.%%N)" >> %s'):format(log, log)
            local hs = {}
            for i = 1, 4 do
                hs[i] = start({ "lock", p, "--", "sh", "-c", body .. "; " .. body })
            end
            for i = 1, 4 do
                assert.are.equal(0, (hs[i].wait(20)))
            end
            local l = lines(proc.read_file(log))
            assert.are.equal(16, #l)
            local last_end, last_token = 0, -1
            for k = 1, #l, 2 do
                local token, t0 = l[k]:match("^start (%d+) ([%d%.]+)$")
                local t1 = l[k + 1]:match("^end ([%d%.]+)$")
                assert.truthy(token and t1, "interleaved: " .. l[k] .. " / " .. l[k + 1])
                t0, t1, token = tonumber(t0), tonumber(t1), tonumber(token)
                assert.is_true(t0 >= last_end, "intervals overlap")
                assert.is_true(t1 >= t0)
                assert.is_true(token >= last_token, "token went down")
                last_end, last_token = t1, token
            end
        end)

        it("a SIGKILLed wrapper's lock passes on once its session expires", function()
            local p = root .. "/killed"
            local a = start({ "--session-timeout", "2", "lock", p, "--", "sleep", "6" })
            assert.truthy(wait_locks(p, 1))
            local t0 = proc.now()
            local b = start({ "lock", p, "--", "true" })
            assert.truthy(wait_locks(p, 2))
            proc.kill(a.pid, "KILL")
            local rc = b.wait(20)
            local took = proc.now() - t0
            assert.are.equal(0, rc)
            -- not at once (the dead holder's session had to expire), within it and a margin
            -- measured at load 2: 2.33 s
            assert.is_true(took >= 1.5 and took < 10, ("the lock passed on after %.2f s"):format(took))
        end)

        it("exits 75 when not acquired within --timeout, without running CMD or leaving a node",
           function()
            local p = root .. "/busy"
            local holder = start({ "lock", "--data", "the-holder", p, "--", "sleep", "30" })
            assert.truthy(wait_locks(p, 1))
            local rows = locks(p)
            assert.are.equal("holder", rows[1].state)
            assert.are.equal("the-holder", rows[1].data)
            local marker = tmpfile("ran")
            local rc, _, err = run({ "lock", "--timeout", "0", p, "--", "touch", marker })
            assert.are.equal(75, rc)
            assert.are.equal("", err)      -- silent, as flock: --verbose tells
            local t0 = proc.now()
            rc = run({ "lock", "--timeout", "0.5", p, "--", "touch", marker })
            local took = proc.now() - t0
            assert.are.equal(75, rc)
            -- measured at load 2: 0.55-0.85 s
            assert.is_true(took >= 0.5 and took < 5, "took " .. took)
            assert.is_nil(proc.read_file(marker))
            assert.are.equal(1, #admin:children(p))
            -- the shared side waits for the exclusive holder too
            rc = run({ "lock", "--shared", "--timeout", "0", p, "--", "touch", marker })
            assert.are.equal(75, rc)
            assert(proc.kill(holder.pid, "TERM"))
            assert.are.equal(143, (holder.wait(5)))
        end)

        it("takes flock's long waits (-w 3600, -w 1e9): above the API's 600 s bound", function()
            -- The library refuses a timeout above 600 s (milliseconds by
            -- mistake); the command's -w is flock's, in seconds, any length.
            for _, w in ipairs({ "3600", "1e9" }) do
                local p = root .. "/long-" .. w
                local marker = tmpfile("long")
                local rc, _, err = run({ "lock", "-w", w, p, "--", "touch", marker })
                assert.are.equal(0, rc, err)
                assert.truthy(proc.read_file(marker))
                rc, _, err = run({ "elect", "--timeout", w, p .. "-e", "--", "true" })
                assert.are.equal(0, rc, err)
            end
        end)

        it("--shared: readers hold together, a writer waits for them", function()
            local p = root .. "/rw"
            local r1 = start({ "lock", "--shared", p, "--", "sleep", "30" })
            local r2 = start({ "lock", "--shared", p, "--", "sleep", "30" })
            assert.truthy(wait_locks(p, 2))
            local w = start({ "lock", p, "--", "true" })
            assert.truthy(wait_locks(p, 3))
            local rows = locks(p)
            assert.are.same({ "holder", "holder", "waiter" },
                            { rows[1].state, rows[2].state, rows[3].state })
            assert.are.same({ "read", "read", "lock" },
                            { rows[1].kind, rows[2].kind, rows[3].kind })
            assert.is_true(w.running())
            proc.kill(r1.pid, "TERM")
            proc.kill(r2.pid, "TERM")
            assert.are.equal(143, (r1.wait(5)))
            assert.are.equal(143, (r2.wait(5)))
            assert.are.equal(0, (w.wait(10)))
        end)

        it("honours the library's rwlock and lock holders on the same path", function()
            local p = root .. "/lib"
            local c = zk.client()
            local wl = c:rwlock(p):write_lock()
            assert(wl:acquire(5))
            assert.are.equal(75, (run({ "lock", "--timeout", "0", p, "--", "true" })))
            assert.are.equal(75, (run({ "lock", "--shared", "--timeout", "0", p, "--", "true" })))
            wl:release()
            local l = c:lock(p)
            assert(l:acquire(5))
            assert.are.equal(75, (run({ "lock", "--timeout", "0", p, "--", "true" })))
            l:release()
            assert.are.equal(0, (run({ "lock", "--timeout", "0", p, "--", "true" })))
            c:close()
        end)

        it("SIGTERM to zkcoord goes to CMD; its status is ours; the lock goes at once", function()
            local p = root .. "/sig"
            local marker = tmpfile("term")
            local h = start({ "lock", p, "--", "sh", "-c",
                              ("trap 'echo TERM > %s; exit 7' TERM; sleep 30 & wait"):format(marker) })
            assert.truthy(wait_locks(p, 1))
            assert(proc.kill(h.pid, "TERM"))
            local t0 = proc.now()
            assert.are.equal(7, (h.wait(5)))
            assert.are.equal("TERM\n", proc.read_file(marker))
            -- released at once, not after a session timeout
            local rc = run({ "lock", "--timeout", "0", p, "--", "true" })
            assert.are.equal(0, rc)
            -- measured at load 2: 0.09-0.59 s
            assert.is_true(proc.now() - t0 < 8)      -- the session timeout is 10 s

            -- no trap: CMD dies of the signal, 128+15
            h = start({ "lock", p, "--", "sleep", "30" })
            assert.truthy(wait_locks(p, 1))
            assert(proc.kill(h.pid, "TERM"))
            assert.are.equal(143, (h.wait(5)))
            -- SIGHUP and SIGINT are passed on too (sh starts its background
            -- sleep with SIGINT ignored: the trap ends it)
            for _, sig in ipairs({ "HUP", "INT" }) do
                h = start({ "lock", p, "--", "sh", "-c",
                            "trap 'kill $!; exit 9' " .. sig .. "; sleep 30 & wait" })
                assert.truthy(wait_locks(p, 1))
                assert(proc.kill(h.pid, sig))
                assert.are.equal(9, (h.wait(5)), sig)
            end
            assert.are.same({}, admin:children(p))
        end)

        it("a signal while waiting for the lock ends the wait and leaves no node", function()
            local p = root .. "/sigwait"
            local holder = start({ "lock", p, "--", "sleep", "30" })
            assert.truthy(wait_locks(p, 1))
            local marker = tmpfile("ran")
            local h = start({ "lock", p, "--", "touch", marker })
            assert.truthy(wait_locks(p, 2))
            assert(proc.kill(h.pid, "INT"))
            assert.are.equal(130, (h.wait(5)))
            assert.is_nil(proc.read_file(marker))
            assert.are.equal(1, #admin:children(p))
            proc.kill(holder.pid, "TERM")
            assert.are.equal(143, (holder.wait(5)))
        end)

        it("exits 71 and SIGTERMs CMD when its lock node is deleted", function()
            local p = root .. "/del"
            local marker = tmpfile("term")
            local h = start({ "lock", p, "--", "sh", "-c",
                              ("trap 'echo TERM > %s; exit 0' TERM; sleep 30 & wait"):format(marker) })
            assert.truthy(wait_locks(p, 1))
            local t0 = proc.now()
            assert(admin:delete(p .. "/" .. locks(p)[1].node))
            local rc, _, err = h.wait(5)
            assert.are.equal(71, rc)
            -- measured at load 2: 0.07-0.09 s
            assert.is_true(proc.now() - t0 < 5)
            assert.are.equal("TERM\n", proc.read_file(marker))
            assert.truthy(err:find("lost (deleted)", 1, true), err)
        end)

        it("SIGKILLs a CMD that ignores SIGTERM after --grace", function()
            local p = root .. "/grace"
            local h = start({ "lock", "--grace", "0.5", p, "--", "sh", "-c",
                              "trap '' TERM; while :; do sleep 0.1; done" })
            assert.truthy(wait_locks(p, 1))
            local t0 = proc.now()
            assert(admin:delete(p .. "/" .. locks(p)[1].node))
            local rc, _, err = h.wait(5)
            local took = proc.now() - t0
            assert.are.equal(71, rc)
            -- measured at load 2: 0.58 s
            assert.is_true(took >= 0.5 and took < 5, "took " .. took)
            assert.truthy(err:find("SIGKILL", 1, true), err)
        end)

        it("exits 71 when the session expires while CMD runs", function()
            local p = root .. "/expire"
            local marker = tmpfile("term")
            local h = start({ "--session-timeout", "2", "lock", p, "--", "sh", "-c",
                              ("trap 'echo TERM > %s; exit 0' TERM; sleep 30 & wait"):format(marker) })
            assert.truthy(wait_locks(p, 1))
            -- frozen past its session timeout: the server expires the session
            assert(proc.kill(h.pid, "STOP"))
            assert.truthy(zk.wait_until(function() return #admin:children(p) == 0 end, 10))
            assert(proc.kill(h.pid, "CONT"))
            local rc, _, err = h.wait(10)
            assert.are.equal(71, rc)
            assert.are.equal("TERM\n", proc.read_file(marker))
            -- the node went with the session: either is what happened
            assert.truthy(err:find("lost (sessionexpired)", 1, true)
                          or err:find("lost (deleted)", 1, true), err)
        end)

        it("exits 71 when cut off from every server for the session timeout", function()
            local p = root .. "/cut"
            local port = tonumber(zk.hosts():match(":(%d+)"))
            local proxy = assert(tcpproxy.start("127.0.0.1", port))
            local marker = tmpfile("term")
            local h = start({ "--servers", proxy.hosts, "--session-timeout", "2", "lock", p,
                              "--", "sh", "-c",
                              ("trap 'echo TERM > %s; exit 0' TERM; sleep 30 & wait"):format(marker) })
            assert.truthy(wait_locks(p, 1))
            local t0 = proc.now()
            proxy:blackhole()
            local rc, _, err = h.wait(10)
            local took = proc.now() - t0
            proxy:stop()
            assert.are.equal(71, rc)
            -- not at once, and soon: libzookeeper notices the silence 2/3 of the
            -- 2 s session after its last packet (up to a ping interval, 1/3,
            -- before the cut), then lost_after adds 1/4: 1.17 s at the earliest
            -- measured at load 2: 1.66-1.93 s
            assert.is_true(took >= 1.0 and took < 6, "took " .. took)
            assert.are.equal("TERM\n", proc.read_file(marker))
            assert.truthy(err:find("lost (", 1, true), err)
        end)
    end)

    -- zkcoord runs CMD in a process group of its own and is the subreaper of
    -- every descendant: the lock is held until no process of the command is
    -- left, and no process of the command outlives zkcoord.
    describe("the command's processes", function()
        -- The pid sh wrote to `file` (waits for it).
        local function pid_in(file)
            assert.truthy(zk.wait_until(function()
                return tonumber(proc.read_file(file) or "")
            end, 10), file)
            return tonumber(proc.read_file(file))
        end

        local function gone(pid)        -- reaped: no /proc entry at all
            return proc.state(pid) == nil
        end

        local function until_go(go)     -- sh that waits for file `go`
            return ("while [ ! -e %s ]; do sleep 0.05; done"):format(go)
        end

        it("holds the lock until a grandchild that outlives CMD exits", function()
            local p = root .. "/grand"
            local shpid, kidpid, go, done = tmpfile("sh"), tmpfile("kid"), tmpfile("go"), tmpfile("done")
            finally(function() proc.write_file(go, "") end)   -- the waiters end, failed or not
            local h = start({ "lock", p, "--", "sh", "-c",
                ("echo $$ > %s; (%s; touch %s) & echo $! > %s; exit 3")
                    :format(shpid, until_go(go), done, kidpid) })
            local sh, kid = pid_in(shpid), pid_in(kidpid)
            assert.truthy(zk.wait_until(function() return gone(sh) end, 10))
            assert.is_true(proc.alive(kid))
            assert.are.equal(75, (run({ "lock", "--timeout", "0", p, "--", "true" })))
            assert.is_true(h.running())
            proc.write_file(go, "")
            assert.are.equal(3, (h.wait(10)))       -- CMD's status
            assert.truthy(proc.read_file(done))
            assert.is_false(proc.alive(kid))
            assert.are.equal(0, (run({ "lock", "--timeout", "0", p, "--", "true" })))
        end)

        it("holds the lock until a double-forked daemon exits", function()
            local p = root .. "/daemon"
            local dpid, go, done = tmpfile("daemon"), tmpfile("go"), tmpfile("done")
            finally(function() proc.write_file(go, "") end)   -- the waiters end, failed or not
            -- the daemon: a new session (setsid), its parent gone at once
            local h = start({ "lock", p, "--", "sh", "-c",
                ("(setsid sh -c 'echo $$ > %s; %s; touch %s' </dev/null >/dev/null 2>&1 &); exit 0")
                    :format(dpid, until_go(go), done) })
            local d = pid_in(dpid)
            assert.is_true(proc.alive(d))
            assert.are.equal(75, (run({ "lock", "--timeout", "0", p, "--", "true" })))
            assert.is_true(h.running())
            proc.write_file(go, "")
            assert.are.equal(0, (h.wait(10)))
            assert.truthy(proc.read_file(done))
            assert.are.equal(0, (run({ "lock", "--timeout", "0", p, "--", "true" })))
        end)

        it("SIGTERM to zkcoord ends every process of the group before the lock goes", function()
            local p = root .. "/term"
            local sleeppid = tmpfile("sleep")
            local h = start({ "lock", p, "--", "sh", "-c",
                              ("sleep 300 & echo $! > %s; wait"):format(sleeppid) })
            local sl = pid_in(sleeppid)
            finally(function() if proc.alive(sl) then proc.kill(sl, "KILL") end end)
            assert(proc.kill(h.pid, "TERM"))
            assert.are.equal(143, (h.wait(5)))
            -- zkcoord ended (and released) only once the sleep was dead
            assert.is_false(proc.alive(sl))
            assert.are.equal(0, (run({ "lock", "--timeout", "0", p, "--", "true" })))
        end)

        it("SIGKILL to zkcoord ends the group within a second, before the lock goes", function()
            local p = root .. "/kill"
            local shpid, sleeppid = tmpfile("sh"), tmpfile("sleep")
            local h = start({ "lock", p, "--", "sh", "-c",
                              ("echo $$ > %s; sleep 300 & echo $! > %s; wait")
                                  :format(shpid, sleeppid) })
            local sh, sl = pid_in(shpid), pid_in(sleeppid)
            finally(function()
                for _, pid in ipairs({ sh, sl }) do
                    if proc.alive(pid) then proc.kill(pid, "KILL") end
                end
            end)
            assert.truthy(wait_locks(p, 1))
            local t0 = proc.now()
            assert(proc.kill(h.pid, "KILL"))
            assert.truthy(zk.wait_until(function()
                return not proc.alive(sh) and not proc.alive(sl)
            end, 1), "the command outlived zkcoord by a second")
            assert.is_true(proc.now() - t0 < 1)
            -- the killed session still holds the lock (until it expires)
            assert.are.equal(75, (run({ "lock", "--timeout", "0", p, "--", "true" })))
        end)

        it("on a lost lock, SIGTERM and then SIGKILL reach the whole group", function()
            local p = root .. "/lostgroup"
            local sleeppid = tmpfile("sleep")
            -- sh ignores SIGTERM; so does its background sleep (trap '' is
            -- inherited): only SIGKILL ends them
            local h = start({ "lock", "--grace", "0.5", p, "--", "sh", "-c",
                              ("trap '' TERM; sleep 300 & echo $! > %s; wait"):format(sleeppid) })
            local sl = pid_in(sleeppid)
            finally(function() if proc.alive(sl) then proc.kill(sl, "KILL") end end)
            assert.truthy(wait_locks(p, 1))
            assert(admin:delete(p .. "/" .. locks(p)[1].node))
            assert.are.equal(71, (h.wait(5)))
            assert.is_false(proc.alive(sl))
        end)
        it("a forwarded SIGTERM reaches other groups reparented to zkcoord, then SIGKILL", function()
            -- bash -m: the background sleep in a group of its own; a daemon
            -- (setsid) with a child: both are reparented to zkcoord only once
            -- CMD's shell has died of the SIGTERM
            local cases = {
                { "bash", "-c", "set -m; sleep 300 & echo $! > %s; wait" },
                { "sh", "-c", "setsid sh -c 'sleep 300 & echo $! > %s; wait' & wait" },
            }
            for k, argv in ipairs(cases) do
                local p = root .. "/fwd" .. k
                local sleeppid = tmpfile("sleep")
                local cmd = { "lock", p, "--" }
                for _, a in ipairs(argv) do cmd[#cmd + 1] = a:format(sleeppid) end
                local h = start(cmd)
                local sl = pid_in(sleeppid)
                finally(function() if proc.alive(sl) then proc.kill(sl, "KILL") end end)
                assert.truthy(wait_locks(p, 1))
                assert(proc.kill(h.pid, "TERM"))
                assert.are.equal(143, (h.wait(5)), argv[3])
                assert.is_false(proc.alive(sl), argv[3])
                assert.are.equal(0, (run({ "lock", "--timeout", "0", p, "--", "true" })))
            end
            -- a command that ignores the SIGTERM: SIGKILL after --grace
            local p = root .. "/fwdgrace"
            local sleeppid = tmpfile("sleep")
            local h = start({ "lock", "--grace", "0.5", p, "--", "sh", "-c",
                              ("trap '' TERM; sleep 300 & echo $! > %s; wait"):format(sleeppid) })
            local sl = pid_in(sleeppid)
            finally(function() if proc.alive(sl) then proc.kill(sl, "KILL") end end)
            assert.truthy(wait_locks(p, 1))
            assert(proc.kill(h.pid, "TERM"))
            local rc, _, err = h.wait(5)
            assert.are.equal(137, rc)
            assert.truthy(err:find("SIGKILL", 1, true), err)
            assert.is_false(proc.alive(sl))
        end)

        it("SIGQUIT, SIGUSR1 and SIGUSR2 to zkcoord go to CMD; zkcoord lives on", function()
            local p = root .. "/quit"
            local marker = tmpfile("sigs")
            local h = start({ "lock", p, "--", "sh", "-c",
                              ("trap 'echo USR1 >> %s' USR1; trap 'echo USR2 >> %s' USR2;"
                               .. " trap 'echo QUIT >> %s; exit 5' QUIT;"
                               .. " while :; do sleep 0.05; done"):format(marker, marker, marker) })
            assert.truthy(wait_locks(p, 1))
            assert(proc.kill(h.pid, "USR1"))
            assert.truthy(zk.wait_until(function() return proc.read_file(marker) == "USR1\n" end, 5))
            assert(proc.kill(h.pid, "USR2"))
            assert.truthy(zk.wait_until(function()
                return proc.read_file(marker) == "USR1\nUSR2\n"
            end, 5), proc.read_file(marker))
            assert.is_true(h.running())
            assert(proc.kill(h.pid, "QUIT"))
            assert.are.equal(5, (h.wait(5)))      -- CMD's status
            assert.are.equal("USR1\nUSR2\nQUIT\n", proc.read_file(marker))
            -- released at once
            assert.are.equal(0, (run({ "lock", "--timeout", "0", p, "--", "true" })))
        end)

        it("after Ctrl-Z and fg, a lock lost meanwhile ends CMD before it runs a step", function()
            local p = root .. "/tstp"
            local zkpidf, cmdpidf, ticks = tmpfile("zk"), tmpfile("cmd"), tmpfile("ticks")
            -- on a terminal (script(1)), as a job of a shell: zkcoord hands
            -- CMD the terminal, and stops with it on Ctrl-Z. This test plays
            -- the shell (Ctrl-Z, fg). zkcoord is not script's own child but
            -- a shell's below it, so script never stops with it: script
            -- would read one SIGCHLD for zkcoord's continue and exit when
            -- the two come together and never see the exit (util-linux
            -- 2.38: 5 runs in 22 at load 7 waited 10 s beside a zombie).
            local inner = ("sh -c %s; exit $?"):format(proc.shquote(
                ("echo $$ > %s; exec %s%s --session-timeout 2 lock %s -- sh -c %s"):format(
                    zkpidf, CLI_LUA and (CLI_LUA .. " ") or "", proc.shquote(BIN), p,
                    proc.shquote(("echo $$ > %s; while :; do echo tick >> %s; sleep 0.05; done")
                                 :format(cmdpidf, ticks)))))
            local h = start({ "-qec", inner, "/dev/null" }, { bin = "script" })
            local zpid, cpid = pid_in(zkpidf), pid_in(cmdpidf)
            finally(function()
                for _, pid in ipairs({ zpid, cpid }) do
                    if proc.alive(pid) then proc.kill(pid, "KILL") end
                end
            end)
            assert.truthy(zk.wait_until(function() return proc.read_file(ticks) end, 10))
            -- Ctrl-Z: the terminal's SIGTSTP to its foreground group, CMD's
            local sent = os.execute(("/bin/kill -s TSTP -- -%d"):format(cpid))
            assert.truthy(sent == true or sent == 0)
            assert.truthy(zk.wait_until(function() return proc.stopped(zpid) end, 5))
            -- meanwhile the session expires: another may take the lock
            assert.truthy(zk.wait_until(function() return #admin:children(p) == 0 end, 10))
            local n = #lines(proc.read_file(ticks))
            assert.is_true(proc.stopped(cpid))
            -- fg: a shell continues the job, zkcoord
            assert(proc.kill(zpid, "CONT"))
            local rc, out = h.wait(10)
            assert.are.equal(71, rc, out)
            assert.are.equal(n, #lines(proc.read_file(ticks)))
            assert.truthy(out:find("lost (", 1, true), out)
        end)
    end)

    describe("the cron.d example (docs/command.md)", function()
        -- The block as cron reads it: one entry a line, NAME=value lines set
        -- the environment, an entry is 5 time fields, the user, the command.
        local function crontab()
            local readme = assert(proc.read_file(ROOT .. "/docs/command.md"))
            local block = readme:match("```sh\n(# /etc/cron%.d/[^\n]*\n.-)```")
            assert.truthy(block, "no cron.d block in docs/command.md")
            local vars, entries = {}, {}
            for l in block:gmatch("[^\n]+") do
                if not l:match("^%s*#") then
                    assert.is_nil(l:match("\\%s*$"), "a continuation line: " .. l)
                    local name, value = l:match("^([%a_][%w_]*)=(%S*)$")
                    if name then
                        vars[name] = value
                    else
                        local f = {}
                        for w in l:gmatch("%S+") do f[#f + 1] = w end
                        assert.is_true(#f >= 7, "not an entry: " .. l)
                        local cmd = l:match("^%s*" .. ("%S+%s+"):rep(6) .. "(.*)$")
                        entries[#entries + 1] = { user = f[6], cmd = cmd }
                    end
                end
            end
            return vars, entries
        end

        it("is one line per entry, and its command runs the job once", function()
            local vars, entries = crontab()
            assert.are.equal(1, #entries)
            assert.truthy(vars.ZKCOORD_SERVERS)
            -- the job and the servers are this test's; zkcoord is on PATH
            local bindir, marker = tmpfile("bin"), tmpfile("ran")
            assert(proc.mkdir_p(bindir))
            local job = entries[1].cmd:match("(/%S+)$")
            assert.truthy(job, entries[1].cmd)
            local cmd = entries[1].cmd:gsub(job:gsub("%p", "%%%0"), bindir .. "/job")
            proc.write_file(bindir .. "/job", "#!/bin/sh\necho ran >> " .. marker .. "\n")
            -- zkcoord: a symlink to bin/zkcoord (or a wrapper running it on CLI_LUA)
            local install = "ln -s " .. BIN .. " " .. bindir .. "/zkcoord"
            if CLI_LUA then
                proc.write_file(bindir .. "/zkcoord",
                                ('#!/bin/sh\nexec %s %s "$@"\n'):format(CLI_LUA, BIN))
                install = "chmod +x " .. bindir .. "/zkcoord"
            end
            assert.are.equal(0, (run({ "-c", "chmod +x " .. bindir .. "/job && " .. install },
                                     nil, { bin = "sh" })))
            local path = cmd:match("zkcoord once.- (/%S+) %-%-")
            assert.truthy(path, cmd)
            cmd = cmd:gsub(path:gsub("%p", "%%%0"), root .. path)
            -- a period no run of this test straddles (they start at multiples of
            -- 10^9 s since the epoch: 2001, 2033)
            assert.truthy(cmd:find("--period %d+"), cmd)
            cmd = cmd:gsub("%-%-period %d+", "--period 1000000000")
            local e = { PATH = bindir .. ":" .. os.getenv("PATH") }
            local rc, _, err = run({ "-c", cmd }, nil, { bin = "sh", env = e })
            assert.are.equal(0, rc, err)
            assert.are.equal("", err)
            assert.are.equal("ran\n", proc.read_file(marker))
            -- the next host in the same period: exit 0, silent, the job does not run again
            rc, _, err = run({ "-c", cmd }, nil, { bin = "sh", env = e })
            assert.are.same({ 0, "" }, { rc, err })
            assert.are.equal("ran\n", proc.read_file(marker))
            -- while another host holds the lock (runs it): exit 0, the job does not run
            local go = tmpfile("go")
            finally(function() proc.write_file(go, "") end)   -- the waiters end, failed or not
            local holder = start({ "lock", root .. path, "--", "sh", "-c",
                                   ("while [ ! -e %s ]; do sleep 0.05; done"):format(go) })
            assert.truthy(wait_locks(root .. path, 1))
            rc, _, err = run({ "-c", cmd }, nil, { bin = "sh", env = e })
            assert.are.same({ 0, "" }, { rc, err })
            assert.are.equal("ran\n", proc.read_file(marker))
            proc.write_file(go, "")
            assert.are.equal(0, (holder.wait(10)))
        end)
    end)

    describe("flock's options", function()
        it("-n gives up at once, -E sets that status, -w waits that long", function()
            local p = root .. "/flock"
            local go = tmpfile("go")
            finally(function() proc.write_file(go, "") end)   -- the waiters end, failed or not
            local holder = start({ "lock", p, "--", "sh", "-c",
                                   ("while [ ! -e %s ]; do sleep 0.05; done"):format(go) })
            assert.truthy(wait_locks(p, 1))
            assert.are.equal(75, (run({ "lock", "-n", p, "--", "true" })))
            assert.are.equal(75, (run({ "lock", "--nonblock", p, "--", "true" })))
            assert.are.equal(9, (run({ "lock", "-n", "-E", "9", p, "--", "true" })))
            assert.are.equal(9, (run({ "lock", "-nE9", p, "--", "true" })))
            assert.are.equal(9, (run({ "lock", "--conflict-exit-code", "9", "-n", p, "--", "true" })))
            local t0 = proc.now()
            assert.are.equal(75, (run({ "lock", "-w", "0.5", p, "--", "true" })))
            local took = proc.now() - t0
            assert.is_true(took >= 0.5, "took " .. took)
            proc.write_file(go, "")
            assert.are.equal(0, (holder.wait(10)))
            assert.are.equal(0, (run({ "lock", "-w1", p, "--", "true" })))
            -- one of -n, -w and --timeout; -E an exit status
            assert.are.equal(64, (run({ "lock", "-n", "-w", "1", p, "--", "true" })))
            assert.are.equal(64, (run({ "lock", "-E", "256", p, "--", "true" })))
        end)

        it("-c CMD runs through sh -c, after PATH or before it", function()
            local p = root .. "/flockc"
            local rc, out = run({ "lock", p, "-c", 'echo "a $ZKCOORD_LOCK_NODE"; exit 4' })
            assert.are.equal(4, rc)
            assert.truthy(out:match("^a " .. p:gsub("%p", "%%%0") .. "/_c_%S+%-lock%-%d+\n$"), out)
            rc, out = run({ "lock", "-c", "echo b", p })
            assert.are.equal(0, rc)
            assert.are.equal("b\n", out)
            assert.are.equal(64, (run({ "lock", p, "-c" })))
            assert.are.equal(64, (run({ "lock", p, "-c", "true", "extra" })))
            assert.are.equal(64, (run({ "lock", "-c", "true", p, "--", "true" })))
        end)

        it("-s takes the shared lock, -x the exclusive one", function()
            local p = root .. "/flocks"
            local go = tmpfile("go")
            finally(function() proc.write_file(go, "") end)   -- the waiters end, failed or not
            local wait_go = ("while [ ! -e %s ]; do sleep 0.05; done"):format(go)
            local r1 = start({ "lock", "-s", p, "-c", wait_go })
            local r2 = start({ "lock", "-s", p, "-c", wait_go })
            assert.truthy(wait_locks(p, 2))
            local rows = locks(p)
            assert.are.same({ "holder", "holder" }, { rows[1].state, rows[2].state })
            assert.are.equal(0, (run({ "lock", "-s", "-n", p, "--", "true" })))
            assert.are.equal(75, (run({ "lock", "-x", "-n", p, "--", "true" })))
            assert.are.equal(64, (run({ "lock", "-s", "-x", p, "--", "true" })))
            proc.write_file(go, "")
            assert.are.equal(0, (r1.wait(10)))
            assert.are.equal(0, (r2.wait(10)))
            assert.are.equal(0, (run({ "lock", "-x", "-n", p, "--", "true" })))
        end)

        it("-V and --version print the version of lua/zkcoord/version.lua", function()
            local want = "zkcoord " .. require("zkcoord.version") .. "\n"
            for _, args in ipairs({ { "--version" }, { "-V" }, { "lock", "-V" },
                                    { "lock", "--version" } }) do
                local rc, out, err = run(args)
                assert.are.equal(0, rc, err)
                assert.are.equal(want, out)
            end
        end)
    end)

    describe("cron-ready", function()
        it("-n is silent on a held lock, with its exit status; --verbose says why and how long",
           function()
            local p = root .. "/quiet"
            local go = tmpfile("go")
            finally(function() proc.write_file(go, "") end)   -- the holder ends, failed or not
            local holder = start({ "lock", "--data", "host-a:1", p, "--", "sh", "-c",
                                   ("while [ ! -e %s ]; do sleep 0.05; done"):format(go) })
            assert.truthy(wait_locks(p, 1))
            local rc, out, err = run({ "lock", "-n", p, "--", "true" })
            assert.are.same({ 75, "", "" }, { rc, out, err })
            rc, out, err = run({ "lock", "-n", "-E", "3", p, "--", "true" })
            assert.are.same({ 3, "", "" }, { rc, out, err })
            rc, out, err = run({ "lock", "-w", "0.2", p, "--", "true" })
            assert.are.same({ 75, "", "" }, { rc, out, err })
            rc, out, err = run({ "lock", "-n", "--verbose", p, "--", "true" })
            assert.are.same({ 75, "" }, { rc, out })
            local waited = err:match("^zkcoord: lock " .. p:gsub("%p", "%%%0")
                                     .. " not acquired within 0s %(waited (%d+%.%d+)s%): held by "
                                     .. "_c_%S+%-lock%-%d+ %(host%-a:1%)\n$")
            assert.truthy(waited, err)
            proc.write_file(go, "")
            assert.are.equal(0, (holder.wait(10)))
            -- acquired: --verbose says after how long, and CMD's output is untouched
            rc, out, err = run({ "lock", "-n", "--verbose", p, "--", "echo", "hi" })
            assert.are.same({ 0, "hi\n" }, { rc, out })
            assert.truthy(err:match("^zkcoord: got the lock " .. p:gsub("%p", "%%%0")
                                    .. " after %d+%.%d+s %(node " .. p:gsub("%p", "%%%0")
                                    .. "/_c_%S+%-lock%-%d+%)\n$"), err)
        end)

        it("-o (flock's --close) is accepted and changes nothing", function()
            local p = root .. "/close"
            for _, args in ipairs({ { "lock", "-o", p, "--", "echo", "a" },
                                    { "lock", "-no", p, "-c", "echo a" },
                                    { "lock", "--close", p, "--", "echo", "a" },
                                    { "elect", "-o", p .. "e", "--", "echo", "a" } }) do
                local rc, out, err = run(args)
                assert.are.same({ 0, "a\n", "" }, { rc, out, err }, table.concat(args, " "))
            end
            local _, out = run({ "help", "lock" })
            assert.truthy(out:find("-o, --close", 1, true), out)
        end)

        -- CMD for `once`: appends a line to `marker`, takes `secs`, exits `code`.
        local function job(marker, secs, code)
            return ("echo run >> %s; sleep %s; exit %d"):format(marker, secs or 0, code or 0)
        end

        it("once: three hosts started 0.5 s apart run CMD once", function()
            local p, marker = root .. "/once", tmpfile("ran")
            -- CMD takes 0.7 s: the second host finds it running, the third done
            -- (under load either, or both the same: one run all the same)
            local hs = {}
            for i = 1, 3 do
                if i > 1 then proc.sleep(0.5) end
                hs[i] = start({ "once", "--period", "1000000000", p, "-c", job(marker, 0.7) })
            end
            for i = 1, 3 do
                local rc, out, err = hs[i].wait(15)
                assert.are.same({ 0, "", "" }, { rc, out, err }, "host " .. i)
            end
            assert.are.equal("run\n", proc.read_file(marker))
            -- --verbose says why it did not run
            local go = tmpfile("go")
            finally(function() proc.write_file(go, "") end)   -- the holder ends, failed or not
            local holder = start({ "lock", "--data", "host-b:2", p, "--", "sh", "-c",
                                   ("while [ ! -e %s ]; do sleep 0.05; done"):format(go) })
            assert.truthy(wait_locks(p, 1))
            local rc, out, err = run({ "once", "--verbose", "--period", "1000000000", p, "--", "true" })
            assert.are.same({ 0, "" }, { rc, out })
            assert.truthy(err:find("once " .. p .. ": a run is under way elsewhere (waited ", 1, true), err)
            assert.truthy(err:find("held by _c_%S+%-lock%-%d+ %(host%-b:2%)"), err)
            proc.write_file(go, "")
            assert.are.equal(0, (holder.wait(10)))
            assert.are.equal("run\n", proc.read_file(marker))
            -- the record: PATH's data, the server's time in ms and who ran it
            local data = assert(admin:get(p))
            assert.truthy(data:match("^%d+ %S+:%d+$"), data)
            assert.are.same({}, admin:children(p))      -- no lock node left
        end)

        it("once: a failed run is not done: the next host runs CMD", function()
            local p, marker = root .. "/oncefail", tmpfile("ran")
            local function once(code, more)
                local args = { "once", "--period", "1000000000" }
                for _, a in ipairs(more or {}) do args[#args + 1] = a end
                for _, a in ipairs({ p, "-c", job(marker, 0, code) }) do args[#args + 1] = a end
                return run(args)
            end
            local rc, _, err = once(3)
            assert.are.same({ 3, "" }, { rc, err })          -- CMD's own status
            assert.are.equal("run\n", proc.read_file(marker))
            rc, _, err = once(0)
            assert.are.same({ 0, "" }, { rc, err })
            assert.are.equal("run\nrun\n", proc.read_file(marker))
            rc, _, err = once(0, { "--verbose" })
            assert.are.equal(0, rc)
            assert.truthy(err:find("once " .. p .. ": done already: period 1 (1000000000s) ran at ", 1, true),
                          err)
            assert.are.equal("run\nrun\n", proc.read_file(marker))
            -- a new period runs again: a period of 1 s, the server's clock
            assert.truthy(zk.wait_until(function()
                return once(0, { "--period", "1" }) == 0
                       and proc.read_file(marker) == "run\nrun\nrun\n"
            end, 10))
        end)

        it("once: --period is required and positive; it never waits (no -n, -w)", function()
            local p = root .. "/onceusage"
            assert.are.equal(64, (run({ "once", p, "--", "true" })))
            assert.are.equal(64, (run({ "once", "--period", "0", p, "--", "true" })))
            assert.are.equal(64, (run({ "once", "--period", "5", "-n", p, "--", "true" })))
            assert.are.equal(64, (run({ "once", "--period", "5", "-w", "1", p, "--", "true" })))
            local rc, out = run({ "help", "once" })
            assert.are.equal(0, rc)
            assert.truthy(out:find("--period", 1, true), out)
        end)
    end)

    describe("elect", function()
        it("runs CMD only on the leader, the next one when it ends", function()
            local p = root .. "/e"
            local log = tmpfile("elect.log")
            local go = tmpfile("go")       -- a leader's command ends once this exists
            local function cmd(id)
                return { "elect", "--id", id, p, "--", "sh", "-c",
                         ('echo "%s start $ZKCOORD_FENCING_TOKEN" >> %s; '
                          .. 'while [ ! -e %s ]; do sleep 0.05; done; echo "%s end" >> %s')
                             :format(id, log, go, id, log) }
            end
            local a = start(cmd("A"))
            assert.truthy(wait_locks(p, 1))
            local b = start(cmd("B"))
            assert.truthy(wait_locks(p, 2))
            local rows = locks(p)
            assert.are.same({ "holder", "waiter" }, { rows[1].state, rows[2].state })
            assert.are.same({ "A", "B" }, { rows[1].data, rows[2].data })
            assert.are.same({ "leader", "leader" }, { rows[1].kind, rows[2].kind })
            -- only the leader's command runs
            assert.truthy(zk.wait_until(function()
                return (proc.read_file(log) or ""):find("A start", 1, true)
            end, 5))
            assert.is_nil((proc.read_file(log) or ""):find("B start", 1, true))
            local rc = run({ "elect", "--timeout", "0", p, "--", "true" })
            assert.are.equal(75, rc)
            assert.is_nil((proc.read_file(log) or ""):find("B start", 1, true))
            assert(proc.write_file(go, ""))
            assert.are.equal(0, (a.wait(10)))
            assert.are.equal(0, (b.wait(10)))
            local l = lines(proc.read_file(log))
            assert.are.equal(4, #l)
            local ta = tonumber(l[1]:match("^A start (%d+)$"))
            assert.are.equal("A end", l[2])
            local tb = tonumber(l[3]:match("^B start (%d+)$"))
            assert.are.equal("B end", l[4])
            assert.is_true(tb > ta)
        end)

        it("elect: one CMD among 3 wrappers; the next starts once the leader is SIGKILLed",
           function()
            local p = root .. "/e3"
            local log = tmpfile("elect3.log")
            local go = tmpfile("go3")
            local function cmd(id)
                return { "--session-timeout", "2", "elect", "--id", id, p, "--", "sh", "-c",
                         ('echo "%s start" >> %s; while [ ! -e %s ]; do sleep 0.05; done')
                             :format(id, log, go) }
            end
            local hs = { start(cmd("A")) }
            assert.truthy(wait_locks(p, 1))
            -- B joins the line before C starts: "in line order" below is B.
            hs[2] = start(cmd("B"))
            assert.truthy(wait_locks(p, 2))
            hs[3] = start(cmd("C"))
            assert.truthy(wait_locks(p, 3))
            assert.truthy(zk.wait_until(function()
                return (proc.read_file(log) or ""):find("A start", 1, true)
            end, 5))
            proc.sleep(0.5)
            assert.are.same({ "A start" }, lines(proc.read_file(log)))    -- exactly one runs
            proc.kill(hs[1].pid, "KILL")
            assert.truthy(zk.wait_until(function()
                return #lines(proc.read_file(log)) >= 2
            end, 15), "no successor started")
            proc.sleep(0.5)
            local l = lines(proc.read_file(log))
            assert.are.equal(2, #l)                                          -- one successor
            assert.are.equal("B start", l[2])                               -- in line order
            assert(proc.write_file(go, ""))
            assert.are.equal(0, (hs[2].wait(10)))
            assert.are.equal(0, (hs[3].wait(15)))
        end)

        it("exits 71 and stops CMD when leadership is lost", function()
            local p = root .. "/elost"
            local marker = tmpfile("term")
            local h = start({ "elect", p, "--", "sh", "-c",
                              ("trap 'echo TERM > %s; exit 0' TERM; sleep 30 & wait"):format(marker) })
            assert.truthy(wait_locks(p, 1))
            assert(admin:delete(p .. "/" .. locks(p)[1].node))
            assert.are.equal(71, (h.wait(5)))
            assert.are.equal("TERM\n", proc.read_file(marker))
        end)
    end)

    describe("locks", function()
        it("knows zkcoord's, Curator's and kazoo's nodes, in sequence order", function()
            local p = root .. "/mixed"
            assert(admin:create(p))
            local c = zk.client()
            local made = {
                { "abcdef0123456789abcdef0123456789__rlock__", "kazoo-reader", "read" },
                { "_c_0f0e0d0c-0b0a-4908-8706-050403020100-__READ__", "curator-reader", "read" },
                { "abcdef0123456789abcdef0123456789__lock__", "kazoo-writer", "lock" },
                { "_c_0f0e0d0c-0b0a-4908-8706-050403020101-__WRIT__", "curator-writer", "write" },
                { "not-a-lock-node", "ignored", nil },
            }
            local names = {}
            for i, m in ipairs(made) do
                local path = assert(c:create(p .. "/" .. m[1], m[2],
                                             { ephemeral = true, sequential = m[3] ~= nil }))
                names[i] = path:match("[^/]+$")
            end
            local rows = locks(p)
            assert.are.equal(4, #rows)
            for i = 1, 4 do
                assert.are.equal(names[i], rows[i].node)
                assert.are.equal(made[i][2], rows[i].data)
                assert.are.equal(made[i][3], rows[i].kind)
                assert.are.equal("0x" .. c:session_id(), rows[i].session)
                assert.truthy(rows[i].age:match("^%d+%.%ds$"))
            end
            assert.are.same({ "holder", "holder", "waiter", "waiter" },
                            { rows[1].state, rows[2].state, rows[3].state, rows[4].state })
            -- a Curator mutex node, and a zkcoord lock waiting behind it
            local p2 = root .. "/curator"
            assert(c:create(p2 .. "/_c_0f0e0d0c-0b0a-4908-8706-050403020102-lock-", "curator",
                            { ephemeral = true, sequential = true, parents = true }))
            local h = start({ "lock", "--data", "cli", p2, "--", "true" })
            assert.truthy(wait_locks(p2, 2))
            rows = locks(p2)
            assert.are.same({ "holder", "curator" }, { rows[1].state, rows[1].data })
            assert.are.same({ "waiter", "cli" }, { rows[2].state, rows[2].data })
            assert.is_true(h.running())
            c:close()
            assert.are.equal(0, (h.wait(10)))
        end)

        it("walks below PATH: every lock, a header, --json, the library's hostname:pid", function()
            local c = zk.client()
            local a, b = root .. "/jobs/a", root .. "/jobs/deep/b"
            local la = c:lock(a)
            assert(la:acquire(5))
            local rw = c:rwlock(b)
            assert(rw:read_lock():acquire(5))
            assert(c:create(root .. "/jobs/empty", nil, { parents = true }))
            local id = require("zkcoord.util").default_id()
            local rows = locks(root .. "/jobs")
            assert.are.equal(2, #rows)
            assert.are.same({ a, "holder", "lock", id }, { rows[1].lock, rows[1].state, rows[1].kind,
                                                          rows[1].data })
            assert.are.same({ b, "holder", "read", id }, { rows[2].lock, rows[2].state, rows[2].kind,
                                                          rows[2].data })
            -- nothing there: only the header
            local rc, out = run({ "locks", root .. "/jobs/empty" })
            assert.are.same({ 0, LOCKS_HEADER .. "\n" }, { rc, out })
            rc, out = run({ "locks", "--json", root .. "/jobs/empty" })
            assert.are.same({ 0, "[]\n" }, { rc, out })
            local err
            rc, out, err = run({ "locks", "--json", root .. "/jobs" })
            assert.are.equal(0, rc, err)
            local function row(lock, kind, node)
                return ('{"lock":"%s","state":"holder","kind":"%s","node":"%s","data":"%s",'
                        .. '"session":"0x%s","age":'):format(lock, kind, node, id, c:session_id())
                        :gsub("%p", "%%%0") .. "%d+%.%d}"
            end
            local want = "^%[" .. row(a, "lock", rows[1].node) .. ",\n "
                         .. row(b, "read", rows[2].node) .. "%]\n$"
            assert.truthy(out:match(want), out)
            -- data is escaped as JSON wants it
            local odd = root .. "/odd"
            assert(c:lock(odd, { data = 'say "hi"\n\1' }):acquire(5))
            rc, out = run({ "locks", "--json", odd })
            assert.are.equal(0, rc)
            assert.truthy(out:find([["data":"say \"hi\"\n\u0001"]], 1, true), out)
            c:close()
        end)
    end)
end)
