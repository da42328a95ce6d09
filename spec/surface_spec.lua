-- The client's public surface: a client shows its users only the methods
-- the docs name (docs/client.md, the recipes' constructors in
-- docs/recipes.md); what recipes, waiters and the engine need besides is
-- zkcoord.contract's, not the client's. A method added to the client class
-- without docs fails here: document it, or make it `_name` (the class's
-- own) or a contract function. And the module budget: no Lua module over
-- 450 lines. Runs in the normal suite: no server needed.

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
-- Deprecated methods: on the client for this release, named in
-- docs/client.md's deprecated list, each saying so once when called.
local DEPRECATED = { "current_state", "is_closed", "request_timeout" }


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
    it("keeps the deprecated methods for one release, each warning once", function()
        local zk = require "helpers.zk"
        local text = assert(proc.read_file("docs/client.md"))
        local logged = {}
        local c = zk.client({ logger = function(level, msg)
            if level == "warn" then logged[#logged + 1] = msg end
        end })
        finally(function() c:close() end)
        require("zkcoord.util.deprecated").deprecated_reset()
        assert.is_false(c:is_closed())
        assert.are.equal(contract.current_state(c), c:current_state())
        assert.are.equal(contract.request_timeout(c), c:request_timeout())
        assert.is_false(c:is_closed())
        for _, name in ipairs(DEPRECATED) do
            assert.truthy(text:find("client:" .. name .. "()", 1, true),
                          name .. " is not in docs/client.md's deprecated list")
            local n = 0
            for _, m in ipairs(logged) do
                if m:find("client:" .. name .. "() is deprecated", 1, true) then n = n + 1 end
            end
            assert.are.equal(1, n, name)
        end
    end)

    it("holds only the documented public methods", function()
        local known = {}
        for _, name in ipairs(PUBLIC) do known[name] = true end
        for _, name in ipairs(DEPRECATED) do known[name] = true end
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
        local deprecated = {}
        for _, name in ipairs(DEPRECATED) do deprecated[name] = true end
        for name, v in pairs(require "zkcoord.client.contract") do
            if name ~= "_VERSION" then
                -- a deprecated method is not the contract's function: it warns, then calls it
                assert.is_true(rawget(methods, name) == nil
                               or (deprecated[name] and rawget(methods, name) ~= v),
                               "client:" .. name .. " is a contract function")
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

    it("a contract function called on something else than a client raises at the caller", function()
        local ok, err = pcall(contract.pump, {})
        assert.is_false(ok)
        assert.matches("^[^:]*surface_spec%.lua:%d+: bad argument #1 to 'contract%.pump' "
                       .. "%(zkcoord client expected, got table%)$", err)
        ok, err = pcall(function() return contract.current_state("c") end)
        assert.is_false(ok)
        assert.matches("surface_spec%.lua:%d+: bad argument #1 to 'contract%.current_state' "
                       .. "%(zkcoord client expected, got string%)$", err)
    end)
end)


describe("the module budget", function()
    it("no Lua module is over 450 lines (issue 29)", function()
        local p = assert(io.popen("find lua -name '*.lua' | sort"))
        local over, n = {}, 0
        for f in p:lines() do
            n = n + 1
            local lines = 0
            for _ in io.lines(f) do lines = lines + 1 end
            if lines > 450 then
                over[#over + 1] = ("%s (%d lines)"):format(f, lines)
            end
        end
        p:close()
        assert.is_true(n > 50)
        assert.are.same({}, over, "over 450 lines: " .. table.concat(over, ", "))
    end)
end)
