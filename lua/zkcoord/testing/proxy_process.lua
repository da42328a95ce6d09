-- zkcoord.testing.proxy_process: the process of zkcoord.testing.proxy,
-- a TCP proxy that cuts, black-holes, refuses or delays a client's
-- connections to ZooKeeper. A script on luajit (its sockets are LuaJIT's
-- FFI, zkcoord.testing.socket); zkcoord.testing.proxy starts and drives it:
--
--   luajit .../zkcoord/testing/proxy_process.lua LISTEN_PORT TARGET_HOST TARGET_PORT
--       CONTROL_FILE [OWNER_PID]
--
-- LISTEN_PORT 0 picks a free port, written to CONTROL_FILE.port. The proxy
-- re-reads CONTROL_FILE (one line) whenever it changes (checked every
-- 20 ms) and acknowledges each command by writing its text to
-- CONTROL_FILE.ack ("error: ..." for a bad one):
--
--   pass         forward both ways (the default)
--   cut          close all current connections once (the mode stays)
--   blackhole    keep connections open but drop all bytes both ways; accept
--                new connections and ignore them. Leaving blackhole closes
--                every connection that lost bytes (its stream is broken)
--                and every ignored one.
--   dropreplies [n]  forward client -> server, drop server -> client
--                after n more chunks (default 0): requests reach the
--                server, their replies are lost (new connections too).
--                Leaving it closes every connection that lost bytes.
--   refuse       accept new connections and reset them at once
--   hang         accept new connections and leave them unanswered for
--                good: leaving hang does not close them (ZooKeeper 3.8's
--                standalone server does this to connections made while it
--                starts, ZOOKEEPER-5051); current connections still pass
--   delay <ms>   forward each chunk <ms> milliseconds after it arrived
--   reply <text> answer each new connection's first bytes with <text>
--                (\r, \n and \\ escapes) and close it, as a server that is
--                not ZooKeeper would (an HTTP server: "400 Bad Request")
--   quit         exit
--
-- It also exits when OWNER_PID is gone, so a crashed test run leaves no
-- proxy behind.

local function this_file()
    return debug.getinfo(1, "S").source:match("^@(.*)$")
end

local is_script = arg ~= nil and arg[0] ~= nil and arg[0] == this_file()

