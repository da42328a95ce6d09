--- zkcoord.rwlock: a fair, herd-free, reentrant read-write lock.
--
--   local rw = client:rwlock("/locks/table")
--   local r = rw:read_lock()             -- many readers at once
--   local w = rw:write_lock()            -- one writer, and no reader
--   assert(r:acquire(5)) ... r:release()
--
-- Both are zkcoord.lock objects (acquire, release, held, token, count,
-- node, on_lost, run) over one line of ephemeral-sequential nodes under <path>,
-- so grants follow arrival order: a reader behind a waiting writer waits.
--
-- Algorithm (ZooKeeper's shared-lock recipe: two zkcoord.lock objects
-- over one zkcoord.line, each with its driver):
--   - a reader is through when no WRITE node is below its own; it watches
--     the last write node below it (the one that must go last);
--   - a writer is through when it is first; it watches the node just
--     below its own. A release wakes one waiter, or the readers behind
--     one writer, never the herd.
--
-- Node layout: <path>/_c_<uuid>-__READ__<seq> and <path>/_c_<uuid>-__WRIT__<seq>,
-- Curator's InterProcessReadWriteLock names, so Java services using
-- Curator on the same path take part in the same line (Curator sorts by the
-- number after the last "__READ__"/"__WRIT__", as we do). Other children of
-- <path> are ignored. opts.layout = "kazoo" names them as kazoo's ReadLock
-- and WriteLock do instead (zkcoord.layout.kazoo): <uuid hex>__rlock__<seq>
-- and <uuid hex>__lock__<seq>, a downgrade node <uuid hex>downgrade-__rlock__<seq>.
--
-- Reentrancy and owners as in zkcoord.lock (an owner is the running
-- coroutine, or opts.owner), on both sides. Downgrade and the upgrade check
-- know the holds of this rwlock object only: use one object per path and
-- process (two objects are two strangers, like two Curator instances).
--
-- Downgrade: an owner holding the write lock may take the read lock at once
-- (Curator allows it too), then release the write lock and keep reading.
-- NOTE: that read node is named _c_<uuid>-downgrade-__READ__<seq>. Its
-- number is above any writer that queued meanwhile, so by number alone that
-- writer would be first once our write node goes, and would write while we
-- read (Curator's InterProcessReadWriteLock has exactly this hole). Our
-- writers treat a downgrade node as if it stood where the write node was:
-- a first writer waits (watching it) until no downgrade node is left. For
-- Curator the name is a plain read node. Only the write holder creates one,
-- so at most one exists, and waiting writers see it before the write node
-- goes (the same session creates it before it deletes the write node).
--
-- Upgrade (read -> write) is refused with an error: two readers who both
-- upgrade would each wait for the other forever.
--
-- Cohort (opts.cohort = true, zkcoord.cohort): the readers of one client
-- share one read node, joining it without a request within the bound;
-- writers are not cohorted (see the README's rwlock section).
--
-- Connection loss ("suspended"): held locks stay held; the session may
-- still be alive. Session loss ("lost", or suspended for longer than the
-- session timeout), or our node deleted by someone else: held() turns false
-- at once and on_lost callbacks run, for each lock object separately.
local lock = require "zkcoord.lock"
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"
local util = require "zkcoord.util"
local cohort = require "zkcoord.cohort"
local kazoo = require "zkcoord.layout.kazoo"

local type, setmetatable = type, setmetatable

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }

local OPT_KEYS = { "owner", "data", "cohort", "cohort_handoffs", "cohort_time", "layout" }

local UPGRADE_MSG = "cannot upgrade a read lock to a write lock: release the read lock first"


-- The drivers of one layout's names { read =, write =, downgrade =,
-- parents =, prefix = }: a writer is through when first and no downgraded reader is
-- left (see the header), watching its predecessor or that reader; a
-- reader when no write node is below its own, watching the last one
-- (readers behind a writer all wait for that one). The reader's rule is
-- the built-in itself, so the engine answers it in one pass over the
-- listing (zkcoord.line.rules' scans). `downgrade(writing)` makes the
-- downgrade driver of one rwlock: through at once while its owner holds
-- the write lock (writing() is true), else as a reader.
local function drivers_of(names)
    -- Longest first: a name takes the first marker of the list it ends with.
    local markers = { names.downgrade, names.read, names.write }
    local below_write = rules.none_below(names.write)
    local read = line.driver { marker = names.read, markers = markers, rule = below_write,
                               parents = names.parents, prefix = names.prefix }
    cohort.shared(read)    -- with opts.cohort, a process's readers share a node
    return {
        write = line.driver { marker = names.write, markers = markers, parents = names.parents,
                              prefix = names.prefix,
                              rule = rules.first_none_above(names.downgrade) },
        read = read,
        downgrade = function(writing)
            return line.driver { marker = names.downgrade, markers = markers, prefix = names.prefix,
                                 parents = names.parents, rule = function(entries, me, q)
                if writing() then
                    return true
                end
                return below_write(entries, me, q)
            end }
        end,
    }
end

-- By opts.layout: Curator's InterProcessReadWriteLock names, or kazoo's.
local LAYOUTS = {
    curator = drivers_of { read = "__READ__", write = "__WRIT__", downgrade = "downgrade-__READ__" },
    kazoo = drivers_of(kazoo.rwlock),
}


---@class zkcoord.rwlock_opts
---@field owner any?    fixed owner token (default: the running coroutine)
---@field data string?  data of our lock nodes (who holds them, for humans)
---@field cohort boolean? default false; true: this process's readers share one read node (zkcoord.cohort)
---@field cohort_handoffs integer? readers joining a read node while a node waits behind it (16)
---@field cohort_time number? seconds readers join a read node while a node waits behind it (0.01)
---@field layout "curator"|"kazoo"|nil node names: Curator's (default) or kazoo's ReadLock/WriteLock

--- client:rwlock(path, opts) -> read-write lock (no server state until an acquire).
---@param client table a zkcoord client
---@param path string the lock's parent node
---@param opts zkcoord.rwlock_opts?
---@return table rwlock
function _M.new(client, path, opts)
    opts = util.check_opts(opts, OPT_KEYS, "rwlock", 2)
    if opts.data ~= nil and type(opts.data) ~= "string" then
        util.argerror(2, "rwlock", "data must be a string")
    end
    client.check_path(path, "rwlock", 1)
    cohort.check_opts(opts, "rwlock")
    local drivers = LAYOUTS[util.check_layout(opts.layout, "rwlock", 2)]
    local lopts = { owner = opts.owner, data = opts.data }
    local wl, rl
    -- The pick hooks run in acquire() (lock.lua) when an owner joins, with
    -- that owner current: held() is about it.
    local downgrade = drivers.downgrade(function() return wl:held() end)
    wl = lock.new(client, path, lopts, drivers.write, function()
        if rl:held() then
            util.raise(UPGRADE_MSG)    -- blames the caller of acquire or run
        end
    end)
    -- Only the readers share (a writer of this process queues as a remote
    -- one): a downgrade node must not see the write node handed on.
    local ropts = { owner = opts.owner, data = opts.data, cohort = opts.cohort,
                    cohort_handoffs = opts.cohort_handoffs, cohort_time = opts.cohort_time }
    rl = lock.new(client, path, ropts, drivers.read, function()
        return wl:held() and downgrade or nil
    end)
    return setmetatable({ client = client, path = path, _read = rl, _write = wl }, mt)
end


local check_self = util.self_checker(mt, "rwlock", "rw")


--- The shared side: held by many owners at once, never with a writer.
--- Always the same object for this rwlock.
---@return table lock a zkcoord.lock (acquire, release, held, token, count, node, on_lost, run)
function _M:read_lock()
    check_self(self, "read_lock")
    return self._read
end


--- The exclusive side: one owner, no reader.
--- Always the same object for this rwlock.
---@return table lock a zkcoord.lock; acquire() raises if the owner holds the read lock
function _M:write_lock()
    check_self(self, "write_lock")
    return self._write
end


--- The participants in line order (holders first), each
--- { name =, path =, seq =, marker = "__READ__" | "__WRIT__" | "downgrade-__READ__" }.
---@return table[]|nil entries, string? err
function _M:contenders()
    check_self(self, "contenders")
    return self._write:contenders()
end


_M.mt = mt
return _M
