-- A private nginx (with the lua module) for specs and benchmarks.
--
--   local nginx = require "helpers.nginx"
--   local n = assert(nginx.start {
--       workers = 2,
--       vars = { ROOT = "/spec-x" },           -- @ROOT@ in the template
--       http = [[
--           init_worker_by_lua_block { ... }
--           server {
--               listen 127.0.0.1:@PORT@ reuseport;
--               location = /ping { content_by_lua_block { ngx.say("pong") } }
--           }
--       ]],
--   })
--   local status, body = n:get("/ping")
--   n:destroy()
--
-- Each instance lives in its own temp prefix (/tmp/zkcoord-ngx-XXXXXX):
-- conf/nginx.conf, logs/error.log, logs/nginx.pid, data/ (world-writable,
-- for files the workers write; @DATA@ in the template) and temp dirs. nginx
-- runs in the foreground (daemon off) under a watchdog shell: if the
-- process that started it dies (an aborted busted run), the watchdog stops
-- nginx (TERM, then KILL of master and workers) and removes the prefix, so
-- no nginx outlives its test run. Workers run as the invoking user (as
-- root, nginx would switch them to nobody, who cannot read a checkout
-- under a private directory such as a `mktemp -d` one).
--
-- The template is the content of the http block. The helper adds the
-- load_module lines, pid, error_log, `env` lines (ZK_HOSTS and opts.env),
-- lua_package_path/cpath pointing at this checkout, and replaces
-- @PORT@, @PREFIX@, @DATA@, @REPO@ and @NAME@ for each opts.vars.NAME.
-- opts.lua_modules = { name = source } are written to <prefix>/lua/name.lua
-- (same substitutions), which comes first in lua_package_path.
local proc = require "helpers.proc"
local ffi = require "ffi"
local bit = require "bit"

local _M = {}
local Nginx = {}
Nginx.__index = Nginx

local NGINX = "nginx"
local MODULES = {
    "/usr/lib/nginx/modules/ndk_http_module.so",
    "/usr/lib/nginx/modules/ngx_http_lua_module.so",
}
local START_TIMEOUT = 10

local live = setmetatable({}, { __mode = "k" })


-- The checkout this file belongs to (absolute): spec/helpers/nginx.lua -> ../..
local function repo_root()
    local src = debug.getinfo(1, "S").source:gsub("^@", "")
    local dir = src:match("^(.*)/spec/helpers/[^/]+$") or "."
    if dir:sub(1, 1) ~= "/" then
        local cwd = os.getenv("PWD")
        if not cwd then
            local p = io.popen("pwd")
            cwd = p:read("*l")
            p:close()
        end
        dir = dir == "." and cwd or cwd .. "/" .. dir
    end
    return (dir:gsub("/%./", "/"):gsub("/%.$", ""))
end
_M.repo = repo_root()


if not pcall(ffi.typeof, "struct zkh_ngx_dirent") then
    -- glibc's struct dirent on 64-bit Linux (x86_64 and aarch64).
    ffi.cdef [[
    struct zkh_ngx_dirent {
        uint64_t d_ino; int64_t d_off; unsigned short d_reclen; unsigned char d_type;
        char d_name[256];
    };
    unsigned int zkh_ngx_getuid(void) __asm__("getuid");
    struct zkh_ngx_passwd { char *pw_name; };   /* first field only: read, never allocated */
    struct zkh_ngx_passwd *zkh_ngx_getpwuid(unsigned int) __asm__("getpwuid");
    void *zkh_ngx_opendir(const char *) __asm__("opendir");
    struct zkh_ngx_dirent *zkh_ngx_readdir(void *) __asm__("readdir");
    int zkh_ngx_closedir(void *) __asm__("closedir");
    ]]
end


local function getuid()
    return ffi.C.zkh_ngx_getuid()
end


