--- zkcoord.client.class: the one client class the client/ modules add
--- methods to (internal).
--
-- Owns the method table: the client's public methods (and its own `_`
-- ones). Each module of zkcoord/client/ adds the methods of one concern to
-- this table; zkcoord.client (client/init.lua) loads them all. What builds
-- on a client (its metatable, the contract methods) is in
-- zkcoord.client.contract, so that a client shows users only their API.
local _M = { _VERSION = require("zkcoord.version") }

return _M
