-- zkcoord.cli.show: how the command prints values: 64-bit numbers (zxids,
-- session ids) in decimal, times in UTC ISO 8601 with milliseconds, paths
-- joined, node data with control characters escaped. Not a public API.
local _M = {}

function _M.fmt_number(x)
    if type(x) == "cdata" then
        return (tostring(x):gsub("U?LL$", ""))
    end
    return ("%.0f"):format(x)
end


function _M.utc(t)
    return os.date("!%Y-%m-%dT%H:%M:%S", math.floor(t)) .. ("%.3fZ"):format(t % 1):sub(2)
end


function _M.join(path, name)
    return (path == "/" and "" or path) .. "/" .. name
end

function _M.printable(s)
    return (s:gsub("[%c\\]", function(ch)
        if ch == "\\" then return "\\\\" end
        return ("\\x%02x"):format(ch:byte())
    end))
end

return _M