-- Pids of every process (a /proc scan: no `ps`, which hangs under an
-- LD_PRELOADed ASan runtime).
local function all_pids()
    local out = {}
    local dir = ffi.C.zkh_ngx_opendir("/proc")
    if dir == nil then
        return out
    end
    while true do
        local e = ffi.C.zkh_ngx_readdir(dir)
        if e == nil then break end
        local pid = tonumber(ffi.string(e.d_name):match("^%d+$"))
        if pid then out[#out + 1] = pid end
    end
    ffi.C.zkh_ngx_closedir(dir)
    return out
end


-- Watchdog: starts nginx (argv after the first 2 args) in the background,
-- writes its pid to $2, and while it runs checks that the owner ($1) lives.
-- If the owner is gone: TERM nginx (fast shutdown of master and workers),
-- KILL whatever is left after 5 s, remove the prefix ($ZKH_NGX_CLEAN).
local WATCHDOG = [[
o=$1; f=$2; shift 2
d=$ZKH_NGX_CLEAN; unset ZKH_NGX_CLEAN
"$@" &
p=$!
echo "$p" >"$f"
alive() {
    l=
    read -r l <"/proc/$1/stat" 2>/dev/null || return 1
    case $l in *") Z "*|*") X "*) return 1 ;; esac
}
while alive "$p"; do
    if ! alive "$o"; then
        ws=
        for s in /proc/[0-9]*/stat; do
            l=
            read -r l <"$s" 2>/dev/null || continue
            set -- ${l##*) }
            [ "$2" = "$p" ] && ws="$ws ${s#/proc/}" && ws=${ws%/stat}
        done
        kill -TERM "$p" 2>/dev/null
        i=0
        while alive "$p" && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        for w in $ws; do kill -KILL "$w" 2>/dev/null; done
        kill -KILL "$p" 2>/dev/null
        wait "$p"
        case "$d" in /tmp/zkcoord-ngx-?*) rm -rf -- "$d" ;; esac
        exit 0
    fi
    sleep 0.3
done
wait "$p"
]]


local function substitute(text, vars)
    return (text:gsub("@([%u_][%u%d_]*)@", function(name)
        local v = vars[name]
        if v == nil then
            error("nginx template: no value for @" .. name .. "@", 0)
        end
        return tostring(v)
    end))
end


