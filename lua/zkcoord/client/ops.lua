--- zkcoord.client.ops: the operations (client methods).
--
-- Owns the `send` table (one function per operation: check the arguments,
-- submit, return a future with a static finisher), `client:send(op, ...)`,
-- the synchronous forms (reads retry on connection loss, writes never
-- retry blindly), `read_until` for recipes, and `remove_watches`.
local core = require "zkcoord.core"
local errors = require "zkcoord.errors"
local _M = require "zkcoord.client.class"
local checks = require "zkcoord.client.checks"
local future = require "zkcoord.client.future"
local acl = require "zkcoord.client.acl"
local compat = require "zkcoord.compat"
local paths = require "zkcoord.client.paths"
local contract = require "zkcoord.client.contract"

local C = core.c
local now = core.now
local errname = errors.name
local args = require "zkcoord.util.args"
local argerror, is_callable = args.argerror, args.is_callable
local check_self, check_path = checks.check_self, checks.check_path
local check_version, check_fn, array_length = checks.check_version, checks.check_fn,
                                              checks.array_length
local check_flags, CREATE_FLAGS = checks.check_flags, checks.CREATE_FLAGS
local entry_err, failed_future, composite_future, pack =
    future.entry_err, future.failed, future.composite, future.pack
local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local unpack = compat.unpack
local find, sub, floor = string.find, string.sub, math.floor

local RC_OK, RC_NONODE = 0, -101

local M = {}

local send = {}
M.send = send

local CREATE_KEYS = { ephemeral = true, sequential = true, container = true, ttl = true,
                      parents = true, acl = true }

-- ZooKeeper keeps a TTL in 40 bits of milliseconds (EphemeralType.MAX_TTL).
local MAX_TTL = (2 ^ 40 - 1) / 1000

local PLAIN_MODES = {
    [false] = { [false] = C.PERSISTENT, [true] = C.PERSISTENT_SEQUENTIAL },
    [true] = { [false] = C.EPHEMERAL, [true] = C.EPHEMERAL_SEQUENTIAL },
}

local function create_mode(opts)
    if opts.container then
        if opts.ephemeral or opts.sequential or opts.ttl then
            argerror(3, "create", "container nodes cannot be ephemeral, sequential or TTL", 4)
        end
        return C.CONTAINER
    elseif opts.ttl then
        if opts.ephemeral then
            argerror(3, "create", "TTL nodes cannot be ephemeral", 4)
        end
        local ttl = opts.ttl
        if type(ttl) ~= "number" or not (ttl > 0 and ttl <= MAX_TTL) then  -- luacheck: ignore 581
            argerror(3, "create", "ttl must be a positive number of seconds, at most "
                     .. MAX_TTL .. " (about 34 years)", 4)
        end
        return opts.sequential and C.PERSISTENT_SEQUENTIAL_WITH_TTL or C.PERSISTENT_WITH_TTL
    end
    return PLAIN_MODES[not not opts.ephemeral][not not opts.sequential]
end


local function finish_create(p)
    if p.rc ~= RC_OK then
        return nil, entry_err(p)
    end
    return p.value, p.stat
end


-- Curator's creatingParentsIfNeeded: try once; on "nonode" create the
-- ancestors and the node again, all pipelined (one round trip).
local function create_with_parents(self, fut, path, d, acl_entries, mode, ttl, parent_mode)
    return composite_future(self, function(_, timeout)
        local r = pack(fut:wait(timeout))
        if r[1] ~= nil or r[2] ~= "nonode" then
            return unpack(r, 1, r.n)
        end
        local pos, parents = 1, {}
        while true do
            local s = find(path, "/", pos + 1, true)
            if not s or s == #path then
                break
            end
            parents[#parents + 1] = self:_request(nil, "create", sub(path, 1, s - 1), nil,
                                                  acl_entries, parent_mode)
            pos = s
        end
        local again = self:_request(finish_create, "create", path, d, acl_entries, mode, ttl)
        for _, f in ipairs(parents) do
            f:wait()
        end
        return again:wait()
    end)
end


