--- zkcoord.util.ids: default ids (internal).
local pcall, require, tonumber, tostring = pcall, require, tonumber, tostring

local _M = { _VERSION = require("zkcoord.version") }

-- libc's getpid and gethostname through the FFI, declared once (each
-- declaration of one already declared raises, and a lock object asks for
-- an id: 5-30 µs a call when each call declared them again); nil without
-- the FFI.
local getpid, gethostname
do
    local ok, lib = pcall(require, "ffi")
    if ok then
        -- Separate cdefs: another module may have declared one of them already.
        pcall(lib.cdef, "int getpid(void);")
        pcall(lib.cdef, "int gethostname(char *name, size_t len);")
        local okp = pcall(function() return lib.C.getpid end)
        local okh = pcall(function() return lib.C.gethostname end)
        getpid = okp and function() return tonumber(lib.C.getpid()) end or nil
        gethostname = okh and function()
            local buf = lib.new("char[256]")
            if lib.C.gethostname(buf, 255) == 0 then
                return lib.string(buf)
            end
        end or nil
    end
end

-- The id made last, and the process it was made in: a forked worker
-- makes its own (a host renamed meanwhile shows in new processes only).
local made_pid, made_id


--- "<hostname>:<pid>": the default id of a participant (its node's data);
--- Curator's participant id is a free string too.
function _M.default_id()
    local pid = getpid and getpid()
    if pid and pid == made_pid then
        return made_id
    end
    local host = gethostname and gethostname()
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
    local id = host .. ":" .. tostring(pid)
    if getpid then
        made_pid, made_id = pid, id
    end
    return id
end


return _M