local function build_config(self, opts)
    local repo = _M.repo
    local cpath = os.getenv("ZKCOORD_CPATH") or "lua/?.so"
    if cpath:sub(1, 1) ~= "/" then
        cpath = repo .. "/" .. cpath
    end
    local vars = { PORT = self.port, PREFIX = self.prefix, DATA = self.data, REPO = repo }
    for k, v in pairs(opts.vars or {}) do
        vars[k] = v
    end
    local main = {}
    for _, m in ipairs(MODULES) do
        main[#main + 1] = "load_module " .. m .. ";"
    end
    local envs = { ZK_HOSTS = true }
    for k in pairs(opts.env or {}) do
        envs[k] = true
    end
    local env_names = {}
    for k in pairs(envs) do env_names[#env_names + 1] = k end
    table.sort(env_names)
    for _, k in ipairs(env_names) do
        main[#main + 1] = "env " .. k .. ";"
    end
    local user = opts.user
    if user == nil and getuid() == 0 then
        -- Root's workers would default to nobody; keep them ours.
        local pw = ffi.C.zkh_ngx_getpwuid(getuid())
        user = pw ~= nil and ffi.string(pw.pw_name) or "root"
    end
    local function add(l)
        if l then main[#main + 1] = l end
    end
    add("daemon off;")
    add("master_process on;")
    add("worker_processes " .. (opts.workers or 2) .. ";")
    add(user and ("user " .. user .. ";"))
    add("pid " .. self.prefix .. "/logs/nginx.pid;")
    add("error_log " .. self.error_log_path .. " " .. (opts.log_level or "notice") .. ";")
    add(opts.main and substitute(opts.main, vars))
    add("events { worker_connections " .. (opts.worker_connections or 2048) .. "; "
        .. (opts.events or "") .. "}")
    local t = self.prefix .. "/tmp/"
    local http = {
        "http {",
        "    access_log " .. (opts.access_log and self.prefix .. "/logs/access.log" or "off") .. ";",
        "    client_body_temp_path " .. t .. "body;",
        "    proxy_temp_path " .. t .. "proxy;",
        "    fastcgi_temp_path " .. t .. "fastcgi;",
        "    uwsgi_temp_path " .. t .. "uwsgi;",
        "    scgi_temp_path " .. t .. "scgi;",
        ('    lua_package_path "%s%s/lua/?.lua;%s/lua/?/init.lua;/usr/share/lua/5.1/?.lua;;";')
            :format(opts.lua_modules and self.prefix .. "/lua/?.lua;" or "", repo, repo),
        ('    lua_package_cpath "%s;;";'):format(cpath),
        substitute(opts.http or "", vars),
        "}",
        "",
    }
    return table.concat(main, "\n") .. "\n" .. table.concat(http, "\n")
end


local function tail(text, n)
    local lines = {}
    for l in (text or ""):gmatch("[^\n]+") do
        lines[#lines + 1] = l
        if #lines > n then
            table.remove(lines, 1)
        end
    end
    return table.concat(lines, "\n")
end


function Nginx:error_log()
    return proc.read_file(self.error_log_path) or ""
end


function Nginx:stderr()
    return proc.read_file(self.stderr_path) or ""
end


-- The first [error]/[crit]/[alert]/[emerg] line of error.log: a failing
-- init_worker is followed by many "loop or previous error loading module"
-- lines that hide it.
function Nginx:first_error()
    for l in self:error_log():gmatch("[^\n]+") do
        if l:find("%[error%]") or l:find("%[crit%]") or l:find("%[alert%]")
                or l:find("%[emerg%]") then
            return l
        end
    end
end


function Nginx:log_tail(n)
    local first = self:first_error()
    return (first and "first error: " .. first .. "\n" or "")
        .. "stderr:\n" .. tail(self:stderr(), n or 10)
        .. "\nerror.log:\n" .. tail(self:error_log(), n or 20)
end


function Nginx:url(path)
    return ("http://127.0.0.1:%d%s"):format(self.port, path or "/")
end


function Nginx:running()
    return self.master ~= nil and proc.alive(self.master)
end


local function read_cmdline(pid)
    local s = proc.read_file("/proc/" .. pid .. "/cmdline")
    return s and s:gsub("%z", " ") or nil
end


local function children_of(ppid)
    local out = {}
    for _, pid in ipairs(all_pids()) do
        local line = proc.read_file("/proc/" .. pid .. "/stat")
        local parent = line and tonumber(line:match("^.*%) %a (%d+)"))
        if parent == ppid then out[#out + 1] = pid end
    end
    return out
end


--- Pids of the master's worker processes. `all`: also the ones shutting
--- down after a reload (default: only live, serving workers).
function Nginx:worker_pids(all)
    if not self.master then
        return {}
    end
    local out = {}
    for _, pid in ipairs(children_of(self.master)) do
        local cmd = read_cmdline(pid) or ""
        if cmd:find("worker process", 1, true) and proc.alive(pid)
                and (all or not cmd:find("shutting down", 1, true)) then
            out[#out + 1] = pid
        end
    end
    table.sort(out)
    return out
end


local function port_open(port)
    local c = proc.tcp_connect("127.0.0.1", port, 0.5)
    if c then
        c:close()
        return true
    end
    return false
end


function Nginx:_wait_started(timeout)
    local deadline = proc.now() + (timeout or START_TIMEOUT)
    while true do
        if not self.master then
            local t = proc.read_file(self.prefix .. "/master.pid")
            self.master = t and tonumber(t:match("%d+"))
        end
        if self.master and not proc.alive(self.master) then
            return nil, "nginx exited during startup\n" .. self:log_tail()
        end
        if not self.master and self.watchdog and not proc.alive(self.watchdog) then
            return nil, "nginx watchdog exited during startup\n" .. self:log_tail()
        end
        if self.master and #self:worker_pids() >= self.workers and port_open(self.port) then
            return true
        end
        if proc.now() >= deadline then
            return nil, "nginx not ready after " .. (timeout or START_TIMEOUT) .. " s\n"
                .. self:log_tail()
        end
        proc.sleep(0.02)
    end
end


local function new_instance(opts)
    local prefix, err = proc.mktemp_dir("zkcoord-ngx-")
    if not prefix then
        return nil, err
    end
    local self = setmetatable({
        prefix = prefix,
        data = prefix .. "/data",
        port = opts.port or proc.free_port(),
        workers = opts.workers or 2,
        conf = prefix .. "/conf/nginx.conf",
        error_log_path = prefix .. "/logs/error.log",
        stderr_path = prefix .. "/stderr.log",
        owner = proc.getpid(),
    }, Nginx)
    for _, d in ipairs({ "conf", "logs", "data", "tmp" }) do
        assert(proc.mkdir_p(prefix .. "/" .. d))
    end
    -- Workers of an opts.user must reach data/ and the lua files.
    os.execute("chmod 755 " .. proc.shquote(prefix) .. " && chmod 1777 "
               .. proc.shquote(self.data) .. " " .. proc.shquote(prefix .. "/tmp"))
    local ok, cerr = pcall(build_config, self, opts)
    if not ok then
        proc.rm_rf(prefix)
        error(cerr, 3)
    end
    self.config_text = cerr
    assert(proc.write_file(self.conf, self.config_text))
    if opts.lua_modules then
        assert(proc.mkdir_p(prefix .. "/lua"))
        for name, src in pairs(opts.lua_modules) do
            assert(name:match("^[%w_]+$"), "lua_modules: bad module name " .. tostring(name))
            local vars = { PORT = self.port, PREFIX = prefix, DATA = self.data, REPO = _M.repo }
            for k, v in pairs(opts.vars or {}) do vars[k] = v end
            assert(proc.write_file(prefix .. "/lua/" .. name .. ".lua", substitute(src, vars)))
        end
        os.execute("chmod -R a+rX " .. proc.shquote(prefix .. "/lua"))
    end
    return self
end


function Nginx:_spawn(opts)
    local env = { ZK_HOSTS = os.getenv("ZK_HOSTS") or "", ZKH_NGX_CLEAN = self.prefix }
    for k, v in pairs(opts.env or {}) do
        env[k] = v
    end
    os.remove(self.prefix .. "/master.pid")
    self.master = nil
    local pid, err = proc.spawn({ "sh", "-c", WATCHDOG, "zkcoord-ngx-watchdog",
                                  tostring(self.owner), self.prefix .. "/master.pid",
                                  opts.nginx or NGINX, "-p", self.prefix .. "/", "-c", self.conf },
                                { stdout = self.stderr_path, stderr = self.stderr_path,
                                  cwd = self.prefix, env = env })
    if not pid then
        return nil, err
    end
    self.watchdog = pid
    live[self] = true
    return true
end


--- The source of `turn_probe`, a module for a worker (lua_modules =
--- { turn_probe = nginx.TURN_PROBE }): cpu_now() is the worker thread's
--- CPU time (CLOCK_THREAD_CPUTIME_ID); take() starts, the first time, a
--- timer that sleeps 1 ms over and over, and returns the most CPU the
--- worker spent during one of those sleeps since the last take() (the
--- longest it worked without its event loop turning; wall-clock times
--- also hold the wait for a core).
_M.TURN_PROBE = [==[
local ffi = require "ffi"
local _M = {}

pcall(ffi.cdef, [[
    struct turn_probe_ts { long sec, nsec; };
    int clock_gettime(int, struct turn_probe_ts *);
]])
local ts = ffi.new("struct turn_probe_ts")

function _M.cpu_now()
    ffi.C.clock_gettime(3, ts)
    return tonumber(ts.sec) + tonumber(ts.nsec) * 1e-9
end

local monitoring, most = false, 0

local function monitor()
    while monitoring do
        local t = _M.cpu_now()
        ngx.sleep(0.001)
        local used = _M.cpu_now() - t
        if used > most then most = used end
    end
end

function _M.take()
    if not monitoring then
        monitoring = true
        assert(ngx.timer.at(0, monitor))
    end
    local m = most
    most = 0
    return m
end

return _M
]==]


--- Starts nginx. opts: http (template, required), workers (2), vars, env,
--- main (extra main-context lines), lua_modules, user, log_level ("notice"),
--- worker_connections, events (extra events-block lines), access_log, port,
--- timeout (startup, 10 s).
--- Returns the instance, or nil, err (with the logs) if nginx did not come
--- up (its prefix is removed then, unless opts.keep_failed).
function _M.start(opts)
    opts = opts or {}
    assert(type(opts) == "table", "nginx.start: opts must be a table")
    assert(type(opts.http) == "string", "nginx.start: opts.http (the http block) is required")
    local attempts = opts.port and 1 or 3
    local err
    for attempt = 1, attempts do
        local self
        self, err = new_instance(opts)
        if not self then
            return nil, err
        end
        local ok
        ok, err = self:_spawn(opts)
        if ok then
            ok, err = self:_wait_started(opts.timeout)
            if ok then
                return self
            end
        end
        local clash = (err or ""):find("Address already in use", 1, true)
        if opts.keep_failed and not (clash and attempt < attempts) then
            self:stop()
            return nil, err, self
        end
        self:destroy()
        if not clash then
            break
        end
    end
    return nil, err
end


function Nginx:signal(sig)
    if not self:running() then
        return nil, "not running"
    end
    return proc.kill(self.master, sig)
end


--- HUP: new workers with the (re-read) config; old ones finish gracefully.
--- Waits until `workers` new worker processes run (at most `timeout`).
function Nginx:reload(timeout)
    local old = {}
    for _, pid in ipairs(self:worker_pids(true)) do
        old[pid] = true
    end
    local ok, err = self:signal("HUP")
    if not ok then
        return nil, err
    end
    local deadline = proc.now() + (timeout or 5)
    while true do
        local fresh = 0
        for _, pid in ipairs(self:worker_pids()) do
            if not old[pid] then fresh = fresh + 1 end
        end
        if fresh >= self.workers then
            return true
        end
        if not self:running() then
            return nil, "nginx exited during reload\n" .. self:log_tail()
        end
        if proc.now() >= deadline then
            return nil, "no new workers after reload\n" .. self:log_tail()
        end
        proc.sleep(0.02)
    end
end


local function wait_gone(self, timeout)
    if self.master and not proc.wait_exit(self.master, timeout) then
        return nil, "timeout"
    end
    if self.watchdog then
        proc.wait_exit(self.watchdog, 2)
    end
    return true
end


--- QUIT (graceful shutdown: in-flight requests finish) and wait for exit.
--- Returns true, seconds it took; or nil, "timeout" (nginx still runs).
function Nginx:quit(timeout)
    if not self:running() then
        return true, 0
    end
    local t0 = proc.now()
    proc.kill(self.master, "QUIT")
    local ok, err = wait_gone(self, timeout or 10)
    if not ok then
        return nil, err
    end
    return true, proc.now() - t0
end


--- TERM (fast shutdown), KILL master and workers if that takes > `grace` s.
function Nginx:stop(grace)
    if not self:running() then
        if self.watchdog and proc.alive(self.watchdog) then
            proc.wait_exit(self.watchdog, 2)
        end
        return true
    end
    local workers = self:worker_pids(true)
    proc.kill(self.master, "TERM")
    if not wait_gone(self, grace or 5) then
        for _, pid in ipairs(workers) do
            if proc.alive(pid) then proc.kill(pid, "KILL") end
        end
        proc.kill(self.master, "KILL")
        wait_gone(self, 5)
    end
    return true
end


function Nginx:destroy()
    self:stop()
    if self.watchdog and proc.alive(self.watchdog) then
        proc.kill(self.watchdog, "TERM")
        proc.wait_exit(self.watchdog, 2)
    end
    live[self] = nil
    if self.prefix and os.getenv("ZKCOORD_KEEP_NGINX") ~= "1" then
        proc.rm_rf(self.prefix)
    end
    return true
end


--- Stops every nginx this process started (for exit hooks).
function _M.destroy_all()
    for n in pairs(live) do
        n:destroy()
    end
end


-- HTTP ------------------------------------------------------------------------

local function request_text(path, headers)
    local lines = { "GET " .. path .. " HTTP/1.0", "Host: 127.0.0.1", "Connection: close" }
    for k, v in pairs(headers or {}) do
        lines[#lines + 1] = k .. ": " .. v
    end
    return table.concat(lines, "\r\n") .. "\r\n\r\n"
end


--- Parses a whole HTTP/1.x response: status, body, headers (lowercase names).
local function parse_response(text)
    local head, body = text:match("^(.-)\r\n\r\n(.*)$")
    if not head then
        return nil, "bad response: " .. text:sub(1, 200)
    end
    local status = tonumber(head:match("^HTTP/%d%.%d (%d%d%d)"))
    if not status then
        return nil, "bad status line: " .. head:sub(1, 200)
    end
    local headers = {}
    for k, v in head:gmatch("\r\n([^:\r\n]+):%s*([^\r\n]*)") do
        headers[k:lower()] = v
    end
    return status, body, headers
end
_M.parse_response = parse_response


--- One GET over a fresh connection: status, body, headers; or nil, err.
function Nginx:get(path, timeout, headers)
    timeout = timeout or 10
    local deadline = proc.now() + timeout
    local conn, err = proc.tcp_connect("127.0.0.1", self.port, timeout)
    if not conn then
        return nil, err
    end
    local ok, serr = conn:send(request_text(path, headers), math.max(0, deadline - proc.now()))
    if not ok then
        conn:close()
        return nil, serr
    end
    local text, rerr = conn:recv_all(math.max(0, deadline - proc.now()))
    conn:close()
    if not text then
        return nil, rerr
    end
    return parse_response(text)
end


-- Concurrent requests: a batch sends all its requests at once (each on its
-- own connection) and collects the responses later, so the caller can do
-- other things (measure /ping) while they are in flight.

local sys = proc.sys
local C, S = sys.C, sys.S

local Batch = {}
Batch.__index = Batch


--- Sends GET `paths[i]` on one connection each (all connected and sent
--- before it returns). Returns a batch; results come with :collect().
function Nginx:fire(paths, timeout)
    local b = setmetatable({ reqs = {}, left = 0, port = self.port }, Batch)
    local deadline = proc.now() + (timeout or 10)
    for i, path in ipairs(paths) do
        local r = { path = path, chunks = {}, t0 = proc.now() }
        b.reqs[i] = r
        local fd, err = proc.tcp_connect_start("127.0.0.1", self.port)
        if not fd then
            r.err = err
        else
            r.fd = fd
            r.out = request_text(path)
            b.left = b.left + 1
        end
    end
    -- Finish connects and sends.
    while proc.now() < deadline do
        local waiting = 0
        for _, r in ipairs(b.reqs) do
            if r.fd and r.out then
                local n = C.zkh_send(r.fd, r.out, #r.out, bit.bor(S.MSG_NOSIGNAL, S.MSG_DONTWAIT))
                if n == #r.out then
                    r.out = nil
                elseif n > 0 then
                    r.out = r.out:sub(tonumber(n) + 1)
                    waiting = waiting + 1
                else
                    local e = ffi.errno()
                    if e == S.EAGAIN or e == S.EINTR or e == 107 --[[ENOTCONN]] then
                        waiting = waiting + 1
                    else
                        b:_fail(r, "send: " .. sys.errstr(e))
                    end
                end
            end
        end
        if waiting == 0 then
            return b
        end
        proc.sleep(0.001)
    end
    for _, r in ipairs(b.reqs) do
        if r.fd and r.out then
            b:_fail(r, "timeout sending")
        end
    end
    return b
end


function Batch:_fail(r, err)
    if r.fd then
        C.zkh_close(r.fd)
        r.fd = nil
        self.left = self.left - 1
    end
    r.err = r.err or err
    r.t1 = proc.now()
end


local RECV = 65536
local rbuf = ffi.new("uint8_t[?]", RECV)


function Batch:_finish(r)
    C.zkh_close(r.fd)
    r.fd = nil
    self.left = self.left - 1
    r.t1 = proc.now()
    local status, body, headers = parse_response(table.concat(r.chunks))
    r.chunks = nil
    if status then
        r.status, r.body, r.headers = status, body, headers
    else
        r.err = body
    end
end


--- Reads what has arrived, waiting at most `timeout` seconds for something.
--- Returns the number of requests still in flight.
function Batch:poll(timeout)
    if self.left == 0 then
        return 0
    end
    local n, map = 0, {}
    local pfds = ffi.new("struct zkh_pollfd[?]", self.left)
    for _, r in ipairs(self.reqs) do
        if r.fd then
            pfds[n].fd, pfds[n].events, pfds[n].revents = r.fd, S.POLLIN, 0
            n = n + 1
            map[n] = r
        end
    end
    local rc = C.zkh_poll(pfds, n, math.max(0, math.floor((timeout or 0) * 1000)))
    if rc <= 0 then
        return self.left
    end
    for i = 0, n - 1 do
        local r = map[i + 1]
        if pfds[i].revents ~= 0 then
            while r.fd do
                local got = C.zkh_recv(r.fd, rbuf, RECV, S.MSG_DONTWAIT)
                if got > 0 then
                    r.chunks[#r.chunks + 1] = ffi.string(rbuf, got)
                elseif got == 0 then
                    self:_finish(r)
                else
                    local e = ffi.errno()
                    if e ~= S.EAGAIN and e ~= S.EINTR then
                        self:_fail(r, "recv: " .. sys.errstr(e))
                    end
                    break
                end
            end
        end
    end
    return self.left
end


--- Waits (at most `timeout` s) for every response. Returns the requests:
--- { path, status, body, headers, err, t0, t1 } (err "timeout" if none came).
function Batch:collect(timeout)
    local deadline = proc.now() + (timeout or 30)
    while self.left > 0 do
        local left = deadline - proc.now()
        if left <= 0 then
            break
        end
        self:poll(math.min(left, 0.1))
    end
    for _, r in ipairs(self.reqs) do
        if r.fd then
            self:_fail(r, "timeout")
        end
    end
    return self.reqs
end


--- Closes every connection still open (the server sees a client abort).
function Batch:abort()
    for _, r in ipairs(self.reqs) do
        if r.fd then
            self:_fail(r, "aborted")
        end
    end
end


function Batch:in_flight()
    return self.left
end


-- Statistics --------------------------------------------------------------------

--- Percentile `p` (0..100) of a list of numbers (nearest rank).
function _M.percentile(list, p)
    local s = {}
    for i, v in ipairs(list) do s[i] = v end
    table.sort(s)
    if #s == 0 then
        return nil
    end
    local k = math.max(1, math.min(#s, math.ceil(p / 100 * #s)))
    return s[k]
end


local clk_tck
--- The length of a CPU tick (cpu_ticks' unit) is 1 / clk_tck() seconds.
function _M.clk_tck()
    clk_tck = clk_tck or tonumber(proc.output("getconf CLK_TCK")) or 100
    return clk_tck
end


--- CPU ticks (utime + stime) a process has used so far, from /proc/<pid>/stat.
function _M.cpu_ticks(pid)
    local line = proc.read_file("/proc/" .. pid .. "/stat")
    if not line then
        return nil
    end
    local rest = line:match("^.*%) (.*)$")
    local f = {}
    for w in rest:gmatch("%S+") do f[#f + 1] = w end
    -- rest starts at field 3 (state): utime is field 14, stime 15.
    return tonumber(f[12]) + tonumber(f[13])
end


--- Voluntary + involuntary context switches of a process.
function _M.ctx_switches(pid)
    local text = proc.read_file("/proc/" .. pid .. "/status") or ""
    return (tonumber(text:match("voluntary_ctxt_switches:%s*(%d+)")) or 0)
        + (tonumber(text:match("nonvoluntary_ctxt_switches:%s*(%d+)")) or 0)
end


return _M
