-- fuzz.known: the bugs this fuzzer found, kept so that a regression is
-- recognised, and the probes that show whether a hang or a crash is back.
local zkcoord = require "zkcoord"
local queue = require "zkcoord.queue"
local proc = require "helpers.proc"
local S = require "fuzz.state"

local pairs, ipairs, tostring = pairs, ipairs, tostring
local rep = string.rep

local _M = {}

-- Bugs this fuzzer found, kept so a regression is recognised: every one is
-- fixed (docs/RELIABILITY.md), and each `avoided` one is probed at start
-- (PROBES), its inputs included once the probe shows the fix. A raise, a
-- code or a read-back that matches one counts as `known_bug`, not as a new
-- bug; a hang or a crash cannot be matched after the fact, so its inputs
-- are left out while its probe fails, unless --known-bugs.
-- match(class, key, msg): class is the outcome class it would have had.
-- (K2-K6 and K14 have no entry: spec/arguments_spec.lua shows each fix.)
local KNOWN = {
    {
        id = "K15", where = "lua/zkcoord/client/nodes.lua delete_guaranteed (with K9)", avoided = true,
        what = "delete_guaranteed(path) with a path above the request limit is sent, the server "
            .. "drops the connection, and the delete is sent again after every reconnect, for "
            .. "ever: the client flaps between connected and suspended (27 state changes in 2 s) "
            .. "and every other request fails with 'connectionloss'; a recipe on such a path "
            .. "does the same through its guaranteed deletes",
    },
    {
        id = "K12", where = "lua/zkcoord/queue.lua new, enter", avoided = true,
        what = "a queue whose marker is not among opts.markers never finds its own node: "
            .. "enter() forgets it (left behind, ephemeral) and creates another, for ever, "
            .. "whatever the timeout (1040 nodes in 2 s with enter(0)); an empty marker parses "
            .. "only the last digit of the sequence number, so the line is misordered",
    },
    {
        id = "K11", where = "lua/zkcoord/client/ops.lua send.create, send.multi",
        what = "with a chroot, create('/', data, { sequential = true }) (and the same multi op) "
            .. "creates <chroot><seq> next to the chroot, outside the namespace, and returns "
            .. "'0000000001', a path without '/' (libzookeeper maps '/' to the chroot itself)",
        match = function(class, _, msg)
            return class == "oracle" and msg:find("not a path inside the chroot", 1, true)
        end,
    },
    {
        id = "K1", where = "src/completions.c queue_wait", avoided = true,
        what = "a wait of >= ~9.2e18 s: (time_t) overflow gives an invalid timespec, "
            .. "pthread_cond_timedwait fails with EINVAL at once and the loop spins holding the "
            .. "queue mutex, so no event can arrive: the call never returns (100% CPU). Every "
            .. "nil timeout of a recipe wait (lock:acquire(), barrier:wait() ...) is math.huge "
            .. "in the blocking waiter and hits it as soon as it really waits",
    },
    {
        id = "K7", where = "lua/zkcoord/counter.lua add", avoided = true,
        what = "an add() called from a callback while an add of the same counter object is "
            .. "writing queues behind that write, which cannot go on until the callback "
            .. "returns: it waits max_tries x (request_timeout + max_delay) (17 min by default) "
            .. "and returns 'timeout'",
    },
    {
        id = "K8", where = "src/session.c session_multi (libzookeeper zoo_amulti)", avoided = true,
        what = "a multi op whose path holds a control character (0x01..0x1e, which check_path "
            .. "lets through) makes zoo_amulti free an uninitialised request path: "
            .. "'free(): double free detected', 'munmap_chunk(): invalid pointer', ASan bad-free; "
            .. "the process aborts",
    },
    {
        id = "K9", where = "lua/zkcoord/client/requests.lua _data_arg",
        what = "only create/set data is size-checked: a 1.1 MB path (get, exists, delete ...) or "
            .. "a multi whose ops together exceed 1 MiB is sent, the server drops the connection "
            .. "(every request in flight fails, reads retry and drop it 5 times) and the call "
            .. "returns 'connectionloss' instead of 'toolarge'",
        match = function(class, _, msg, oversize)
            return class == "err" and msg == "connectionloss" and oversize
        end,
    },
    {
        id = "K10", where = "lua/zkcoord/client/acl.lua normalize",
        what = "ACL perms strings add up repeated letters: 'rr' becomes 2 (write), 'cdc' 16 "
            .. "(admin), 'aa' 32 (no valid bit): a node gets other permissions than written",
        match = function(class, _, msg)
            return class == "oracle" and msg:find("ACL perms", 1, true)
        end,
    },
}


