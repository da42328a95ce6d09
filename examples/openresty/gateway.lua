-- A gateway in front of services that register in ZooKeeper (Curator's
-- ServiceDiscovery, or zkcoord's service_discovery): every worker keeps
-- the instances in memory through watches, and balancer_by_lua picks one
-- per request from there, never waiting. gateway.conf shows the nginx side.
--
--   init_worker_by_lua_block {
--       require("gateway").init_worker { servers = ..., base = "/services",
--                                        services = { "api" } }
--   }
--   upstream api {
--       server 0.0.0.1;   # never used: the balancer sets the peer
--       balancer_by_lua_block { require("gateway").balance("api") }
--   }
local zn = require "zkcoord.ngx"
local balancer = require "ngx.balancer"

local _M = {}

local sd             -- this worker's service_discovery
local providers = {} -- service name -> provider (weights honoured)

-- Makes the views not made yet; those that fail (ZooKeeper unreachable at
-- start) are tried again a second later, for as long as the worker runs.
local function start_views(premature, opts)
    if premature then return end         -- the worker is exiting
    local c, err = zn.client()
    if not c then
        ngx.log(ngx.ERR, "gateway: no ZooKeeper client: ", err, "; again in 1 s")
        ngx.timer.at(1, start_views, opts)
        return
    end
    sd = sd or c:service_discovery(opts.base)
    local missing = false
    for _, name in ipairs(opts.services) do
        if not providers[name] then
            local p, perr = sd:provider(name, { strategy = "weighted" })
            providers[name] = p
            if not p then
                missing = true
                ngx.log(ngx.ERR, "gateway: no view of ", name, ": ", perr, "; again in 1 s")
            end
        end
    end
    if missing then
        ngx.timer.at(1, start_views, opts)
    end
end

-- Starts the worker's session and one view per service, in a timer:
-- init_worker cannot wait, and the views' first load does.
function _M.init_worker(opts)
    zn.init_worker { servers = opts.servers, session_timeout = opts.session_timeout }
    ngx.timer.at(0, start_views, opts)
end

-- balancer_by_lua: one instance per try, from memory. The first try allows
-- one more per other instance (set_more_tries), and a retry after a failed
-- connection (proxy_next_upstream) picks one this request has not tried.
function _M.balance(name)
    local p = providers[name]
    local nodes = sd and sd:nodes(name)
    if not p or not nodes or #nodes == 0 then
        ngx.log(ngx.ERR, "gateway: no instance of ", name)
        return ngx.exit(502)
    end
    local ctx = ngx.ctx
    local tried = ctx.gateway_tried
    if not tried then
        tried = {}
        ctx.gateway_tried = tried
        if #nodes > 1 then
            balancer.set_more_tries(#nodes - 1)
        end
    end
    local inst
    for _ = 1, #nodes do          -- the weighted order may repeat one: skip it
        inst = p:get()
        if inst and not tried[inst.id] then break end
    end
    if not inst then
        return ngx.exit(502)
    end
    tried[inst.id] = true
    local ok, err = balancer.set_current_peer(inst.address, inst.port)
    if not ok then
        ngx.log(ngx.ERR, "gateway: set_current_peer: ", err)
        return ngx.exit(502)
    end
end

-- GET /nodes?name=api: this worker's view (pid, then host:port/weight).
function _M.nodes()
    local out = { tostring(ngx.worker.pid()) }
    local list, err
    if sd then
        list, err = sd:nodes(ngx.var.arg_name or "")
    end
    for _, n in ipairs(list or {}) do
        out[#out + 1] = ("%s:%d/%d"):format(n.host, n.port, n.weight)
    end
    if not list then out[#out + 1] = "error:" .. tostring(err or "starting") end
    ngx.say(table.concat(out, " "))
end

return _M
