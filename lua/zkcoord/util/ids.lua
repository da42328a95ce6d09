--- zkcoord.util.ids: default ids (internal).
local pcall, require, tonumber, tostring = pcall, require, tonumber, tostring

local _M = { _VERSION = require("zkcoord.version") }


--- "<hostname>:<pid>": the default id of a participant (its node's data);
--- Curator's participant id is a free string too.
function _M.default_id()
    local host, pid
    local ok, ffi = pcall(require, "ffi")
    if ok then
        -- Separate cdefs: another module may have declared one of them already.
        pcall(ffi.cdef, "int getpid(void);")
        pcall(ffi.cdef, "int gethostname(char *name, size_t len);")
        local okp, p = pcall(function() return ffi.C.getpid() end)
        pid = okp and tonumber(p) or nil
        local buf = ffi.new("char[256]")
        if pcall(function() return ffi.C.gethostname(buf, 255) end) then
            host = ffi.string(buf)
        end
    end
    if not host or host == "" then
        local f = io.open("/proc/sys/kernel/hostname")
        host = f and f:read("*l") or "localhost"
        if f then f:close() end
    end
    if not pid then
        local f = io.open("/proc/self/stat")
        pid = f and tonumber((f:read("*l") or ""):match("^(%d+)")) or 0
        if f then f:close() end
    end
    return host .. ":" .. tostring(pid)
end


return _M

