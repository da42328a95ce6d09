-- chaos.recipes: the catalog a chaos run covers (--recipes). The lock,
-- rwlock and counter are built into contender.lua and the checker's rules;
-- every other recipe has its part of the run in chaos/recipe/<name>.lua
-- (what a contender does with it, what the driver reads from the server)
-- and its checker in chaos/check/<name>.lua.
local _M = {}

_M.ALL = { "lock", "rwlock", "counter", "local_lock", "cohort_lock", "cohort_rwlock", "multi_lock",
           "semaphore", "barrier", "double_barrier", "work_queue", "group", "partitioner",
           "persistent_node", "service_discovery", "lease", "multi_lease", "election" }

local BUILTIN = { lock = true, rwlock = true, counter = true }

local known = {}
for _, name in ipairs(_M.ALL) do known[name] = true end

--- "a,b" (or "all", or nil for all) -> { "a", "b" } in catalog order; raises
--- on an unknown name.
function _M.parse(text)
    if text == nil or text == "all" then
        return { unpack(_M.ALL) }
    end
    local want = {}
    for name in tostring(text):gmatch("[^,%s]+") do
        if not known[name] then
            error("unknown recipe " .. name .. " (known: " .. table.concat(_M.ALL, ",") .. ")", 0)
        end
        want[name] = true
    end
    local out = {}
    for _, name in ipairs(_M.ALL) do
        if want[name] then out[#out + 1] = name end
    end
    assert(#out > 0, "no recipe given")
    return out
end

--- The run's part of a recipe (chaos/recipe/<name>.lua), nil for a built-in one.
function _M.part(name)
    if BUILTIN[name] then
        return nil
    end
    return require("chaos.recipe." .. name)
end

--- The checker of a recipe (chaos/check/<name>.lua), nil for a built-in one.
function _M.checker(name)
    if BUILTIN[name] then
        return nil
    end
    return require("chaos.check." .. name)
end

return _M
