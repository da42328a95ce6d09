--- zkcoord.cohort.registry: the cohort of one client's seats on one line
--- (client, driver, path), and its generations (internal part of
--- zkcoord.cohort; zkcoord.cohort.seat's header tells what they are).
local setmetatable = setmetatable

local _M = {}

-- client -> driver -> path -> cohort. Weak: a closed, dropped client goes.
local registry = setmetatable({}, { __mode = "k" })


--- The cohort of `client`'s seats on the line of `d` under `path`, made
--- (with no generation) if there is none, under capacity policy `policy`;
--- `kind` (zkcoord.cohort.seat) serves its generations.
function _M.of(client, path, d, policy, kind)
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
        c = { client = client, path = path, driver = d, policy = policy, kind = kind,
              cur = nil,                          -- the generation arrivals go to
              waiting = {}, head = 1, tail = 0,   -- the queue: entries { h =, ev =, c = }
              home = by_path }                    -- to leave the registry
        by_path[path] = c
    end
    return c
end


--- Cohort `c` has no generation arrivals go to: it leaves the registry
--- (its queue is empty then).
function _M.forget(c)
    if c.cur == nil and c.home[c.path] == c then
        c.home[c.path] = nil
    end
end


--- A new generation of cohort `c`, the one arrivals go to from now on: its
--- node is to be entered (zkcoord.cohort.node sets rec when a seat joins
--- the line for it, and remote).
function _M.new_gen(c)
    local g = { c = c, kind = c.kind, rec = nil, state = "entering", holds = {}, holders = 0,
                n = 0, since = 0, remote = true }
    c.cur = g
    return g
end


return _M