function send.create(self, path, data, opts)
    opts = opts or {}
    if type(opts) ~= "table" then
        argerror(3, "create", "opts must be a table")
    end
    for k in pairs(opts) do
        if not CREATE_KEYS[k] then
            argerror(3, "create", "unknown option '" .. tostring(k) .. "'")
        end
    end
    check_flags(opts, CREATE_FLAGS, "create", 3)
    local parents = opts.parents
    if parents ~= nil and type(parents) ~= "boolean" and parents ~= "container"
            and parents ~= "persistent" then
        argerror(3, "create", "parents must be a boolean, 'container' or 'persistent'")
    end
    check_path(path, "create", 1, opts.sequential)
    local mode = create_mode(opts)
    local acl_entries = opts.acl and acl.normalize(opts.acl, "create", 3) or self._acl
    local d, derr, detail = self:_data_arg(data, "create", 2, path, acl_entries or acl.NAMED.open)
    if derr then
        return failed_future(self, derr, detail)
    end
    local ttl = opts.ttl and floor(opts.ttl * 1000 + 0.5)
    local fut = self:_request(finish_create, "create", path, d, acl_entries, mode, ttl)
    if not opts.parents or path == "/" then
        return fut
    end
    local parent_mode = opts.parents == "container" and C.CONTAINER or C.PERSISTENT
    return create_with_parents(self, fut, path, d, acl_entries, mode, ttl, parent_mode)
end


-- delete(path, version) or delete(path, { version =, recursive =, timeout = })
-- (the options form is zkcoord.client.paths').
function send.delete(self, path, version)
    if type(version) == "table" then
        return paths.send_delete(self, path, version)
    end
    check_path(path, "delete", 1)
    return self:_request(nil, "delete", path, check_version(version, "delete", 2))
end


-- The send function of a read that may leave a watch (exists, get,
-- children): `watch`, when given, runs when it fires, with `arg` after the
-- event where the operation takes one (exists).
local function watched_read(op, finish, takes_arg)
    return function(self, path, watch, arg)
        check_path(path, op, 1)
        check_fn(watch, op, 2)
        if not takes_arg then
            arg = nil
        end
        local fut = self:_request(finish, op, path, watch ~= nil)
        self:_register_watch(fut, watch, path, op, arg)
        return fut
    end
end


local function finish_exists(p)
    if p.rc == RC_OK then
        return p.stat
    elseif p.rc == RC_NONODE then
        return false
    end
    return nil, entry_err(p)
end


send.exists = watched_read("exists", finish_exists, true)


local function finish_get(p)
    if p.rc ~= RC_OK then
        return nil, entry_err(p)
    end
    return p.value or "", p.stat
end


send.get = watched_read("get", finish_get)


local function finish_set(p)
    if p.rc ~= RC_OK then
        return nil, entry_err(p)
    end
    return p.stat
end


function send.set(self, path, data, version)
    check_path(path, "set", 1)
    if data == nil then
        argerror(2, "set", "data must be a string")
    end
    local d, derr, detail = self:_data_arg(data, "set", 2, path)
    if derr then
        return failed_future(self, derr, detail)
    end
    return self:_request(finish_set, "set", path, d, check_version(version, "set", 3))
end


local function finish_children(p)
    if p.rc ~= RC_OK then
        return nil, entry_err(p)
    end
    return p.extra or {}, p.stat
end


send.children = watched_read("children", finish_children)


function send.sync(self, path)
    check_path(path, "sync", 1)
    return self:_request(nil, "sync", path)
end


local function finish_get_acl(p)
    if p.rc ~= RC_OK then
        return nil, entry_err(p)
    end
    return acl.export(p.extra or {}), p.stat
end


function send.get_acl(self, path)
    check_path(path, "get_acl", 1)
    return self:_request(finish_get_acl, "get_acl", path)
end


function send.set_acl(self, path, acl_arg, version)
    check_path(path, "set_acl", 1)
    if acl_arg == nil then
        argerror(2, "set_acl", "acl is required")
    end
    return self:_request(nil, "set_acl", path, acl.normalize(acl_arg, "set_acl", 2),
                         check_version(version, "set_acl", 3))
end


local MULTI_OPS = { create = C.OP_CREATE, delete = C.OP_DELETE, set = C.OP_SET,
                    check = C.OP_CHECK }


local function finish_multi(p)
    local results = {}
    local first_err
    for i, r in ipairs(p.extra or {}) do
        local e = r.rc ~= RC_OK and errname(r.rc) or nil
        results[i] = { path = r.path, stat = r.stat, err = e }
        -- The op that failed has its own code; the others report
        -- "runtimeinconsistency" (rolled back).
        if e and e ~= "runtimeinconsistency" and not first_err then
            first_err = e
        end
    end
    if p.rc ~= RC_OK then
        -- Ops failed with the multi's own code (the connection dropped, the
        -- core closed a lost session) tell no failing op: the request's
        -- error does, and says why a session that ended ended (not
        -- "closed", which would say the multi was not applied).
        if first_err == nil or first_err == errname(p.rc) then
            first_err = entry_err(p)
        end
        return nil, first_err, results
    end
    return results
