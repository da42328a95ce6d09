--- zkcoord.wait.ngx.loop: the nginx waiter's pump loop, its polling
--- fallback (also the exit drain) and the sentinel that wakes them.
--
-- One pump loop per client, in a timer of its own, reads the C core's
-- doorbell socket and drives the client's pump. The pump never works
-- through more than BATCH records or callbacks in one go: each record may
-- wake a request, and the requests it wakes run right after the pump
-- yields, before nginx looks at its sockets again; 10,000 create replies
-- drained at once kept the worker from every other request for seconds.
-- Between batches it pauses (zkcoord.wait.ngx.turn: a 1 ms sleep, so that
-- nginx polls).
-- Functions take the waiter as `self` (zkcoord.wait.ngx's `new` lists its
-- fields), as the ticker's do. It touches ngx only when called.
local ngx = ngx
local ticker = require "zkcoord.wait.ngx.ticker"
local pause = require("zkcoord.wait.ngx.turn").pause
local contract = require "zkcoord.contract"

local setmetatable, tostring, pcall, pairs, next = setmetatable, tostring, pcall, pairs, next

local _M = { _VERSION = require("zkcoord.version") }

--- Records (or callbacks) handled between two yields to the event loop.
--- Each may wake a request whose continuation runs before the next poll
--- (a lock's decision and its next request: about 50-100 µs in a loaded
--- worker), so a batch keeps the worker from others for a few ms.
_M.BATCH = 64

local FOREVER = 365 * 24 * 3600
local READ_TIMEOUT = 2147483   -- seconds: the pump's read never times out
                               -- in practice; timers and exits kick it
-- ngx.log at its level, looked up when called: this module loads outside
-- nginx too (specs read BATCH).
local function log(level, ...)
    ngx.log(ngx[level], ...)
end
local arm = ticker.arm
local counter = 0


--- One step of `self`'s pump: at most BATCH records. True when records
--- may be left (the caller yields, then steps again without waiting for
--- the doorbell, which rings only when the queue was empty).
function _M.step(self)
    local ok, more = pcall(self.pump.step, self.pump, _M.BATCH)
    if not ok then
        log("ERR", "zkcoord: pump: ", more)
        return false
    end
    return more
end
local step = _M.step


--- Runs the queued callbacks, BATCH at a time with a yield between, until
--- none is left (those deferred meanwhile included).
function _M.run_callbacks(self)
    local pump = self.pump
    while pump:run_callbacks(_M.BATCH) do
        pause()
    end
end


-- The sentinel: one far-future timer per worker, fired early (premature)
-- when the worker exits; it then kicks the doorbell of every open client.
-- Shared, and holding the clients' waiters weakly: a timer per client was
-- never freed (pending timers are capped per worker) and pinned its client.
local waiters = setmetatable({}, { __mode = "k" })
local sentinel = false          -- its timer is pending

local function sentinel_fired(premature)
    sentinel = false
    if not premature then           -- a year went by
        if next(waiters) then
            sentinel = ngx.timer.at(FOREVER, sentinel_fired) and true or false
        end
        return
    end
    for w in pairs(waiters) do
        if not contract.is_closed(w.client) then
            w.pump:kick()
        end
    end
end


-- Runs loop(self) in a timer of its own; `looping` is true until it
-- returns. Returns ngx.timer.at's ok, err.
local function start_loop(self, loop)
    self.looping = true
    local ok, err = ngx.timer.at(0, function(premature)
        if not premature then
            loop(self)
        end
        self.looping = false
    end)
    if not ok then
        self.looping = false
    end
    return ok, err
end


local pump_loop, poll_loop

--- Starts the sentinel (once per worker) and `self`'s pump loop.
function _M.start(self)
    -- An exiting worker needs none: the early firing is over.
    if not sentinel and not ngx.worker.exiting() then
        local ok, err = ngx.timer.at(FOREVER, sentinel_fired)
        if not ok then
            return nil, "systemerror", "cannot start the nginx sentinel timer: " .. tostring(err)
        end
        sentinel = true
    end
    local ok, err = start_loop(self, pump_loop)
    if not ok then
        return nil, "systemerror", "cannot start the nginx pump timer: " .. tostring(err)
    end
    waiters[self] = true
    return true
end


local function connect_doorbell(self)
    local q = self.pump
    counter = counter + 1
    local path = ("%s/zkcoord.%d.%d.sock"):format(self.sock_dir, ngx.worker.pid(), counter)
    local ok, err, detail = q:listen_unix(path)
    if not ok then
        return nil, tostring(err) .. ": " .. tostring(detail)
    end
    local sock = ngx.socket.tcp()
    ok, err = sock:connect("unix:" .. path)
    if not ok then
        q:close_doorbell()
        return nil, err
    end
    ok, err, detail = q:accept_unix()      -- unlinks the path
    if not ok then
        sock:close()
        q:close_doorbell()
        return nil, tostring(err) .. ": " .. tostring(detail)
    end
    return sock
end


function pump_loop(self)
    local client = self.client
    local sock, err = connect_doorbell(self)
    if not sock then
        log("WARN", "zkcoord: no doorbell socket (", err, "); falling back to polling")
        return poll_loop(self)
    end
    self.pumping = true
    while true do
        if ngx.worker.exiting() then
            -- Drain by polling: no socket read timeouts (each one logs an
            -- error line), and waiters whose request was aborted are reaped.
            self.pumping = false
            sock:close()
            return poll_loop(self)
        end
        sock:settimeout(READ_TIMEOUT * 1000)
        local data, rerr = sock:receiveany(4096)
        if not data and rerr ~= "timeout" then
            break                          -- closed: the client was closed
        end
        while step(self) and not contract.is_closed(client) do
            pause()
        end
        if client:state() == "suspended" then
            arm(self)                      -- the session timer runs in the ticker
        end
        if contract.is_closed(client) then
            break
        end
    end
    self.pumping = false
    sock:close()
end


--- The exit drain ends when no request waits; a request of the exiting
--- worker that then waits again (a lock's waiter re-reading the line after
--- its turn came) would have no loop to wake it: poll again. A timer with
--- no delay may still be made while the worker exits.
function _M.restart(self)
    if contract.is_closed(self.client) then
        return
    end
    local ok, err = start_loop(self, poll_loop)
    if not ok then
        log("ERR", "zkcoord: cannot restart the poll loop: ", err)
    end
end


-- Fallback (and the exit drain): poll with a step that grows while nothing
-- arrives and starts again at 1 ms when something did; parked on a
-- semaphore while nobody waits (a new waiter wakes it).
function poll_loop(self)
    local client = self.client
    local wait = 0.001
    while not contract.is_closed(client) do
        local sets = self.sets
        local more = step(self)
        if not more and ngx.worker.exiting() and ticker.drained(self) then
            break
        end
        if more or self.sets ~= sets then
            wait = 0.001
        end
        if more then
            pause()
        elseif self.waiting > 0 then
            ngx.sleep(wait)
            wait = wait < 0.05 and wait * 2 or 0.05
        else
            wait = 0.001
            self.parked = true
            self.idle:wait(0.05)
            self.parked = false
        end
    end
end


return _M