_M.KNOWN = KNOWN

-- ---------------------------------------------------------------------------
-- Known hangs and crashes: still there? Their inputs are used once fixed.

local function sh_quote(v)
    return "'" .. tostring(v):gsub("'", "'\\''") .. "'"
end

-- Runs Lua `code` in a child luajit (same paths), killed after `limit` s.
local function child(name, code, limit)
    local file, out = S.dir .. "/" .. name .. ".lua", S.dir .. "/" .. name .. ".out"
    assert(proc.write_file(file, code))
    os.execute(("ZK_HOSTS=%s LUA_PATH=%s LUA_CPATH=%s timeout -s KILL %d %s %s > %s 2>&1"):format(
        sh_quote(S.hosts), sh_quote(package.path), sh_quote(package.cpath), limit,
        sh_quote(arg[-1] or "luajit"), sh_quote(file), sh_quote(out)))
    return proc.read_file(out) or ""
end

local PROBES = {
    K1 = function()
        return not child("probe-k1", [[
            local zkcoord = require "zkcoord"
            local c = assert(zkcoord.connect { servers = os.getenv("ZK_HOSTS") })
            c:send("exists", "/"):wait(1e300)
            print("returned")
        ]], 10):find("returned", 1, true)
    end,
    K7 = function()
        return not child("probe-k7", [[
            local zkcoord = require "zkcoord"
            local hosts = os.getenv("ZK_HOSTS")
            local c = assert(zkcoord.connect { servers = hosts, request_timeout = 1 })
            local other = assert(zkcoord.connect { servers = hosts })
            local p = "/fuzz-probe-k7-" .. os.time() .. "-" .. math.random(1e6)
            local ctr = c:counter(p .. "/ctr", { max_tries = 2 })
            assert(ctr:add(1))
            c:create(p .. "/w", "0")
            local inner
            c:get(p .. "/w", function() inner = { ctr:add(1) } end)
            other:set(p .. "/w", "1")
            os.execute("sleep 0.3")
            ctr:add(1)
            c:delete(p .. "/w") c:delete(p .. "/ctr") c:delete(p)
            print(inner and inner[1] and "fine" or "stuck")
        ]], 30):find("fine", 1, true)
    end,
    K8 = function()
        return (pcall(zkcoord.check_path, "/a\nb", "probe", 1))
    end,
    K15 = function()
        -- K9 still there (so K15 too): a read of a 1.1 MB path goes to the server
        local c = zkcoord.connect { servers = S.hosts, request_timeout = 2, logger = S.logger,
                                    retry = { max_tries = 1 } }
        if not c then
            return true
        end
        local ok, _, err = pcall(c.get, c, "/" .. rep("p", 1100000))
        c:close()
        return ok and err == "connectionloss"
    end,
    K12 = function()
        return (pcall(queue.new, S.admin, "/x", { marker = "m-", markers = { "x-" },
                                                 rule = queue.rule_first }))
    end,
}

--- Runs every probe: S.present[id] (the bug shows), S.include[id] (its
--- inputs are used: fixed, or --known-bugs).
function _M.probe_all()
    for id, probe in pairs(PROBES) do
        S.present[id] = probe() and true or false
        S.include[id] = S.opts.known_bugs or not S.present[id]
    end
end

--- The id of the known bug an outcome matches, or nil (always nil with
--- --no-known). class is the outcome class it would have had.
function _M.match(class, key, msg, big)
    if not S.opts.match_known then
        return nil
    end
    for _, k in ipairs(KNOWN) do
        if k.match and k.match(class, key, tostring(msg), big) then
            return k.id
        end
    end
    return nil
end

function _M.count(id)
    S.counts.known_bug = S.counts.known_bug + 1
    S.known_hits[id] = (S.known_hits[id] or 0) + 1
end

return _M
