-- The client's public surface: a client shows its users only the methods
-- the docs name (docs/client.md, the recipes' constructors in
-- docs/recipes.md); what recipes, waiters and the engine need besides is
-- zkcoord.contract's, not the client's. A method added to the client class
-- without docs fails here: document it, or make it `_name` (the class's
-- own) or a contract function. Runs in the normal suite: no server needed.

local zkcoord = require "zkcoord"
local contract = require "zkcoord.contract"
local proc = require "helpers.proc"

-- Every public method of a client, documented as `client:name(` in the
-- docs below (connect: `zkcoord.connect`, the module's function).
local PUBLIC = {
    "connect", "send", "create", "delete", "exists", "get", "set", "children", "multi",
    "sync", "get_acl", "set_acl", "delete_guaranteed", "remove_watches", "ensure_path",
    "retry", "wait_connected", "state", "on_state", "remove_listener", "dispatch",
    "session_id", "session_password", "session_timeout", "link_silent", "log", "fd",
    "process", "stats", "metrics", "close", "spawn", "run", "waiter",
    -- recipes' constructors (zkcoord/init.lua's RECIPES)
    "lock", "rwlock", "counter", "watch", "election", "semaphore", "barrier",
    "double_barrier", "queue", "line", "work_queue", "persistent_node", "group",
    "partitioner", "multi_lock", "cache", "service_discovery", "lease", "multi_lease",
}
local DOCS = { "docs/client.md", "docs/recipes.md" }


-- The names a client answers that are not its own `_` ones.
local function surface()
    local methods = contract.mt.__index
    local names = {}
    for k in pairs(methods) do
        if type(k) == "string" and not k:find("^_") then
            names[#names + 1] = k
        end
    end
    table.sort(names)
    return names
end


describe("the client's surface", function()
    it("holds only the documented public methods", function()
        local known = {}
        for _, name in ipairs(PUBLIC) do known[name] = true end
        local extra = {}
        for _, name in ipairs(surface()) do
            if not known[name] then extra[#extra + 1] = name end
        end
        assert.are.same({}, extra, "on the client but not in its public list: "
                                   .. table.concat(extra, ", "))
    end)

    it("has every public method, each named in the docs", function()
        local text = {}
        for i, f in ipairs(DOCS) do text[i] = assert(proc.read_file(f)) end
        text = table.concat(text, "\n")
        local methods = contract.mt.__index
        for _, name in ipairs(PUBLIC) do
            assert.is_function(methods[name], "client:" .. name .. " is gone")
            local documented = text:find("client:" .. name .. "(", 1, true)
                or (name == "connect" and text:find("zkcoord.connect", 1, true))
            assert.truthy(documented, "client:" .. name .. " is not in " .. table.concat(DOCS, ", "))
        end
    end)

    it("has no contract function, and zkcoord.contract has them all", function()
        local methods = contract.mt.__index
        for name, v in pairs(require "zkcoord.client.contract") do
            if name ~= "_VERSION" then
                assert.is_nil(rawget(methods, name), "client:" .. name .. " is a contract function")
                assert.are.equal(v, contract[name], "zkcoord.contract." .. name)
            end
        end
        for _, name in ipairs({ "raise", "argerror", "check_path", "check_timeout",
                                "array_length", "mt", "live" }) do
            assert.is_nil(rawget(methods, name), "client." .. name .. " is the contract's")
            assert.is_not_nil(contract[name], "zkcoord.contract." .. name)
        end
        assert.are.equal(contract.check_path, zkcoord.check_path)
    end)
end)