-- The proxy process: sockets (FFI) and files, not the core (built for the
-- user's Lua, maybe not luajit; its paths come in LUA_PATH).
local ffi, bit = require("ffi"), require("bit")
local sock = require("zkcoord.testing.socket")
local files = require("zkcoord.testing.files")

-- Is process `pid` there (a zombie is not)? From /proc: the proxy process
-- has no core.
local function owner_alive(pid)
    local st = files.state(pid)
    return st ~= nil and st ~= "Z" and st ~= "X"
end

-------------------------------------------------------------------------------
-- The proxy process
-------------------------------------------------------------------------------

local MAX_QUEUED = 1024 * 1024    -- per direction: stop reading beyond this
local CHUNK = 65536
local CONTROL_EVERY = 0.02
local OWNER_EVERY = 0.5


local function run(listen_port, target_host, target_port, control, owner)
    local C, S, errstr = sock.sys.C, sock.sys.S, sock.sys.errstr

    local lfd, port = sock.tcp_listen("127.0.0.1", listen_port)
    if not lfd then
        io.stderr:write("tcpproxy: ", port, "\n")
        return 1
    end
    assert(files.write_file_atomic(control .. ".port", tostring(port)))

    local mode, delay, reply = "pass", 0, nil
    local replies_left = 0    -- dropreplies: server chunks still forwarded
    local conns = {}
    local buf = ffi.new("uint8_t[?]", CHUNK)
    local linger0 = ffi.new("struct zkh_linger", 1, 0)

    local function reset_close(fd)
        -- SO_LINGER 0: close sends RST, the client sees "connection reset".
        C.zkh_setsockopt(fd, S.SOL_SOCKET, S.SO_LINGER, linger0,
            ffi.sizeof(linger0))
        C.zkh_close(fd)
    end

    local function new_queue()
        return { head = 1, tail = 0, bytes = 0 }
    end

    local function close_conn(c, reset)
        for i = 1, 2 do
            local fd = c.fd[i]
            if fd then
                if reset then
                    reset_close(fd)
                else
                    C.zkh_close(fd)
                end
                c.fd[i] = nil
            end
        end
        c.closed = true
    end

    -- Are bytes read from side i (1 client, 2 server) dropped?
    local function dropping(c, i)
        return mode == "blackhole" or c.ignored
            or mode == "dropreplies" and i == 2 and replies_left <= 0
    end

    local function accept_all(now)
        for _ = 1, 64 do
            local fd = C.zkh_accept4(lfd, nil, nil,
                bit.bor(S.SOCK_NONBLOCK, S.SOCK_CLOEXEC))
            if fd < 0 then
                return
            end
            if mode == "refuse" then
                reset_close(fd)
            elseif mode == "reply" then
                conns[#conns + 1] = { fd = { fd }, reply = reply,
                    q = { new_queue(), new_queue() }, eof = {}, shut = {} }
            elseif mode == "blackhole" or mode == "hang" then
                conns[#conns + 1] = { fd = { fd }, ignored = true, hung = mode == "hang",
                    q = { new_queue(), new_queue() }, eof = {}, shut = {} }
            else
                local ufd = sock.tcp_connect_start(target_host, target_port)
                if not ufd then
                    reset_close(fd)
                else
                    conns[#conns + 1] = { fd = { fd, ufd }, connecting = true,
                        q = { new_queue(), new_queue() }, eof = {}, shut = {},
                        born = now }
                end
            end
        end
    end

    -- Queue q[i] holds bytes to write to side i.
    local function push(q, data, due)
        q.tail = q.tail + 1
        q[q.tail] = { data, due }
        q.bytes = q.bytes + #data
    end

    local function head_due(q)
        local item = q[q.head]
        return item and item[2]
    end

    local function read_side(c, i, now)
        local other = 3 - i
        local n = C.zkh_recv(c.fd[i], buf, CHUNK, S.MSG_DONTWAIT)
        if n > 0 then
            if c.reply then
                -- answer once, then close our side (settle) as soon as it is out
                push(c.q[i], c.reply, now)
                c.reply, c.eof[other] = nil, true
            elseif dropping(c, i) then
                c.tainted = not c.ignored
            elseif c.fd[other] then
                if mode == "dropreplies" and i == 2 then
                    replies_left = replies_left - 1
                end
                push(c.q[other], ffi.string(buf, n), now + delay)
            end
        elseif n == 0 then
            c.eof[i] = true
            if c.ignored then
                close_conn(c)
            end
        else
            local e = ffi.errno()
            if e ~= S.EAGAIN and e ~= S.EINTR then
                close_conn(c, true)
            end
        end
    end

    local function write_side(c, i, now)
        local q = c.q[i]
        while q[q.head] and q[q.head][2] <= now do
            local data = q[q.head][1]
            local n = C.zkh_send(c.fd[i], data, #data,
                bit.bor(S.MSG_NOSIGNAL, S.MSG_DONTWAIT))
            if n < 0 then
                local e = ffi.errno()
                if e ~= S.EAGAIN and e ~= S.EINTR then
                    close_conn(c, true)
                end
                return
            end
            n = tonumber(n)
            q.bytes = q.bytes - n
            if n < #data then
                q[q.head][1] = data:sub(n + 1)
                return
            end
            q[q.head] = nil
            q.head = q.head + 1
        end
    end

    -- Half-close and teardown once a direction is finished.
    local function settle(c)
        if c.closed or c.connecting or mode == "blackhole" then
            return
        end
        for i = 1, 2 do
            local other = 3 - i
            if c.eof[other] and not c.shut[i] and c.q[i].bytes == 0
                    and c.fd[i] then
                C.zkh_shutdown(c.fd[i], S.SHUT_WR)
                c.shut[i] = true
            end
        end
        if c.eof[1] and c.eof[2] and c.q[1].bytes == 0
                and c.q[2].bytes == 0 then
            close_conn(c)
        end
    end

    local function apply(cmd)
        local word, rest = cmd:match("^(%S+)%s*(.-)%s*$")
        local old = mode
        if word == "pass" or word == "blackhole" or word == "refuse" or word == "hang" then
            mode, delay = word, 0
        elseif word == "dropreplies" and (rest == "" or tonumber(rest)) then
            mode, delay, replies_left = word, 0, tonumber(rest) or 0
        elseif word == "reply" and rest ~= "" then
            mode, delay = "reply", 0
            reply = rest:gsub("\\([rn\\])", { r = "\r", n = "\n", ["\\"] = "\\" })
        elseif word == "delay" and tonumber(rest) and tonumber(rest) >= 0 then
            mode, delay = "delay", tonumber(rest) / 1000
        elseif word == "cut" then
            for _, c in ipairs(conns) do
                close_conn(c)
            end
        elseif word == "quit" then
            return "quit"
        else
            return nil, "error: unknown command '" .. tostring(cmd) .. "'"
        end
        if (old == "blackhole" or old == "dropreplies") and mode ~= old then
            for _, c in ipairs(conns) do
                if (c.tainted or c.ignored) and not c.hung then
                    close_conn(c)
                end
            end
        end
        return true
    end

    local ctl_version
    local function check_control()
        local v = sock.file_version(control)
        if not v or v == ctl_version then
            return true
        end
        ctl_version = v
        local text = files.read_file(control) or ""
        local cmd = text:match("^%s*([^\r\n]-)%s*$") or text:match("^%s*([^\r\n]*)")
        local ok, err = apply(cmd)
        files.write_file_atomic(control .. ".ack", ok and cmd or err)
        return ok ~= "quit"
    end

    local function owner_gone()
        return owner ~= nil and not owner_alive(owner)
    end

    local pfds, pcap = nil, 0
    local slots = {}
    local next_ctl, next_owner = 0, 0
    local exit_code = 0

    while true do
        local now = sock.now()
        if now >= next_ctl then
            next_ctl = now + CONTROL_EVERY
            if not check_control() then
                break
            end
        end
        if now >= next_owner then
            next_owner = now + OWNER_EVERY
            if owner_gone() then
                -- Nobody will clean up after us: remove our own files.
                for _, suffix in ipairs({ "", ".ack", ".port" }) do
                    os.remove(control .. suffix)
                end
                local dir = control:match("^(/tmp/zkcoord%-proxy%-[^/]+)/")
                if dir then
                    os.remove(dir .. "/proxy.log")
                    os.remove(dir)
                end
                exit_code = 2
                break
            end
        end

        -- Forget closed connections.
        local live = {}
        for _, c in ipairs(conns) do
            if not c.closed then
                live[#live + 1] = c
            end
        end
        conns = live

        -- Build the poll set.
        local need = 1 + 2 * #conns
        if need > pcap then
            pcap = math.max(need, 2 * pcap, 16)
            pfds = ffi.new("struct zkh_pollfd[?]", pcap)
        end
        pfds[0].fd, pfds[0].events, pfds[0].revents = lfd, S.POLLIN, 0
        local n = 1
        local wake = next_ctl
        for _, c in ipairs(conns) do
            for i = 1, 2 do
                local fd = c.fd[i]
                if fd then
                    local ev = 0
                    if i == 2 and c.connecting then
                        ev = S.POLLOUT
                    else
                        local other = 3 - i
                        if not c.eof[i] and (dropping(c, i)
                                or c.q[other].bytes < MAX_QUEUED) then
                            ev = bit.bor(ev, S.POLLIN)
                        end
                        local due = head_due(c.q[i])
                        if due then
                            if due <= now then
                                ev = bit.bor(ev, S.POLLOUT)
                            elseif due < wake then
                                wake = due
                            end
                        end
                    end
                    pfds[n].fd, pfds[n].events, pfds[n].revents = fd, ev, 0
                    slots[n] = { c, i }
                    n = n + 1
                end
            end
        end

        local ms = math.max(0, math.ceil((wake - now) * 1000))
        local r = C.zkh_poll(pfds, n, ms)
        if r < 0 and ffi.errno() ~= S.EINTR then
            io.stderr:write("tcpproxy: poll: ", errstr(), "\n")
            exit_code = 1
            break
        end
        now = sock.now()

        if r > 0 then
            if bit.band(pfds[0].revents, S.POLLIN) ~= 0 then
                accept_all(now)
            end
            for k = 1, n - 1 do
                local rev = pfds[k].revents
                local c, i = slots[k][1], slots[k][2]
                if rev ~= 0 and not c.closed and c.fd[i] then
                    if i == 2 and c.connecting then
                        local e = sock.sock_error(c.fd[2])
                        if e ~= 0 then
                            close_conn(c, true)  -- upstream refused: reset
                        else
                            c.connecting = false
                        end
                    else
                        if bit.band(rev, bit.bor(S.POLLIN, S.POLLHUP,
                                S.POLLERR)) ~= 0 then
                            read_side(c, i, now)
                        end
                        if bit.band(rev, S.POLLNVAL) ~= 0 then
                            close_conn(c, true)
                        end
                    end
                end
            end
        end

        -- Write whatever is due (also chunks that came due without an event).
        for _, c in ipairs(conns) do
            if not c.closed and not c.connecting then
                for i = 1, 2 do
                    if c.fd[i] and not c.closed then
                        local due = head_due(c.q[i])
                        if due and due <= now then
                            write_side(c, i, now)
                        end
                    end
                end
            end
            settle(c)
        end
    end

    for _, c in ipairs(conns) do
        close_conn(c)
    end
    C.zkh_close(lfd)
    return exit_code
end


if is_script then
    local listen_port, host, port, control, owner =
        tonumber(arg[1]), arg[2], tonumber(arg[3]), arg[4], tonumber(arg[5])
    if not (listen_port and host and port and control) then
        io.stderr:write("usage: luajit proxy_process.lua LISTEN_PORT TARGET_HOST ",
            "TARGET_PORT CONTROL_FILE [OWNER_PID]\n")
        os.exit(64)
    end
    os.exit(run(listen_port, host, port, control, owner))
end


return { run = run }
