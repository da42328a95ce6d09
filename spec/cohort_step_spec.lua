-- A cohort seat's enter_step (zkcoord.cohort.step): enter() in steps, with
-- the contract of a line position's (spec/line_spec.lua, "enter_step never
-- waits for others"): false with wake() to come, true once it holds.
local zk = require "helpers.zk"
local cohort = require "zkcoord.cohort"
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"

-- Steps `q` until it holds: each step only after wake() was called.
local function step_until_through(q, client, woke)
    for _ = 1, 10 do
        local ok, err = q:enter_step(woke.fn, 5)
        if ok ~= false then
            return ok, err
        end
        local before = woke.n
        assert(zk.wait_until(function() return woke.n > before end, 10, client),
               "no wake() after a step that answered false")
    end
    error("not through after 10 steps")
end

local function counter()
    local w = { n = 0 }
    w.fn = function() w.n = w.n + 1 end
    return w
end


describe("cohort seat enter_step #zk", function()
    local root, c, other

    before_each(function()
        root = zk.new_root("cohort_step")
        c = zk.client { chroot = root, session_timeout = 10 }
        other = zk.client { chroot = root, session_timeout = 10 }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("never waits for others: joins the line for the cohort, queues, is handed the node locally",
       function()
        local d = line.driver { marker = "lock-", rule = rules.first }
        local new = cohort.positions({ cohort = true }, d)
        local remote = other:lock("/l")
        assert(remote:acquire(5))
        local a, b = new(c, "/l", d, {}), new(c, "/l", d, {})
        local wa, wb = counter(), counter()
        assert.is_false(a:enter_step(wa.fn, 5))   -- joins the line, behind the remote holder
        assert.is_false(a:is_through())
        assert.equal(2, #assert(c:children("/l")))
        assert.is_false(b:enter_step(wb.fn, 5))   -- queues behind a (one node for both)
        assert.is_false(b:enter_step(wb.fn, 5))   -- again: still queued, nothing sent
        assert.equal(2, #assert(c:children("/l")))
        assert(remote:release())
        assert.same({ true }, { step_until_through(a, c, wa) })
        assert.is_true(a:is_through())
        local z, n = a:token()
        assert.equal(0, n)
        assert.is_true(a:enter_step(wa.fn, 5))    -- through: stays so
        a:leave()                                 -- hands the node to b, no request
        assert.same({ true }, { step_until_through(b, c, wb) })
        local z2, n2 = b:token()
        assert.equal(z, z2)
        assert.equal(1, n2)
        assert.equal(1, #assert(c:children("/l")))
        b:leave()
        assert.truthy(zk.wait_until(function() return #c:children("/l") == 0 end, 5, c))
        assert.has_error(function() return a:enter_step(nil, 1) end,
                         "bad argument #1 to 'enter_step' (function expected, got nil)")
    end)

    it("ends a queued step with interrupt (wake() tells), and lets a reader join a held read node",
       function()
        local d = line.driver { marker = "lock-", rule = rules.first }
        local new = cohort.positions({ cohort = true }, d)
        local a, b = new(c, "/i", d, {}), new(c, "/i", d, {})
        assert.same({ true }, { a:enter(5) })
        local wb = counter()
        assert.is_false(b:enter_step(wb.fn, 5))
        b:interrupt()
        assert.truthy(zk.wait_until(function() return wb.n > 0 end, 5, c))
        assert.same({ nil, "interrupted" }, { b:enter_step(wb.fn, 5) })
        a:leave()
        assert.truthy(zk.wait_until(function() return #c:children("/i") == 0 end, 5, c))
        -- Readers: one read node for both, the second joins it at once.
        local rd = line.driver { marker = "read-", rule = rules.always }
        cohort.shared(rd)
        local rnew = cohort.positions({ cohort = true }, rd)
        local opts = { cohort_time = 60 }
        local r1, r2 = rnew(c, "/r", rd, opts), rnew(c, "/r", rd, opts)
        local w1, w2 = counter(), counter()
        assert.same({ true }, { step_until_through(r1, c, w1) })
        assert.same({ true }, { step_until_through(r2, c, w2) })
        assert.equal(r1:node(), r2:node())
        local _, n1 = r1:token()
        local _, n2 = r2:token()
        assert.same({ 0, 1 }, { n1, n2 })
        r1:leave()
        assert.equal(1, #assert(c:children("/r")))   -- r2 still holds it
        r2:leave()
        assert.truthy(zk.wait_until(function() return #c:children("/r") == 0 end, 5, c))
    end)
end)
