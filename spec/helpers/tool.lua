-- helpers.tool: how a tool (tools/) or a benchmark (bench/) starts: the
-- checkout's paths, and the ZooKeeper servers it runs against.
--
--   local root = (arg and arg[0] or ""):match("^(.*)/tools/[^/]*$") or "."
--   package.path = root .. "/spec/?.lua;" .. package.path
--   local tool = require "helpers.tool"
--   tool.paths(root)                        -- tools/, lua/, the core
--   local hosts, server = tool.servers(opts.servers, "fuzz.lua")
local _M = {}

--- Puts the checkout at `root` on the paths: tools/?.lua, lua/?.lua,
--- lua/?/init.lua, and the core ($ZKCOORD_CPATH, relative to root unless
--- absolute, else lua/?.so).
function _M.paths(root)
    local cpath = os.getenv("ZKCOORD_CPATH") or "lua/?.so"
    if cpath:sub(1, 1) ~= "/" then
        cpath = root .. "/" .. cpath
    end
    package.path = root .. "/tools/?.lua;" .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;"
        .. package.path
    package.cpath = cpath .. ";" .. package.cpath
end

--- The servers: `explicit` (a --servers option), else $ZK_HOSTS, else a
--- private standalone server (helpers.zkserver, tick 500 ms, with
--- `zk_opts` added) that the caller destroys at the end. Exits with status
--- 2 and a message prefixed by `name` when that server cannot start.
--- Returns hosts, the private server (or nil).
function _M.servers(explicit, name, zk_opts)
    local hosts = explicit or os.getenv("ZK_HOSTS")
    if hosts and hosts ~= "" then
        return hosts, nil
    end
    local o = { tick_time = 500 }
    for k, v in pairs(zk_opts or {}) do o[k] = v end
    local server, err = require("helpers.zkserver").start(o)
    if not server then
        io.stderr:write(name, ": could not start ZooKeeper: ", tostring(err), "\n")
        os.exit(2)
    end
    return server.hosts, server
end

return _M
