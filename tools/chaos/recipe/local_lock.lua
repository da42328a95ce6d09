-- chaos.recipe.local_lock: the plain lock /chaos/local (no cohort) held by
-- 3 coroutines of the contender at a time: local owners with a node each,
-- in one line with the other contenders'. A waiter behind a lock of its
-- own process goes through without a request (zkcoord.line.walk's proof
-- from the release and the order of events): this run puts that handoff
-- under faults.
-- Each writes its token (the node's czxid) to the fenced resource
-- DIR/local.res in the critical section. Logged with op=locallock;
-- chaos/check/local_lock.lua: no two live holders, local ones included;
-- the accept log strictly increasing.
local cohort_lock = require "chaos.recipe.cohort_lock"

local _M = {}

_M.paths = { "/chaos/local" }
_M.held = { "/chaos/local" }
_M.weight = 2

cohort_lock.owners(_M, "/chaos/local", "locallock", "local.res", {})

return _M
