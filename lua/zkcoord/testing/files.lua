--- zkcoord.testing.files: the files, temp dirs and /proc reads of
--- zkcoord.testing, in plain Lua and the shell (any Lua, no core: the
--- proxy's process loads it too). Runtime failures return nil, err; bad
--- arguments raise.
local _M = {}

--- `s` quoted for sh.
local function shquote(s)
    s = tostring(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end
_M.shquote = shquote


--- Runs a shell command: did it succeed? (os.execute returns 0 on Lua 5.1,
--- true on 5.2 and later.)
local function execute_ok(cmd)
    local r = os.execute(cmd)
    return r == 0 or r == true
end
_M.execute_ok = execute_ok


-- This process's pid (/proc/self is the reader: this process).
local function self_pid()
    local f = io.open("/proc/self/stat", "r")
    local pid = f and (f:read("*l") or ""):match("^(%d+)")
    if f then f:close() end
    return pid or "0"
end


--- One-letter state from /proc/<pid>/stat ("R", "S", "T", "Z", ...).
function _M.state(pid)
    assert(type(pid) == "number" and pid == math.floor(pid) and pid > 0,
        "state: pid must be an integer > 0")
    local f = io.open("/proc/" .. pid .. "/stat", "r")
    if not f then
        return nil, "no such process"
    end
    local line = f:read("*l") or ""
    f:close()
    -- comm may contain spaces and parens: the state follows the last ')'.
    return line:match("^.*%) (%a)")
end


-- Temp dirs and files --------------------------------------------------------


--- A new directory /tmp/<prefix>XXXXXX (mktemp -d), or nil, err.
function _M.mktemp_dir(prefix)
    prefix = prefix or "zkcoord-"
    assert(type(prefix) == "string" and not prefix:find("[/%c']"),
        "mktemp_dir: prefix must be a string without '/'")
    local tmpl = "/tmp/" .. prefix .. "XXXXXX"
    local f = io.popen("mktemp -d " .. shquote(tmpl) .. " 2>&1")
    local out = f and f:read("*a") or ""
    if f then f:close() end
    local dir = out:match("^(/tmp/[^\n]+)\n?$")
    if not dir then
        return nil, "mktemp -d " .. tmpl .. ": " .. out
    end
    return dir
end


--- rm -rf, only for a path under /tmp/.
function _M.rm_rf(dir)
    if type(dir) ~= "string" or not dir:match("^/tmp/[^/]") or dir:find("%.%.")
            or dir:find("[%c]") then
        error("rm_rf: refusing to remove " .. tostring(dir)
            .. " (only paths under /tmp/)", 2)
    end
    if not execute_ok("rm -rf -- " .. shquote(dir)) then
        return nil, "rm -rf " .. dir .. " failed"
    end
    return true
end


function _M.mkdir_p(path)
    assert(type(path) == "string" and path ~= "", "mkdir_p: path must be a string")
    if not execute_ok("mkdir -p -- " .. shquote(path)) then
        return nil, "mkdir -p " .. path .. " failed"
    end
    return true
end


function _M.write_file(path, text)
    local f, err = io.open(path, "w")
    if not f then
        return nil, err
    end
    local ok, werr = f:write(text)
    f:close()
    if not ok then
        return nil, werr
    end
    return true
end


--- Write then rename, so readers never see a half-written file.
function _M.write_file_atomic(path, text)
    local tmp = path .. ".tmp" .. self_pid()
    local ok, err = _M.write_file(tmp, text)
    if not ok then
        return nil, err
    end
    local rok, rerr = os.rename(tmp, path)
    if not rok then
        os.remove(tmp)
        return nil, rerr
    end
    return true
end


function _M.file_exists(path)
    local f = io.open(path, "r")
    if f then
        f:close()
        return true
    end
    return false
end


function _M.read_file(path)
    local f, err = io.open(path, "r")
    if not f then
        return nil, err
    end
    local text = f:read("*a")
    f:close()
    return text
end

return _M
