-- zkcoord.cli.services: `zkcoord services BASE [NAME]`: the services
-- registered under BASE (Curator's ServiceDiscovery layout, or Dubbo's
-- with --dubbo), or one service's instances. Not a public API.
local sys = require "zkcoord.cli.sys"
local ex = require "zkcoord.cli.exit"

local fail = ex.fail

local _M = {}

local function age(inst, now)
    local t = inst.registrationTimeUTC
    return t and ("%.1fs"):format(math.max(0, now - t / 1000)) or "-"
end

-- Prints NAME<tab>INSTANCES for each service under base, or for service
-- `name` ID  ADDRESS  PORT  AGE (since its registrationTimeUTC), with
-- "disabled" after a disabled instance.
function _M.print(c, base, name, dubbo)
    if name and (name == "" or name:find("/", 1, true)) then
        ex.usage("services", "zkcoord: services: NAME is one node's name (no '/')")
    end
    local sd = c:service_discovery(base, { format = dubbo and "dubbo" or nil })
    local what = "services " .. base .. (name and " " .. name or "")
    local out = io.stdout
    if not name then
        local names, err, detail = sd:names()
        if not names then fail(what, err, detail) end
        for _, n in ipairs(names) do
            local list = sd:instances(n)
            out:write(n, "\t", list and tostring(#list) or "?", "\n")
        end
        return ex.OK
    end
    local list, err, detail = sd:instances(name)
    if not list then fail(what, err, detail) end
    local now = sys.walltime()
    for _, inst in ipairs(list) do
        out:write(table.concat({ inst.id, tostring(inst.address or "-"),
                                 inst.port and ("%d"):format(inst.port) or "-", age(inst, now) },
                               "\t"), inst.enabled == false and "\tdisabled" or "", "\n")
    end
    return ex.OK
end

return _M
