-- work_queue.lua: a work queue written on zkcoord.queue (kazoo's LockingQueue idea).
--   luajit examples/work_queue.lua     ZK_HOSTS (default 127.0.0.1:2181)
-- Items are persistent entries (they outlive the producer), in sequence order.
-- A consumer claims the first unclaimed item with an ephemeral <path>/taken/<item>:
-- two live consumers never get one item, a dead consumer's claims go back.
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../lua/?.lua;" .. here .. "/../lua/?/init.lua;" .. package.path
package.cpath = here .. "/../lua/?.so;" .. package.cpath
local zkcoord, queue = require "zkcoord", require "zkcoord.queue"

local function work_queue(client, path)
    local function item_line(data)         -- a place in the items line that never waits
        return queue.new(client, path .. "/items", { marker = "item-", rule = queue.rule_always,
                                                     persistent = true, data = data })
    end
    local items, wq = item_line(), {}
    assert(client:create(path .. "/taken", nil, { parents = true }) or true)
    function wq.put(data) return item_line(data):enter(5) end
    function wq.take(timeout)              -- item | nil, "timeout"
        local w = client:waiter()
        local deadline = w:now() + timeout
        while true do                      -- list with watches: any new or released item wakes us
            local ev = w:event()
            local function wake() ev:set() end
            local names = client:children(path .. "/items", wake) or {}
            client:children(path .. "/taken", wake)
            for _, e in ipairs(items:parse(names)) do
                local claim = path .. "/taken/" .. e.name
                if client:create(claim, nil, { ephemeral = true }) then
                    local data = client:get(e.path)
                    if data then return { data = data, ack = function()   -- done: both go at once
                        return client:multi { { op = "delete", path = claim },
                                              { op = "delete", path = e.path } }
                    end, release = function() return client:delete(claim) end } end
                    client:delete(claim)   -- acked meanwhile by someone else
                end
            end
            local left = deadline - w:now()
            if left <= 0 or not ev:wait(left) then return nil, "timeout" end
        end
    end
    return wq
end

local hosts = os.getenv("ZK_HOSTS") or "127.0.0.1:2181"
local producer, consumer = assert(zkcoord.connect(hosts)), assert(zkcoord.connect(hosts))
local path = "/zkcoord-demo/work-" .. os.time()
local q, wq = work_queue(producer, path), work_queue(consumer, path)
for i = 1, 3 do assert(q.put("job " .. i)) end
producer:close()                                   -- the items stay
local item = assert(wq.take(5))
print("took", item.data, "and gave it back:", item.release())
for _ = 1, 3 do item = assert(wq.take(5)); print("took", item.data, "ack:", item.ack() ~= nil) end
print("empty queue:", wq.take(0.2))                -- nil, "timeout"
consumer:close()
