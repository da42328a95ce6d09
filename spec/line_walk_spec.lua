-- A hot line never stalls (issue 30, items 1 and 2), against a real server:
-- a waiter whose entry goes walks down the listing it already has instead
-- of listing the line again (zkcoord.line.walk), and the joins of one
-- client share one listing (zkcoord.line.join). The listings a client
-- sends are counted with client:stats().requests.children.
local zk = require "helpers.zk"
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"
local contract = require "zkcoord.contract"
-- What a waiter keeps below the entry it watches, and the shortest line
-- it walks without a proof (zkcoord.line.walk).
local has_walk, walk = pcall(require, "zkcoord.line.walk")
local KEEP = has_walk and walk.KEEP or 4
local WALK_LINE = has_walk and walk.WALK_LINE or 32

local ONE = line.driver { marker = "lock-", rule = rules.first }

local function sent(client, op)
    return client:stats().requests[op] or 0
end

local function listings(client)
    return sent(client, "children")
end

-- Turns `client`'s coroutines until fn() is true (at most `timeout` s).
local function run_until(client, fn, timeout)
    return zk.wait_until(function()
        client:run(0.02)
        return fn()
    end, timeout or 10)
end

-- Everything `client` sent has been answered.
local function settled(client)
    return function() return client:stats().pending == 0 end
end


