-- What specs need around a real ZooKeeper: one shared standalone server per
-- run (ZK_HOSTS overrides it), a fresh chroot per spec, clients, session
-- expiry, and contender processes.
local proc = require "helpers.proc"
local zkserver = require "helpers.zkserver"
local testing = require "zkcoord.testing"
local zkcoord = require "zkcoord"

local _M = { proc = proc, zkserver = zkserver }

local shared_server
local admin
local clients = setmetatable({}, { __mode = "k" })
local counter = 0

_M.SESSION_TIMEOUT = 2   -- seconds: the server's tickTime 500 allows 1..20 s


--- The shared server (started on first use).
function _M.server()
    if not shared_server then
        local err
        shared_server, err = zkserver.start({ tick_time = 500 })
        assert(shared_server, "could not start ZooKeeper: " .. tostring(err))
    end
    return shared_server
end


function _M.hosts()
    local env = os.getenv("ZK_HOSTS")
    if env and env ~= "" then
        return env
    end
    return _M.server().hosts
end


--- A client of the whole tree (no chroot), shared, for setup and checks.
function _M.admin()
    if not admin or admin:state() == "closed" then
        admin = assert(zkcoord.connect { servers = _M.hosts(), session_timeout = 10 })
    end
    return admin
end


--- A new client; opts are zkcoord.connect's, servers and a short session by default.
function _M.client(opts)
    opts = opts or {}
    local o = { servers = _M.hosts(), session_timeout = _M.SESSION_TIMEOUT }
    for k, v in pairs(opts) do o[k] = v end
    local c, err, detail = zkcoord.connect(o)
    assert(c, "connect failed: " .. tostring(err) .. " " .. tostring(detail))
    clients[c] = true
    return c
end


--- Closes every client made by _M.client that is still open.
function _M.close_clients()
    for c in pairs(clients) do
        c:close()
        clients[c] = nil
    end
end


--- A fresh namespace "/spec-<hex>" for one spec.
function _M.new_root(name)
    counter = counter + 1
    local root = ("/spec-%s%d-%d"):format(name and name .. "-" or "", proc.getpid(), counter)
    local ok, err = _M.admin():create(root)
    assert(ok or err == "nodeexists", "could not create " .. root .. ": " .. tostring(err))
    return root
end


--- Deletes a subtree (children first).
function _M.delete_tree(client, path)
    local names = client:children(path)
    for _, n in ipairs(names or {}) do
        _M.delete_tree(client, (path == "/" and "" or path) .. "/" .. n)
    end
    if path ~= "/" then
        client:delete(path)
    end
end


--- Polls fn() (pumping `client`'s events between tries) until it returns a
--- true value or `timeout` (default 10 s) passes. Returns fn's last result.
function _M.wait_until(fn, timeout, client)
    local deadline = proc.now() + (timeout or 10)
    while true do
        local r = fn()
        if r or proc.now() >= deadline then
            return r
        end
        if client and client:state() ~= "closed" then
            client:dispatch(0.02)
        else
            proc.sleep(0.02)
        end
    end
end


--- Expires `client`'s session on the shared server (zkcoord.testing).
function _M.expire_session(client, timeout)
    return testing.expire_session(client, _M.hosts(), timeout)
end


--- Runs `code` (Lua source) in a separate luajit process with the
--- project's paths; `args` go to it as `...`. Returns pid, or nil, err.
--- Output goes to `log` (default /dev/null).
function _M.spawn_lua(code, args, log)
    local dir = _M.tmpdir()
    counter = counter + 1
    local file = ("%s/script-%d.lua"):format(dir, counter)
    assert(proc.write_file(file, code))
    local argv = { "luajit", file }
    for _, a in ipairs(args or {}) do
        argv[#argv + 1] = tostring(a)
    end
    return proc.spawn(argv, { stdout = log, stderr = log, env = _M.lua_env() })
end


function _M.lua_env()
    local root = os.getenv("PWD") or "."
    return {
        LUA_PATH = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root
                   .. "/spec/?.lua;;",
        LUA_CPATH = root .. "/" .. (os.getenv("ZKCOORD_CPATH") or "lua/?.so") .. ";;",
        ZK_HOSTS = _M.hosts(),
    }
end


--- Resident set size of this process in KiB.
_M.rss_kb = proc.rss_kb


local tmp
function _M.tmpdir()
    if not tmp then
        tmp = assert(proc.mktemp_dir("zkcoord-spec-"))
    end
    return tmp
end


function _M.shutdown()
    _M.close_clients()
    if admin then
        admin:close()
        admin = nil
    end
    if shared_server then
        shared_server:destroy()
        shared_server = nil
    end
    zkserver.destroy_all()
    if tmp then
        proc.rm_rf(tmp)
        tmp = nil
    end
end


return _M
