--- zkcoord.discovery.provider: picks one instance of a service (Curator's
--- ServiceProvider and its ProviderStrategy); made by sd:provider(name, opts).
--
-- Strategies: "round_robin" (Curator's RoundRobinStrategy: the next one
-- in id order), "random" (RandomStrategy), "sticky" (StickyStrategy over
-- round robin: the same instance while it is listed), "weighted" (nginx's
-- smooth weighted round robin on each instance's weight). They pick among
-- the enabled instances of the service's view, as it is at the call.
local util = require "zkcoord.util"

local ipairs, setmetatable, random = ipairs, setmetatable, math.random

local _M = {}
local mt = { __index = _M }
local check_self = util.self_checker(mt, "service provider", "p")

_M.STRATEGIES = { round_robin = true, random = true, sticky = true, weighted = true }

--- A provider over `list()` (enabled instances, sorted by id) and
--- `weight(inst)`.
function _M.new(list, weight, strategy)
    return setmetatable({
        list = list,
        weight = weight,
        strategy = strategy,
        next_index = 0,        -- round robin
        stuck = nil,           -- sticky: the id we keep
        current = {},          -- weighted: id -> current weight
        current_of = nil,      -- weighted: the list those are for
    }, mt)
end

local function round_robin(self, list)
    local i = self.next_index % #list + 1
    self.next_index = i
    return list[i]
end

local function sticky(self, list)
    for _, inst in ipairs(list) do
        if inst.id == self.stuck then
            return inst
        end
    end
    local inst = round_robin(self, list)
    self.stuck = inst.id
    return inst
end

-- nginx's ngx_http_upstream_get_peer: each gets its weight added, the
-- highest goes first and pays the total back. The current weights are
-- kept per id; a new list (the view changed) drops those of ids gone.
local function weighted(self, list)
    local current = self.current
    if self.current_of ~= list then
        local kept = {}
        for _, inst in ipairs(list) do
            kept[inst.id] = current[inst.id] or 0
        end
        current, self.current, self.current_of = kept, kept, list
    end
    local total, best, best_c = 0, nil, nil
    for _, inst in ipairs(list) do
        local w = self.weight(inst)
        local c = current[inst.id] + w
        current[inst.id] = c
        total = total + w
        if w > 0 and (not best or c > best_c) then
            best, best_c = inst, c
        end
    end
    if best then
        current[best.id] = best_c - total
    end
    return best
end

--- One instance, or nil, "nonode" when the service has none (enabled).
---@return table|nil instance, string? err "nonode"
function _M:get()
    check_self(self, "get")
    local list = self.list()
    if #list == 0 then
        return nil, "nonode"
    end
    local s = self.strategy
    local inst
    if s == "round_robin" then
        inst = round_robin(self, list)
    elseif s == "random" then
        inst = list[random(#list)]
    elseif s == "sticky" then
        inst = sticky(self, list)
    else
        inst = weighted(self, list)
    end
    if not inst then
        return nil, "nonode"       -- weighted: every weight 0
    end
    return inst
end

_M.mt = mt
return _M
