--- zkcoord.cohort.registry: the cohort of one client's owners of one line
--- (client, driver, path) (internal part of zkcoord.cohort).
local fifo = require "zkcoord.cohort.fifo"

local setmetatable = setmetatable

local _M = {}

-- client -> driver -> path -> cohort. Weak: a closed, dropped client goes.
local registry = setmetatable({}, { __mode = "k" })


--- The cohort of `client`'s owners of the line of `d` under `path`, made
--- (idle) if there is none; `kind` serves it (zkcoord.cohort.exclusive or
--- .shared).
function _M.of(client, path, d, kind)
    local by_driver = registry[client]
    if not by_driver then
        by_driver = setmetatable({}, { __mode = "k" })
        registry[client] = by_driver
    end
    local by_path = by_driver[d]
    if not by_path then
        by_path = {}
        by_driver[d] = by_path
    end
    local c = by_path[path]
    if not c then
        c = fifo.init {
            client = client, path = path, driver = d, kind = kind,
            state = "idle",   -- "idle" (no node), "entering" (an owner joins), "held"
            rec = nil,        -- the node (zkcoord.cohort.node)
            holder = nil,     -- the hold that has it now
            n = 0, since = 0, remote = true,
            open = nil,       -- shared: the generation readers join
            home = by_path,   -- to leave the registry when idle
        }
        by_path[path] = c
    end
    return c
end


--- Cohort `c` keeps nothing (no node, no waiter): it leaves the registry.
function _M.forget(c)
    if c.home[c.path] == c then
        c.home[c.path] = nil
    end
end


return _M
