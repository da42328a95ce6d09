-- helpers.rng: a seeded generator of its own for the tools (Park-Miller,
-- exact in doubles), so that what a run does depends on its seed only:
-- zkcoord reseeds math.random from /dev/urandom when it loads.
--
--   local r = require("helpers.rng").new(seed, warmup)
--   r:float()  r:int(a, b)  r:range(a, b)  r:pick(list)  r:shuffle(list)
--
-- `warmup` steps are drawn and dropped first (the chaos run uses 5, the
-- fuzzer none: a seed must replay the calls of the runs reported with it).
local floor, tonumber = math.floor, tonumber

local _M = {}

local Rng = {}
Rng.__index = Rng

function _M.new(seed, warmup)
    local s = floor(tonumber(seed) or 1) % 2147483646 + 1
    local r = setmetatable({ s = s }, Rng)
    for _ = 1, warmup or 0 do r:next() end
    return r
end

function Rng:next()
    self.s = (self.s * 48271) % 2147483647
    return self.s
end

--- A float in [0, 1).
function Rng:float()
    return (self:next() - 1) / 2147483646
end

--- An integer in [a, b].
function Rng:int(a, b)
    return a + floor(self:float() * (b - a + 1))
end

--- A float in [a, b).
function Rng:range(a, b)
    return a + self:float() * (b - a)
end

function Rng:pick(list)
    return list[self:int(1, #list)]
end

--- True with probability p.
function Rng:chance(p)
    return self:float() < p
end

function Rng:shuffle(list)
    for i = #list, 2, -1 do
        local j = self:int(1, i)
        list[i], list[j] = list[j], list[i]
    end
    return list
end

return _M
