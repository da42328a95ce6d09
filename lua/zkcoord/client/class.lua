--- zkcoord.client.class: the one client class the client/ modules add
--- methods to (internal).
--
-- Owns the method table and its metatable, and the weak set of live
-- clients. Each module of zkcoord/client/ adds the methods of one concern
-- to this table; zkcoord.client (client/init.lua) loads them all.
local setmetatable = setmetatable

local _M = { _VERSION = require("zkcoord.version") }
local mt = { __index = _M }
_M.mt = mt

-- Live clients, weakly held, so tests can find leaks (luv's LUV_HANDLES).
_M.live = setmetatable({}, { __mode = "k" })

return _M
