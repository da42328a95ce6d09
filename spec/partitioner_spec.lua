-- Group membership and the partitioner against a real server: members and
-- their data, re-joining after expiry; partitions covered exactly once
-- when stable and never owned by two members at once while members join,
-- leave and lose their session.
local zk = require "helpers.zk"
local proc = require "helpers.proc"

-- Pumps every client until cond() holds (or the timeout).
local function settle(clients, cond, timeout)
    local deadline = proc.now() + (timeout or 10)
    while true do
        if cond() then
            return true
        end
        if proc.now() > deadline then
            return false
        end
        for _, cl in ipairs(clients) do
            if cl:state() ~= "closed" then cl:dispatch(0.01) end
        end
    end
end

describe("group #zk", function()
    local root, c, other

    before_each(function()
        root = zk.new_root("group")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("members, data, on_change, leave; Curator GroupMember's layout", function()
        local a = c:group("/g", "a", "data-a")
        local b = other:group("/g", "b", "data-b")
        local seen = {}
        assert(a:on_change(function(m) seen[#seen + 1] = m end))
        assert.same({}, seen[1])
        assert.is_true(a:join(5))
        assert.is_true(b:join(5))
        assert.same({ a = "data-a", b = "data-b" }, a:members())
        assert.truthy(settle({ c, other }, function()
            local last = seen[#seen]
            return last.a and last.b
        end))
        assert.equal("data-b", (c:get("/g/b")))
        assert.equal(other:session_id(), (c:exists("/g/b")).ephemeral_owner)
        assert.truthy(b:set("data-b2"))
        assert.equal("data-b2", b:members().b)
        assert.is_true(b:leave())
        assert.truthy(settle({ c, other }, function()
            return seen[#seen].b == nil
        end))
        assert.same({ a = "data-a" }, a:members())
        a:close()
    end)

    it("a member is back after its session expires", function()
        local b = other:group("/g", "b", "x")
        assert.is_true(b:join(5))
        assert.truthy(zk.expire_session(other))
        assert.truthy(settle({ c, other }, function()
            local st = c:exists("/g/b")
            return st and st.ephemeral_owner == other:session_id()
        end))
        assert.same({ b = "x" }, c:group("/g", "z"):members())
        b:close()
    end)

    it("raises on bad arguments", function()
        assert.has_error(function() c:group("/g", "") end)
        assert.has_error(function() c:group("/g", "a/b") end)
        assert.has_error(function() c:group("/g", 5) end)
        assert.has_error(function() c:group("/g", "a", 5) end)
        assert.has_error(function() c:group("/g", "a"):on_change(5) end)
    end)
end)

describe("partitioner #zk", function()
    local root
    local clients

    before_each(function()
        root = zk.new_root("part")
        clients = {}
        for i = 1, 3 do clients[i] = zk.client { chroot = root, session_timeout = 2 } end
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("covers every partition once when stable, never twice at a moment", function()
        local N = 8
        local views = {}          -- member -> set of partitions it believes it owns
        local overlaps = {}
        local function record(id)
            return function(owned)
                local set = {}
                for _, p in ipairs(owned) do set[p] = true end
                views[id] = set
                for p in pairs(set) do
                    for other_id, other in pairs(views) do
                        if other_id ~= id and other[p] then
                            overlaps[#overlaps + 1] = ("%d: %s and %s"):format(p, id, other_id)
                        end
                    end
                end
            end
        end
        local function covered(ps)
            local count = {}
            for _, p in ipairs(ps) do
                for _, q in ipairs(p:owned()) do count[q] = (count[q] or 0) + 1 end
            end
            for q = 0, N - 1 do
                if count[q] ~= 1 then return false end
            end
            for _, p in ipairs(ps) do     -- and every member has its share
                if #p:owned() == 0 then return false end
            end
            return true
        end
        local parts = {}
        for i, id in ipairs { "a", "b", "c" } do
            parts[i] = assert(clients[i]:partitioner("/p", { partitions = N, id = id }))
            parts[i]:on_change(record(id))
            assert.truthy(settle(clients, function() return covered(parts) end),
                          "not covered with " .. i .. " members")
        end
        -- stable with three: the sorted ids share them round-robin
        assert.same({ 0, 3, 6 }, parts[1]:owned())
        assert.same({ 1, 4, 7 }, parts[2]:owned())
        assert.same({ 2, 5 }, parts[3]:owned())
        -- b leaves
        parts[2]:close()
        table.remove(parts, 2)
        assert.truthy(settle(clients, function() return covered(parts) end), "not covered")
        assert.same({ 0, 2, 4, 6 }, parts[1]:owned())
        -- c's session expires: it drops everything at once, then takes its share again
        local dropped = false
        parts[2]:on_change(function(owned) if #owned == 0 then dropped = true end end)
        assert.truthy(zk.expire_session(clients[3]))
        assert.truthy(settle(clients, function() return dropped and covered(parts) end, 15),
                      "not covered after the expiry")
        assert.same({ 1, 3, 5, 7 }, parts[2]:owned())
        assert.same({}, overlaps)
        for _, p in ipairs(parts) do p:close() end
        clients[1]:sync("/p/owners")
        assert.same({}, clients[1]:children("/p/owners"))
    end)

    it("raises on bad arguments", function()
        local c = clients[1]
        assert.has_error(function() c:partitioner("/p") end)
        assert.has_error(function() c:partitioner("/p", { partitions = 0 }) end)
        assert.has_error(function() c:partitioner("/p", { partitions = 1.5 }) end)
        assert.has_error(function() c:partitioner("/p", { partitions = 2, bogus = 1 }) end)
        assert.has_error(function() c:partitioner("rel", { partitions = 2 }) end)
    end)
end)
