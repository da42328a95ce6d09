--- zkcoord.group: group membership (Curator's GroupMember, kazoo's Party).
--
--   local g = client:group("/services/api", { id = "host-a", data = "10.0.0.5:8080" })
--   assert(g:join(5))
--   g:on_change(function(members) ... end)    -- id -> data, now and on every change
--   g:members()                               -- id -> data
--   g:leave()
--
-- Node layout (Curator GroupMember's): <path>/<id>, ephemeral, data = the
-- member's data; every child of <path> is a member. Our member node is a
-- zkcoord.persistent_node: after a session expiry (or a delete by someone
-- else) it is created again by itself, with the latest data.
--
-- on_change runs on membership changes (a member joining or leaving), with
-- every member's data as read then; a member's data change alone does not
-- run it. Each view is whole and the latest: a listing whose data reads
-- failed half-way (a connection loss) is read again, listing included,
-- once connected, and a read overtaken by a newer listing is dropped. So
-- once the last fault heals, the view equals the server's members within a
-- round trip. Suspended: members stay as they were (the session may live).
-- Lost: our node goes with the session and comes back with the new one.
--
-- A persistent (non-ephemeral) node that already has our id's name never
-- goes by itself: join() answers "nodeexists" at once rather than waiting
-- for it (kazoo's Party names its nodes with a uuid and so never meets
-- one; adopting it would list us as a member after we died).
--
-- Deprecated, kept for one release: the positional client:group(path, id,
-- data) (a warning logged once per process, util.deprecated).
local util = require "zkcoord.util"
local kazoo = require "zkcoord.layout.kazoo"
local contract = require "zkcoord.contract"

local type, ipairs, tostring, setmetatable, select = type, ipairs, tostring, setmetatable, select
local find, sort = string.find, table.sort
local argerror = util.argerror

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
local check_self = util.self_checker(mt, "group", "g")


local OPT_KEYS = { "id", "data", "layout" }
local POSITIONAL_OPT_KEYS = { "layout" }    -- the deprecated form's 4th argument

-- The id in a member node's name, by layout.
local function same(name) return name end
local ID_OF = { curator = same, kazoo = kazoo.party_id }


---@class zkcoord.group_opts
---@field id string? our member id, the name of our node (default "<hostname>:<pid>")
---@field data string? our member node's data
---@field layout "curator"|"kazoo"|nil "curator" (default: <path>/<id>) or "kazoo"
---   (kazoo's ShallowParty: <path>/<uuid hex>-<id>, zkcoord.layout.kazoo)

--- client:group(path, opts) -> g (no server state until join()). The
--- deprecated form client:group(path, id, data, opts?) still works (a
--- warning logged once).
---@param client table
---@param path string
---@param opts zkcoord.group_opts?
function _M.new(client, path, opts, ...)
    contract.check_path(path, "group", 1)
    local id, data, positional
    -- group(path, nil, data): the old form with a missing id (raises below)
    if type(opts) == "table" or opts == nil and select("#", ...) == 0 then
        opts = util.check_opts(opts, OPT_KEYS, "group", 2)
        id, data = opts.id or util.default_id(), opts.data
    else
        local popts
        id, data, popts = opts, ...
        positional = true
        opts = util.check_opts(popts, POSITIONAL_OPT_KEYS, "group", 4)
    end
    if type(id) ~= "string" or id == "" or find(id, "[/%c]") or id == "." or id == ".." then
        argerror(2, "group", "id must be a non-empty string without '/' or control characters, got "
                 .. (type(id) == "string" and ("%q"):format(id) or type(id)))
    end
    if data ~= nil and type(data) ~= "string" then
        argerror(positional and 3 or 2, "group", "data must be a string or nil, got " .. type(data))
    end
    if positional then
        util.deprecated(client, "client:group(path, id, data)",
                        "client:group(path, { id =, data = })")
    end
    local layout = util.check_layout(opts.layout, "group", positional and 4 or 2)
    return setmetatable({
        client = client,
        path = path,
        id = id,
        data = data,
        node_path = layout == "kazoo" and kazoo.party_node(path, id)
                    or (path == "/" and "" or path) .. "/" .. id,
        _id_of = ID_OF[layout],
        _kazoo = layout == "kazoo",
        _node = nil,          -- our persistent_node while joined
        _watches = {},
    }, mt)
end


--- Joins (our member node is kept present until leave()); waits at most
--- `timeout` seconds (default: the session timeout) for it to be there.
--- "nodeexists": a persistent node has our id's name (it never goes by
--- itself); we still join if it is deleted, until leave().
---@return true|nil ok, string? err "timeout" | "closed" | "nodeexists"
function _M:join(timeout)
    check_self(self, "join")
    util.check_timeout(timeout, "join", 1)
    if not self._node then
        if self._kazoo then
            -- kazoo's parents are persistent (its ensure_path): a container
            -- the server removed would fail kazoo's next join
            local ok, err = self.client:create(self.path, nil, { parents = true })
            if not ok and err ~= "nodeexists" then
                return nil, err
            end
        end
        self._node = self.client:persistent_node(self.node_path, self.data)
    end
    return self._node:wait(timeout)
end


--- Leaves: our member node is deleted and no longer kept.
---@return true|nil ok, string? err
function _M:leave()
    check_self(self, "leave")
    local node = self._node
    self._node = nil
    if not node then
        return true
    end
    return node:close()
end


--- Changes our member data (now if joined, and for every re-creation).
---@return table|true|nil stat, string? err
function _M:set(data)
    check_self(self, "set")
    util.check_string(data, "set", 1, "data")
    self.data = data
    if not self._node then
        return true       -- used at join()
    end
    return self._node:set(data)
end


-- Every member's data, for a listing (one pipelined round trip). A member
-- that left meanwhile is skipped.
local function read_members(self, names)
    local client, base = self.client, self.path == "/" and "" or self.path
    local fs, out = {}, {}
    for i, name in ipairs(names) do
        fs[i] = client:send("get", base .. "/" .. name)
    end
    for i, f in ipairs(fs) do
        local data, err = f:wait()
        if data then
            out[self._id_of(names[i])] = data
        elseif err ~= "nonode" then
            return nil, err
        end
    end
    return out
end


--- The members now: id -> data.
---@return table|nil members, string? err
function _M:members()
    check_self(self, "members")
    local names, err = util.children(self.client, self.path)
    if not names then
        return nil, err
    end
    return read_members(self, names)
end


-- The watch function and its state listener, made outside on_change's
-- waiting frame (in nginx a waiting coroutine may be gone, locals and all,
-- when a watch fires). A read is numbered: one overtaken by a newer
-- listing while it waited for its data is dropped (the newer one tells);
-- a listing older (pzxid) than one already taken is never read.
-- One that failed, or was in flight at a reconnect, is read again,
-- listing and all, once connected.
local function members_watcher(self, fn)
    local client = self.client
    local seq, owed, zxid = 0, false, -1
    local function load(names, stat)
        local z = stat and stat.pzxid or -1      -- no stat: no parent, no members
        if stat and z < zxid then
            return
        end
        zxid = z
        seq = seq + 1
        local mine = seq
        owed = true    -- until read: a reconnect meanwhile reads again (ours may fail)
        local members, rerr = read_members(self, names)
        if mine ~= seq then
            return
        end
        owed = not members
        if members then
            util.call(client, fn, "group on_change", members)
        else
            client:log("warn", "group " .. self.path .. ": members not read ("
                       .. tostring(rerr) .. "): read again once connected")
        end
    end
    local w
    local function relist(state)
        if state ~= "connected" or not owed or not (w and w:is_active()) then
            return
        end
        local names, stat = client:children(self.path)
        if names then
            sort(names)
            load(names, stat)
        elseif stat == "nonode" then
            load({}, nil)
        end
    end
    return function(names, stat) load(names or {}, stat) end, relist,
           function(watch) w = watch end
end


--- fn(members) now and after every membership change (id -> data), until
--- g:close(). Returns the watch (w:cancel() stops this one).
---@return table|nil w, string? err
function _M:on_change(fn)
    check_self(self, "on_change")
    util.check_fn(fn, "on_change")
    local client = self.client
    local watcher, relist, bind = members_watcher(self, fn)
    client:on_state(relist)
    local w, err = client:watch(self.path, watcher, { kind = "children" })
    if not w then
        client:remove_listener(relist)
        return nil, err
    end
    bind(w)
    self._watches[#self._watches + 1] = { w, relist }
    return w
end


--- Leaves and stops every on_change watch.
function _M:close()
    check_self(self, "close")
    for _, e in ipairs(self._watches) do
        e[1]:cancel()
        self.client:remove_listener(e[2])
    end
    self._watches = {}
    return self:leave()
end


_M.mt = mt
return _M
