-- soak.work: the everyday work the soak repeats, on two clients of one
-- namespace. The worker: lock acquire / counter add / release; the setter
-- sets a node the worker watches (a zkcoord.watch recipe and a raw one-shot
-- watch re-armed on every event), and every 10th round holds the lock while
-- the worker tries it once (acquire(0): "timeout", its node deleted). Every
-- failed operation is counted by kind.
local zkcoord = require "zkcoord"

local now = zkcoord.now

local _M = {}

--- Connects the clients and sets up the namespace. `logger` goes to every
--- client. Returns the work object.
function _M.start(hosts, logger)
    local w = { rounds = 0, adds = 0, contended = 0, sets = 0, deliveries = 0, raw_fired = 0,
                errors = {}, nerrors = 0 }
    w.admin = assert(zkcoord.connect { servers = hosts, session_timeout = 10, logger = logger })
    w.ns = ("/soak-%d-%d"):format(os.time(), math.floor(now() * 1000) % 100000)
    assert(w.admin:create(w.ns))
    w.worker = assert(zkcoord.connect { servers = hosts, chroot = w.ns, session_timeout = 10,
                                        logger = logger })
    w.setter = assert(zkcoord.connect { servers = hosts, chroot = w.ns, session_timeout = 10,
                                        logger = logger })
    w.lock = w.worker:lock("/lock")
    w.other_lock = w.setter:lock("/lock")
    w.counter = w.worker:counter("/counter")
    assert(w.setter:create("/watched", "0"))
    w.watch = assert(w.worker:watch("/watched", function() w.deliveries = w.deliveries + 1 end))

    -- A raw one-shot watch, set again from its own callback.
    local function rearm(ev)
        if ev then
            w.raw_fired = w.raw_fired + 1
        end
        local f = w.worker:send("get", "/watched", rearm)
        f:on_done(function(data, err)
            if data == nil then
                _M.failed(w, "raw watch get", err)
            end
        end)
    end
    rearm(nil)
    return w
end

function _M.failed(w, what, err)
    local k = what .. ":" .. tostring(err)
    w.errors[k] = (w.errors[k] or 0) + 1
    w.nerrors = w.nerrors + 1
end
local failed = _M.failed

-- Contention: the other client holds the lock, the worker tries once.
local function contend(w)
    local ok, err = w.other_lock:acquire(5)
    if not ok then
        failed(w, "other acquire", err)
        return
    end
    local wok, werr = w.lock:acquire(0)
    if wok then
        failed(w, "acquire(0) on a held lock", "granted")
        w.lock:release()
    elseif werr ~= "timeout" then
        failed(w, "acquire(0)", werr)
    else
        w.contended = w.contended + 1
    end
    local rok, rerr = w.other_lock:release()
    if not rok then
        failed(w, "other release", rerr)
    end
end

local function locked_add(w)
    local ok, err = w.lock:acquire(5)
    if not ok then
        failed(w, "acquire", err)
        return
    end
    local v, cerr = w.counter:add(1)
    if v then
        w.adds = w.adds + 1
        if v ~= w.adds then
            failed(w, "counter value", ("%s, expected %d"):format(tostring(v), w.adds))
        end
    else
        failed(w, "counter add", cerr)
    end
    local rok, rerr = w.lock:release()
    if not rok then
        failed(w, "release", rerr)
    end
end

--- One round of the work.
function _M.round(w)
    w.rounds = w.rounds + 1
    if w.rounds % 10 == 0 then
        contend(w)
    end
    locked_add(w)
    local st, serr = w.setter:set("/watched", tostring(w.rounds))
    if st then
        w.sets = w.sets + 1
    else
        failed(w, "set", serr)
    end
    w.worker:dispatch(0)
end

--- Lets the last events arrive, checks the end state (the counter holds
--- every add, no lock node left), cancels the watches. Returns the
--- counter's final value.
function _M.finish(w)
    w.worker:dispatch(0.2)
    local final, ferr = w.counter:get()
    if final ~= w.adds then
        failed(w, "final counter", tostring(final) .. " " .. tostring(ferr) .. ", expected " .. w.adds)
    end
    -- No lock node may be left ("/lock" is a container: the server may have
    -- removed it already, which says the same).
    local left, lerr = w.worker:children("/lock")
    if (left == nil and lerr ~= "nonode") or (left and #left ~= 0) then
        failed(w, "lock nodes left", left and #left or lerr)
    end
    w.watch:cancel()
    w.worker:remove_watches("/watched")
    return final
end

--- Closes the clients and deletes the namespace; true when all of it went.
function _M.close(w)
    w.worker:close()
    w.setter:close()
    local ok_del = true
    for _, p in ipairs({ w.ns .. "/watched", w.ns .. "/counter", w.ns .. "/lock", w.ns }) do
        local dok, derr = w.admin:delete(p)
        if not dok and derr ~= "nonode" then
            ok_del = false
        end
    end
    w.admin:close()
    return ok_del
end

return _M
