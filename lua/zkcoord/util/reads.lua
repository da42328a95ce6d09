--- zkcoord.util.reads: reads every recipe makes the same way (internal).
local ipairs = ipairs

local _M = { _VERSION = require("zkcoord.version") }


--- The children of `path` (one round trip); a missing `path` lists as
--- empty, since a recipe's parent node appears with its first member.
---@return string[]|nil names, string? err
function _M.children(client, path)
    local names, err = client:children(path)
    if not names and err == "nonode" then
        return {}
    end
    return names, err
end


--- The data of the nodes at `paths` that answer, in order, read in one
--- pipelined round trip; a node that is gone meanwhile is skipped.
---@return string[] data
function _M.present_data(client, paths)
    local fs, out = {}, {}
    for i, p in ipairs(paths) do
        fs[i] = client:send("get", p)
    end
    for _, f in ipairs(fs) do
        local data = f:wait()
        if data then
            out[#out + 1] = data
        end
    end
    return out
end
return _M
