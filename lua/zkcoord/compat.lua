--- zkcoord.compat: what differs between Lua 5.1, 5.2, 5.3, 5.4 and LuaJIT
-- where the library meets it. LuaJIT and 5.2+ get their own functions back.
-- @module zkcoord.compat
local select, xpcall = select, xpcall

local _M = {}

--- `table.unpack` (5.2+) or `unpack` (5.1, LuaJIT).
_M.unpack = table.unpack or unpack   -- luacheck: ignore 143 113
local unpack = _M.unpack

--- `xpcall(f, handler, ...)` that passes the arguments on every VM (Lua 5.1's
-- drops them).
_M.xpcall = xpcall
if select(2, xpcall(function(a) return a end, function(e) return e end, true)) ~= true then
    _M.xpcall = function(f, handler, ...)
        local n = select("#", ...)
        if n == 0 then
            return xpcall(f, handler)
        end
        local args = { ... }
        return xpcall(function() return f(unpack(args, 1, n)) end, handler)
    end
end

return _M
