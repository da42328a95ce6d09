--- zkcoord.client.paths: paths made and removed whole (client methods).
--
-- client:ensure_path(path, opts) makes a node and its missing ancestors
-- (kazoo's ensure_path, Curator's creatingParentsIfNeeded) and is
-- idempotent: a node that exists, or that someone else creates meanwhile,
-- is success. client:delete(path, { recursive = true }) removes a node and
-- everything under it, children first (kazoo's delete(recursive=True),
-- Curator's deletingChildrenIfNeeded), tolerant of others changing the
-- tree meanwhile: a node already gone is fine, a child that appears makes
-- it look again. Both are bounded by opts.timeout (default the client's
-- request timeout) and go through util.retry.
local core = require "zkcoord.core"
local _M = require "zkcoord.client.class"
local checks = require "zkcoord.client.checks"
local future = require "zkcoord.client.future"
local acl = require "zkcoord.client.acl"
local args = require "zkcoord.util.args"
local deadlines = require "zkcoord.util.deadline"
local retries = require "zkcoord.util.retry"
local contract = require "zkcoord.client.contract"

local C = core.c
local now = core.now
local ipairs, find, sub = ipairs, string.find, string.sub
local check_self, check_path, check_version = checks.check_self, checks.check_path,
                                              checks.check_version
local argerror, remaining = args.argerror, deadlines.remaining

local M = {}


-- Waits for every future of `fs`: true, or nil and the first error other
-- than `fine` (what this step counts as done: "nodeexists", "nonode").
local function all_done(fs, deadline, fine)
    local first
    for _, f in ipairs(fs) do
        local ok, err = f:wait(remaining(deadline))
        if not ok and err ~= fine then
            first = first or err
        end
    end
    if first then
        return nil, first
    end
    return true
end

local ENSURE_KEYS = { "container", "acl", "timeout" }
local ENSURE_FLAGS = { "container" }
local DELETE_KEYS = { "version", "recursive", "timeout" }
-- A boolean or nil, as create's flags: { recursive = "no" } is refused, not
-- taken for true.
local DELETE_FLAGS = { "recursive" }

-- Worth another try besides the transient errors, until the deadline: an
-- ancestor deleted between our creates (ensure_path), a child created
-- between our listing and our deletes (a recursive delete).
local ENSURE_POLICY = { max_tries = math.huge, also = { nonode = true } }
local DELETE_POLICY = { max_tries = math.huge, also = { notempty = true } }


-- One try of ensure_path: every prefix of `path` created, pipelined (one
-- round trip, parents first: a session runs its requests in order).
local function make_path(self, path, acl_entries, mode, deadline)
    local fs, pos = {}, 1
    while true do
        local s = find(path, "/", pos + 1, true)
        local p = s and sub(path, 1, s - 1) or path
        fs[#fs + 1] = self:_request(nil, "create", p, nil, acl_entries, mode)
        if not s then
            break
        end
        pos = s
    end
    return all_done(fs, deadline, "nodeexists")
end


---@class zkcoord.ensure_path_opts
---@field container boolean? the nodes made are container nodes (default persistent)
---@field acl any? the ACL of the nodes made (as create's; default the client's)
---@field timeout number? seconds in all (default the client's request timeout)

--- Makes `path` and its missing ancestors, as persistent nodes (or
--- containers, opts.container) with no data. Idempotent: true when it
--- exists, whoever made it (create() with { parents = true } answers
--- "nodeexists" for an existing node, as a create should).
---@param path string
---@param opts zkcoord.ensure_path_opts?
---@return true|nil ok, string? err
function _M:ensure_path(path, opts)
    check_self(self, "ensure_path")
    check_path(path, "ensure_path", 1)
    opts = args.check_opts(opts, ENSURE_KEYS, "ensure_path", 2)
    checks.check_flags(opts, ENSURE_FLAGS, "ensure_path", 2)    -- "no" made containers
    local acl_entries = opts.acl and acl.normalize(opts.acl, "ensure_path", 2) or self._acl
    local timeout = args.check_timeout(opts.timeout, "ensure_path", 2)
    local deadline = now() + (timeout or contract.request_timeout(self))
    if path == "/" then
        return true
    end
    -- Mostly it is there already: one read, no write.
    local st, err = contract.read_until(self, deadline, "exists", path)
    if st then
        return true
    elseif st == nil then
        return nil, err
    end
    local mode = opts.container and C.CONTAINER or C.PERSISTENT
    return retries.retry(self, deadline, ENSURE_POLICY, make_path, self, path, acl_entries,
                      mode, deadline)
end


-- `path` and every node under it, parents before children (one pipelined
-- children round trip per level). A node gone meanwhile has no children.
local function list_tree(self, path, deadline)
    local all, level = { path }, { path }
    while #level > 0 do
        local fs = {}
        for i, p in ipairs(level) do
            fs[i] = self:send("children", p)
        end
        local below = {}
        for i, f in ipairs(fs) do
            local names, err = f:wait(remaining(deadline))
            if names then
                for _, n in ipairs(names) do
                    local child = level[i] .. "/" .. n
                    below[#below + 1] = child
                    all[#all + 1] = child
                end
            elseif err ~= "nonode" then
                return nil, err
            end
        end
        level = below
    end
    return all
end


-- One try of a recursive delete: list the tree, then delete it deepest
-- first, pipelined; `version` is the top node's. "nonode" is success (gone
-- already); "notempty" (a child came) means try again.
local function delete_tree(self, path, version, deadline)
    if version ~= -1 then
        -- The wrong version deletes nothing, not the children alone.
        local st, serr = contract.read_until(self, deadline, "exists", path)
        if st == nil then
            return nil, serr
        elseif st and st.version ~= version then
            return nil, "badversion"
        end
    end
    local all, err = list_tree(self, path, deadline)
    if not all then
        return nil, err
    end
    local fs = {}
    for i = #all, 1, -1 do
        fs[#fs + 1] = self:_request(nil, "delete", all[i], i == 1 and version or -1)
    end
    return all_done(fs, deadline, "nonode")
end


-- send.delete's options form: delete(path, { version =, recursive =,
-- timeout = }). Contract for zkcoord.client.ops (not a client method).
function M.send_delete(self, path, opts)
    check_path(path, "delete", 1)
    opts = args.check_opts(opts, DELETE_KEYS, "delete", 2)
    checks.check_flags(opts, DELETE_FLAGS, "delete", 2)
    local version = check_version(opts.version, "delete", 2)
    local timeout = args.check_timeout(opts.timeout, "delete", 2)
    if not opts.recursive then
        return self:_request(nil, "delete", path, version)
    end
    if path == "/" then
        argerror(1, "delete", "cannot delete the root recursively")
    end
    return future.composite(self, function(_, wait_timeout)
        local deadline = now() + (wait_timeout or timeout or contract.request_timeout(self))
        return retries.retry(self, deadline, DELETE_POLICY, delete_tree, self, path, version,
                          deadline)
    end)
end


return M
