-- zkcoord.testing.ensemble: a ZooKeeper ensemble for tests, servers of
-- zkcoord.testing.server started in parallel on free 127.0.0.1 ports
-- (zkcoord.testing.server.start_ensemble starts one).
local proc = require "zkcoord.testing.proc"
local server = require "zkcoord.testing.server"
local jvm = require "zkcoord.testing.jvm"

local _M = {}

local Ensemble = {}
Ensemble.__index = Ensemble

local ENSEMBLE_TIMEOUT = 60

local new_server, write_config = server.new, jvm.write_config
-- Everything started by this process and not destroyed yet (server.live).
local live = server.live


function Ensemble:leader()
    for i, s in ipairs(self.servers) do
        if s:running() and s:mode(0.5) == "leader" then
            return i
        end
    end
    return nil
end


-- Modes of all servers ({ "follower", "leader", false, ... }).
function Ensemble:modes()
    local modes = {}
    for i, s in ipairs(self.servers) do
        modes[i] = s:running() and s:mode(0.5) or false
    end
    return modes
end


-- Waits until every running server serves and exactly one is the leader.
function Ensemble:wait_ready(timeout)
    timeout = timeout or ENSEMBLE_TIMEOUT
    local deadline = proc.now() + timeout
    local modes
    while true do
        local leaders, ready, running = 0, 0, 0
        modes = {}
        for i, s in ipairs(self.servers) do
            if s.pid then
                if not s:running() then
                    return nil, "server " .. i .. " exited; log tail:\n"
                        .. s:log_tail()
                end
                running = running + 1
                local m = s:ready(0.5) and s:mode(0.5)
                modes[i] = tostring(m)
                if m then
                    ready = ready + 1
                    if m == "leader" then
                        leaders = leaders + 1
                    end
                end
            else
                modes[i] = "stopped"
            end
        end
        if running > 0 and ready == running and leaders == 1 then
            return true
        end
        if proc.now() >= deadline then
            local tails = {}
            for i, s in ipairs(self.servers) do
                tails[#tails + 1] = "server " .. i .. ":\n" .. s:log_tail(8)
            end
            return nil, "ensemble not ready after " .. timeout .. " s (modes: "
                .. table.concat(modes, ",") .. ")\n" .. table.concat(tails, "\n")
        end
        proc.sleep(0.1)
    end
end


function Ensemble:destroy()
    -- TERM everyone first so they shut down in parallel.
    for _, s in ipairs(self.servers) do
        if s:running() then
            proc.kill(s.pid, "CONT")
            proc.kill(s.pid, "TERM")
        end
    end
    local ok, err = true, nil
    for _, s in ipairs(self.servers) do
        local sok, serr = s:stop(5)
        if not sok then
            ok, err = nil, serr
        end
        live[s] = nil
    end
    live[self] = nil
    if self.dir then
        proc.rm_rf(self.dir)
    end
    return ok, err
end


-- Starts `opts.size` (default 3) servers in parallel and waits (default
-- 60 s) for one leader. Other opts as for start().
function _M.start(opts)
    opts = opts or {}
    assert(type(opts) == "table", "zkserver.start_ensemble: opts must be a table")
    server.check_sasl(opts.sasl)
    local size = opts.size or 3
    assert(type(size) == "number" and size >= 1, "opts.size must be >= 1")
    local root, err = proc.mktemp_dir("zkcoord-zk-")
    if not root then
        return nil, err
    end
    local e = setmetatable({ dir = root, servers = {} }, Ensemble)
    live[e] = true

    -- free_port() never hands out one port twice in a process; the check
    -- below is kept as a cheap guard.
    local ports, taken, server_lines, hosts = {}, {}, {}, {}
    for i = 1, size do
        local p = {}
        for k = 1, 3 do
            local port
            repeat
                port, err = proc.free_port()
                if not port then
                    e:destroy()
                    return nil, err
                end
            until not taken[port]
            taken[port] = true
            p[k] = port
        end
        ports[i] = p
        server_lines[i] = string.format("server.%d=127.0.0.1:%d:%d", i,
            p[2], p[3])
        hosts[i] = "127.0.0.1:" .. p[1]
    end
    e.hosts = table.concat(hosts, ",")

    for i = 1, size do
        local dir = root .. "/s" .. i
        local s
        s, err = new_server(dir, ports[i][1], opts, root)
        if not s then
            e:destroy()
            return nil, err
        end
        s.id = i
        local ok
        ok, err = write_config(s, opts, server_lines)
        if ok then
            ok, err = proc.write_file(dir .. "/data/myid", i .. "\n")
        end
        if not ok then
            e:destroy()
            return nil, err
        end
        e.servers[i] = s
        live[s] = true
    end
    for _, s in ipairs(e.servers) do
        local ok
        ok, err = s:start({ wait = false })
        if not ok then
            e:destroy()
            return nil, err
        end
    end
    local t0 = proc.now()
    local ok
    ok, err = e:wait_ready(opts.timeout or ENSEMBLE_TIMEOUT)
    if not ok then
        e:destroy()
        return nil, err
    end
    e.ready_time = proc.now() - t0
    return e
end

return _M