end


-- One op of a multi in the C core's form; nil, err, detail when its data
-- is too large.
local function multi_op(self, op, i)
    if type(op) ~= "table" then
        argerror(1, "multi", "op " .. i .. " must be a table")
    end
    local kind = MULTI_OPS[op.op or op[1]]
    if not kind then
        argerror(1, "multi", "op " .. i .. ": op must be create, delete, set or check")
    end
    local path = op.path or op[2]
    if kind == C.OP_CREATE then
        check_flags(op, CREATE_FLAGS, "multi", 1)
    end
    check_path(path, "multi", 1, kind == C.OP_CREATE and op.sequential)
    local data = op.data
    if type(data) ~= "nil" then
        local d, derr, detail = self:_data_arg(data, "multi", 1, path)
        if derr then
            return nil, derr, detail
        end
        data = d
    end
    local e = { type = kind, path = path, data = data,
                version = check_version(op.version, "multi", 1) }
    if kind == C.OP_CREATE then
        e.mode = create_mode(op)
        if op.ttl then
            argerror(1, "multi", "TTL nodes cannot be created in a multi")
        end
        e.acl = op.acl and acl.normalize(op.acl, "multi", 1) or self._acl
    end
    return e
end


function send.multi(self, ops)
    local n, why
    if type(ops) == "table" then
        n, why = array_length(ops)     -- not #ops / ipairs: { nil, op, op } is refused
    end
    if why == "holes" then
        argerror(1, "multi", "ops must be an array without holes")
    elseif not n or n == 0 then
        argerror(1, "multi", "ops must be a non-empty array" .. (why and " (" .. why .. ")" or ""))
    end
    local core_ops, size = {}, 0
    for i = 1, n do
        local e, derr, detail = multi_op(self, ops[i], i)
        if not e then
            return failed_future(self, derr, detail)
        end
        core_ops[i] = e
        size = size + self:_packet_size(e.path, e.data, e.acl)
    end
    if size > self._opts.max_packet_size then
        return failed_future(self, "toolarge", ("a multi of %d bytes exceeds ZooKeeper's "
                             .. "request limit of %d bytes (jute.maxbuffer)")
                             :format(size, self._opts.max_packet_size))
    end
    return self:_request(finish_multi, "multi", core_ops)
end


--- client:send(op, ...) -> future: the asynchronous form of every operation.
function _M:send(op, ...)
    check_self(self, "send")
    local fn = send[op]
    if not fn then
        argerror(1, "send", "unknown operation '" .. tostring(op) .. "'")
    end
    return fn(self, ...)
end


-- Synchronous forms. Reads retry on connection loss (they are idempotent);
-- writes never retry blindly: a lost reply may hide a write that happened.
local READS = { exists = true, get = true, children = true, get_acl = true, sync = true }

-- Contract, for recipes: read `op` (a READS name) as the sync method does,
-- but give up with "timeout" at `deadline` (nil: the retry policy only).
function contract.read_until(self, deadline, op, a, b, c)
    return self:_read(deadline, self._retry, send[op], a, b, c)
end

for name, fn in pairs(send) do
    if READS[name] then
        _M[name] = function(self, a, b, c)
            check_self(self, name)
            return self:_read(now() + self._request_timeout, self._read_retry, fn, a, b, c)
        end
    else
        _M[name] = function(self, ...)
            check_self(self, name)
            return fn(self, ...):wait()
        end
    end
end


--- Removes the watches `fn` set on `path` (all kinds), here and on the server.
--- A nil path with a function: every watch `fn` set, on any path.
---@return integer removed
function _M:remove_watches(path, fn)
    check_self(self, "remove_watches")
    if path ~= nil or not is_callable(fn) then
        check_path(path, "remove_watches", 1)
    end
    local n = 0
    for id, w in pairs(self._watches) do
        if (path == nil or w.path == path) and (fn == nil or w.fn == fn) then
            self._watches[id] = nil
            n = n + 1
            if self._s then
                local kind = w.kind == "children" and C.WATCH_CHILDREN or C.WATCH_DATA
                -- Fire and forget: a reply is not needed, the local entry is gone.
                self:_request(nil, "remove_watch", w.path, kind, id,
                              self._state ~= "connected")
            end
        end
    end
    return n
end


return M
