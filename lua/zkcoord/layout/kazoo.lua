--- zkcoord.layout.kazoo: kazoo's node names for the lock family (internal).
--
-- The recipes' `layout = "kazoo"` picks these drivers instead of Curator's,
-- so a Python service using kazoo on the same path takes part in the same
-- line (kazoo 2.8's recipe/lock.py and election.py):
--
-- * Lock, WriteLock: "<uuid>__lock__<seq>"; ReadLock: "<uuid>__rlock__<seq>";
--   data = the identifier. kazoo finds contenders by the regex
--   "(__lock__|__rlock__)(-?\d{10})$" anywhere in a name and sorts them by
--   that sequence number; a reader waits for a "__lock__" below it, a
--   writer for any node below it, a Lock for "__lock__" nodes only.
-- * Election: a Lock whose data is the identifier (contenders() lists it).
-- * Semaphore: <path> holds max_leases as text; a Lock at "<path>-__lock__"
--   lets one contender at a time count the children of <path> and create
--   its lease "<path>/<uuid hex>" while fewer than max_leases are there
--   (zkcoord.layout.kazoo_lease).
-- * Group: kazoo's ShallowParty, "<path>/<uuid hex>-<identifier>" (the id
--   in the name, the member's data in the node). kazoo's Party keeps the
--   identifier as the data of "<uuid>__party__" and so has no place for a
--   member's data besides its id: not a layout of ours.
--
-- Our names are kazoo's, byte for byte: "<uuid hex>__lock__<seq>" (32
-- lowercase hex digits, kazoo's uuid4().hex), the drivers' prefix hook
-- (zkcoord.line.driver) in place of the engine's default "_c_<uuid>-".
-- After a lost create reply the engine finds our node as kazoo finds its
-- own: the child whose name starts with "<uuid hex>__lock__" (the name the
-- create sent). Parents are persistent nodes, as kazoo's ensure_path makes
-- them: kazoo creates its node under a parent it made sure of once, and a
-- container parent the server removed meanwhile would fail that create.
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"
local uuid = require("zkcoord.core").uuid

local gsub, find, sub = string.gsub, string.find, string.sub

local _M = {}

_M.LOCK = "__lock__"
_M.READ = "__rlock__"
-- Our downgraded reader (zkcoord.rwlock's header): a plain reader to kazoo.
_M.DOWNGRADE = "downgrade-__rlock__"

--- The name part before the marker: a uuid's 32 hex digits (kazoo's
--- uuid.uuid4().hex), the drivers' `prefix`.
function _M.prefix(id)
    return (gsub(id, "%-", ""))
end

--- Lock (and Election, and the Semaphore's lock): through when first.
_M.lock = line.driver { marker = _M.LOCK, rule = rules.first, parents = "persistent",
                        prefix = _M.prefix }

--- The rwlock's names (zkcoord.rwlock builds its drivers from them), the
--- parents its drivers make and their prefix.
_M.rwlock = { read = _M.READ, write = _M.LOCK, downgrade = _M.DOWNGRADE,
              parents = "persistent", prefix = _M.prefix }

--- Group (kazoo's ShallowParty): our member node "<path>/<uuid hex>-<id>",
--- and the id in a member's name: what follows the first "-" (kazoo's
--- child[child.find('-') + 1:]). Every child of <path> is a member.
function _M.party_node(path, id)
    return (path == "/" and "" or path) .. "/" .. _M.prefix(uuid()) .. "-" .. id
end

function _M.party_id(name)
    local dash = find(name, "-", 1, true)
    return dash and sub(name, dash + 1) or name
end


--- The semaphore's lock line: a sibling of <path>, as kazoo names it.
function _M.semaphore_lock_path(path)
    return path .. "-" .. _M.LOCK
end

return _M
