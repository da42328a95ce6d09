-- What a waiting position keeps while it waits. With N waiters in one
-- process (coroutines here, requests in one nginx worker), a waiter that
-- kept its parsed listing alive for the whole wait made the heap grow with
-- N x N (88 KB per waiter at 1,000, 10,000 requests in one worker ran out of
-- memory); a waiter keeps only its own position and the entry it watches.
local zk = require "helpers.zk"

describe("line memory #zk", function()
    local root, c

    before_each(function()
        root = zk.new_root("linemem")
        c = zk.client { chroot = root }
    end)

    after_each(function()
        zk.close_clients()
        zk.delete_tree(zk.admin(), root)
    end)

    it("a waiter does not keep the listing it judged while it waits", function()
        local N = 300
        local holder = c:lock("/l")
        assert.is_true(holder:acquire(5))
        collectgarbage(); collectgarbage()
        local before = collectgarbage("count")
        local done = 0
        for _ = 1, N do
            c:spawn(function()
                local l = c:lock("/l")
                assert(l:acquire(30))
                l:release()
                done = done + 1
            end)
        end
        assert.truthy(zk.wait_until(function()
            c:run(0.05)
            local kids = c:children("/l")
            return kids and #kids == N + 1
        end, 30), "the waiters did not all join")
        c:run(0.5)    -- every waiter has listed and armed its watch
        collectgarbage(); collectgarbage()
        local per_waiter = (collectgarbage("count") - before) / N
        -- Measured: about 5 KB per waiter; 31 KB when each kept its listing
        -- of 300 entries.
        assert.is_true(per_waiter < 15, ("%.1f KB per waiter"):format(per_waiter))
        holder:release()
        assert.truthy(zk.wait_until(function()
            c:run(0.05)
            return done == N
        end, 60), ("%d of %d served"):format(done, N))
    end)
end)