describe("line walk #zk", function()
    local root, c, other

    before_each(function()
        root = zk.new_root("linewalk")
        c = zk.client { chroot = root }
        other = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    -- Nodes named as another client's (Curator's protected names), made by
    -- hand with `other`: no position of this process knows them.
    local function foreign(parent, n)
        assert(other:create(parent, nil, { parents = true }))
        local out = {}
        for i = 1, n do
            out[i] = assert(other:create(parent .. "/_c_" .. line.uuid() .. "-lock-", nil,
                                         { ephemeral = true, sequential = true }))
        end
        return out
    end

    it("N coroutines join with a few listings and hand over without a request", function()
        local N = 40
        local holder = other:lock("/l")
        assert.is_true(holder:acquire(5))
        local before = listings(c)
        local served, order = 0, {}
        for i = 1, N do
            c:spawn(function()
                local l = c:lock("/l")
                assert(l:acquire(30))
                served = served + 1
                order[served] = i
                l:release()
            end)
        end
        assert.truthy(run_until(c, function()
            local kids = other:children("/l")
            return kids and #kids == N + 1
        end, 30), "the waiters did not all join")
        assert.truthy(run_until(c, settled(c)))
        local joins = listings(c) - before
        -- Measured: 1 (every coroutine created its node in one turn).
        assert.is_true(joins <= 3, ("%d listings for %d joins"):format(joins, N))
        local reads = sent(c, "get") + sent(c, "exists")
        holder:release()
        assert.is_true(c:run(30))
        assert.equal(N, served)
        assert.equal(0, listings(c) - before - joins, "listings during the handoffs")
        -- each waiter watched its predecessor and its own node while it
        -- waited: a handoff is the release's delete and nothing else
        assert.equal(reads, sent(c, "get") + sent(c, "exists"), "reads during the handoffs")
        for i = 1, N do
            assert.equal(i, order[i], "served out of line")   -- spawned in order, joined in order
        end
    end)

    it("after a reconnection, the waiter behind a lock of this process reads its own node", function()
        -- The proof "our own node's delete would have come first" holds on
        -- one connection only: events set again after a reconnection may
        -- come in any order, so the waiter must ask (before: no request).
        local tcpproxy = require "helpers.tcpproxy"
        local proxy = assert(tcpproxy.start("127.0.0.1", tonumber(zk.hosts():match(":(%d+)"))))
        local pc = zk.client { servers = proxy.hosts, chroot = root, session_timeout = 10 }
        local first, second = pc:lock("/rc"), pc:lock("/rc")
        local released, through = false, false
        pc:spawn(function()
            assert(first:acquire(5))
            while not released do pc:waiter():sleep(0.02) end
            first:release()
        end)
        pc:spawn(function()
            assert(second:acquire(30))
            through = true
            second:release()
        end)
        assert.truthy(run_until(pc, function()
            local kids = other:children("/rc")
            return kids and #kids == 2
        end), "the two did not join")
        assert.truthy(run_until(pc, settled(pc)))
        local conn = contract.connection(pc)
        proxy:cut()
        assert.truthy(run_until(pc, function()
            return contract.connection(pc) > conn and pc:state() == "connected"
        end), "no reconnection")
        local reads = sent(pc, "exists") + sent(pc, "get")
        released = true
        assert.truthy(run_until(pc, function() return through end), "the second never got through")
        assert.is_true(sent(pc, "exists") + sent(pc, "get") > reads,
                       "through on a proof made on the connection before")
        pc:close()
        proxy:stop()
    end)

    it("walks down what it saw when its entry goes, a middle one deleted first", function()
        local n = foreign("/w", 3)    -- a, b, cc below our waiter
        for i = 1, WALK_LINE do  -- a long line (other children count): walking pays
            assert(other:create("/w/other-" .. i))
        end
        local w, done = line.new(c, "/w", ONE), nil
        c:spawn(function() done = { w:enter(20) } end)
        assert.truthy(run_until(c, function() return w:node() ~= nil and settled(c)() end))
        local l0, g0 = listings(c), sent(c, "get")
        assert(other:delete(n[2]))       -- the middle one: ours watches n[3]
        assert(other:delete(n[3]))       -- ours walks down: n[2] gone, n[1] there
        assert.truthy(run_until(c, function()
            return sent(c, "get") >= g0 + 1 and settled(c)()   -- found n[1]: its watch
        end), "the waiter did not walk down")
        assert.is_nil(done, "through while n[1] is still there")
        assert(other:delete(n[1]))
        assert.truthy(run_until(c, function() return done ~= nil end))
        assert.same({ true }, done)
        assert.equal(0, listings(c) - l0, "listed the line on a handoff")
        w:leave()
    end)

    it("lists again when more were below than it kept, and still waits for the right one",
       function()
        local n = foreign("/k", KEEP + 2)
        for i = 1, WALK_LINE do
            assert(other:create("/k/other-" .. i))
        end
        local top = #n
        local w, done = line.new(c, "/k", ONE), nil
        c:spawn(function() done = { w:enter(20) } end)
        assert.truthy(run_until(c, function() return w:node() ~= nil and settled(c)() end))
        local l0 = listings(c)
        assert(other:delete(n[top]))     -- one it kept was not enough to know: a listing
        assert.truthy(run_until(c, function() return listings(c) == l0 + 1 and settled(c)() end))
        assert(other:delete(n[top - 2]))
        assert(other:delete(n[top - 1])) -- what the listing showed is all: a walk
        assert.truthy(run_until(c, settled(c)))
        assert.is_nil(done)
        for i = 1, top - 3 do
            assert(other:delete(n[i]))
        end
        assert.truthy(run_until(c, function() return done ~= nil end))
        assert.same({ true }, done)
        assert.equal(l0 + 1, listings(c))
        w:leave()
    end)

    it("a change of the watched node's data (a revocation) keeps it waiting on that node",
       function()
        local holder = line.new(other, "/r", ONE)
        assert.is_true(holder:enter(5))
        local w, done = line.new(c, "/r", ONE), nil
        c:spawn(function() done = { w:enter(20) } end)
        assert.truthy(run_until(c, function() return w:node() ~= nil and settled(c)() end))
        local l0, g0 = listings(c), sent(c, "get")
        assert(other:set(holder:node(), "__REVOKE__"))
        assert.truthy(run_until(c, function() return sent(c, "get") > g0 and settled(c)() end),
                      "the watch was not set again")
        assert.is_nil(done)
        holder:leave()
        assert.truthy(run_until(c, function() return done ~= nil end))
        assert.same({ true }, done)
        assert.equal(l0, listings(c))
        w:leave()
    end)

    it("readers behind a writer of this process go through without a listing", function()
        local N = 20
        local writer = other:rwlock("/rw")
        assert.is_true(writer:write_lock():acquire(5))
        local before, served = listings(c), 0
        for _ = 1, N do
            c:spawn(function()
                local rw = c:rwlock("/rw")
                assert(rw:read_lock():acquire(30))
                served = served + 1
            end)
        end
        assert.truthy(run_until(c, function()
            local kids = other:children("/rw")
            return kids and #kids == N + 1
        end, 30))
        assert.truthy(run_until(c, settled(c)))
        local joins = listings(c) - before
        writer:write_lock():release()
        assert.is_true(c:run(30))
        assert.equal(N, served)
        assert.equal(joins, listings(c) - before)
    end)

    it("a lock of this process that got through proves nothing about markers it ignores",
       function()
        -- /m: an "x-" node (another client's), then a plain lock of this
        -- process (through: it ignores "x-"), then a line over both markers
        assert(other:create("/m", nil, { parents = true }))
        local x = assert(other:create("/m/_c_" .. line.uuid() .. "-x-", nil,
                                      { ephemeral = true, sequential = true }))
        local lock = line.new(c, "/m", ONE)
        assert.is_true(lock:enter(5))
        local BOTH = line.driver { marker = "x-", markers = { "x-", "lock-" }, rule = rules.first }
        local w, done = line.new(c, "/m", BOTH), nil
        c:spawn(function() done = { w:enter(20) } end)
        assert.truthy(run_until(c, function() return w:node() ~= nil and settled(c)() end))
        local g0 = sent(c, "get")
        lock:leave()
        assert.truthy(run_until(c, function() return sent(c, "get") > g0 and settled(c)() end),
                      "the waiter did not walk down to the x- node")
        assert.is_nil(done, "through while the x- node below is there")
        assert(other:delete(x))
        assert.truthy(run_until(c, function() return done ~= nil end))
        assert.same({ true }, done)
        w:leave()
    end)

    it("a keyed driver lists on a wake-up: with a key, entries may sort before ours", function()
        local KEYED = line.driver { marker = "lock-", rule = rules.first,
                                    key = function(e) return e.seq end }
        local holder = line.new(other, "/key", KEYED)
        assert.is_true(holder:enter(5))
        local w, done = line.new(c, "/key", KEYED), nil
        c:spawn(function() done = { w:enter(20) } end)
        assert.truthy(run_until(c, function() return w:node() ~= nil and settled(c)() end))
        local l0 = listings(c)
        holder:leave()
        assert.truthy(run_until(c, function() return done ~= nil end))
        assert.same({ true }, done)
        assert.equal(l0 + 1, listings(c))
        w:leave()
    end)
end)
