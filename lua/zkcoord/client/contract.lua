--- zkcoord.client.contract: what builds on a client and users do not
--- call (internal): the table the client/ modules add the contract
--- functions to (own_node, read_until, wait_state, serial ...), the
--- client's metatable and the weak set of live clients.
--
-- Recipes, waiters and the engine use it as zkcoord.contract (documented
-- there); the client's own modules and what zkcoord.client loads (util,
-- metrics) require this table, since zkcoord.contract requires zkcoord.client.
local setmetatable = setmetatable

local methods = require "zkcoord.client.class"

local _M = { _VERSION = require("zkcoord.version") }

-- The metatable of every client: its methods are the class's.
_M.mt = { __index = methods }

-- Live clients, weakly held, so tests can find leaks (luv's LUV_HANDLES).
_M.live = setmetatable({}, { __mode = "k" })

return _M
