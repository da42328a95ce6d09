-- zkcoord.testing.proxy: a TCP proxy that cuts, black-holes, refuses or
-- delays a client's connections to ZooKeeper (zkcoord.testing.proxy() is
-- the documented face). This module starts and drives, on any Lua, the
-- proxy process (zkcoord.testing.proxy_process, on luajit: its commands,
-- written to a control file, are described there).

-- The proxy process's script, beside this file.
local function process_file()
    return (debug.getinfo(1, "S").source:match("^@(.*)$"):gsub("proxy%.lua$", "proxy_process.lua"))
end

-- Processes through the core, on any Lua.
local proc = require("zkcoord.testing.proc")

local _M = {}

local ACK_TIMEOUT = 2
local START_TIMEOUT = 5

-------------------------------------------------------------------------------
-- The module: start and drive a proxy process
-------------------------------------------------------------------------------

local Proxy = {}
Proxy.__index = Proxy


local function trim(s)
    return (s or ""):match("^%s*(.-)%s*$")
end


local function wait_ack(self, cmd, timeout)
    local deadline = proc.now() + timeout
    while true do
        local ack = proc.read_file(self.control .. ".ack")
        if ack then
            ack = trim(ack)
            if ack == cmd then
                return true
            elseif ack:match("^error") then
                return nil, ack
            end
        end
        if not proc.alive(self.pid) then
            return nil, "tcpproxy exited: " .. trim(proc.read_file(self.log))
        end
        if proc.now() >= deadline then
            return nil, "tcpproxy did not acknowledge '" .. cmd .. "' within "
                .. timeout .. " s"
        end
        proc.sleep(0.005)
    end
end


-- Starts a proxy to target_host:target_port on a free 127.0.0.1 port.
-- opts.luajit: the interpreter (default $LUAJIT or "luajit"). opts.after
-- (seconds, with opts.port, e.g. proc.free_port()): the proxy starts
-- listening on that port only then, and start returns at once (a server
-- that comes up while a client is connecting; until then it is refused).
function _M.start(target_host, target_port, opts)
    assert(type(target_host) == "string", "target_host must be a string")
    assert(type(target_port) == "number", "target_port must be a number")
    opts = opts or {}
    local dir, err = proc.mktemp_dir("zkcoord-proxy-")
    if not dir then
        return nil, err
    end
    local self = setmetatable({
        dir = dir,
        control = dir .. "/control",
        log = dir .. "/proxy.log",
        target_host = target_host,
        target_port = target_port,
    }, Proxy)
    local ok
    ok, err = proc.write_file_atomic(self.control, "pass\n")
    if not ok then
        proc.rm_rf(dir)
        return nil, err
    end
    local luajit = opts.luajit or os.getenv("LUAJIT") or "luajit"
    local pid
    local argv = { luajit, process_file(), tostring(opts.port or 0), target_host,
        tostring(target_port), self.control, tostring(proc.getpid()) }
    if opts.after then
        assert(type(opts.after) == "number" and opts.port, "start: after needs a number and port")
        table.insert(argv, 1, "sh")
        table.insert(argv, 2, "-c")
        table.insert(argv, 3, 'sleep "$0" && exec "$@"')
        table.insert(argv, 4, tostring(opts.after))
    end
    -- our path: the proxy process finds zkcoord.testing's modules there
    pid, err = proc.spawn(argv, { stdout = self.log, stderr = self.log,
                                  env = { LUA_PATH = package.path } })
    if not pid then
        proc.rm_rf(dir)
        return nil, err
    end
    self.pid = pid
    if opts.after then
        self.port, self.hosts, self.state = opts.port, "127.0.0.1:" .. opts.port, "pass"
        return self
    end
    ok, err = wait_ack(self, "pass", START_TIMEOUT)
    local port = tonumber(proc.read_file(self.control .. ".port") or "")
    if not ok or not port then
        self:stop()
        return nil, err or "tcpproxy wrote no port"
    end
    self.port = port
    self.hosts = "127.0.0.1:" .. port
    self.state = "pass"
    return self
end


-- Sends a command and waits (2 s) until the proxy has applied it.
function Proxy:set(cmd)
    assert(type(cmd) == "string" and not cmd:find("[\r\n]"),
        "set: cmd must be a one-line string")
    cmd = trim(cmd)
    if not self.pid then
        return nil, "tcpproxy stopped"
    end
    -- Drop the old ack first: the same command twice must be seen twice.
    os.remove(self.control .. ".ack")
    local ok, err = proc.write_file_atomic(self.control, cmd .. "\n")
    if not ok then
        return nil, err
    end
    ok, err = wait_ack(self, cmd, ACK_TIMEOUT)
    if not ok then
        return nil, err
    end
    if cmd ~= "cut" then
        self.state = cmd
    end
    return true
end


function Proxy:pass()
    return self:set("pass")
end


function Proxy:cut()
    return self:set("cut")
end


function Proxy:blackhole()
    return self:set("blackhole")
end


-- Requests reach the server, replies are dropped (see "dropreplies"),
-- after `n` more chunks from the server (default 0).
function Proxy:drop_replies(n)
    assert(n == nil or type(n) == "number" and n >= 0 and n % 1 == 0,
        "drop_replies: n must be nil or an integer >= 0")
    return self:set(n and "dropreplies " .. n or "dropreplies")
end


function Proxy:hang()
    return self:set("hang")
end


function Proxy:refuse()
    return self:set("refuse")
end


-- Answers each new connection with `text` and closes it (mode "reply").
function Proxy:reply(text)
    assert(type(text) == "string" and text ~= "", "reply: text must be a non-empty string")
    return self:set("reply " .. text:gsub("[\\\r\n]", { ["\\"] = "\\\\", ["\r"] = "\\r",
                                                          ["\n"] = "\\n" }))
end


function Proxy:delay(seconds)
    assert(type(seconds) == "number" and seconds >= 0,
        "delay: seconds must be a number >= 0")
    return self:set("delay " .. math.floor(seconds * 1000 + 0.5))
end


function Proxy:stop()
    if self.pid then
        if proc.alive(self.pid) then
            os.remove(self.control .. ".ack")
            proc.write_file_atomic(self.control, "quit\n")
            if not proc.wait_exit(self.pid, 2) then
                proc.kill(self.pid, "KILL")
                proc.wait_exit(self.pid, 2)
            end
        end
        self.pid = nil
    end
    if self.dir then
        proc.rm_rf(self.dir)
        self.dir = nil
    end
    return true
end

return _M
