-- zkcoord.cli.args: reading the command line: options (long, short,
-- --name=value), the PATH operand, the number of operands a verb takes. A
-- mistake ends the command with the verb's help (status 64). Not a public
-- API.
local help = require "zkcoord.cli.help"
local ex = require "zkcoord.cli.exit"

local exit, usage = ex.exit, ex.usage

local _M = {}

-- spec: option name -> "flag" | "number" | "string" (long: "--x", short: "-x").
-- Parses options up to the first operand (or "--"); returns opts, index of the
-- first operand. --help anywhere among the options asks for help.
function _M.parse_opts(verb, args, i, spec)
    local o = {}
    while i <= #args do
        local a = args[i]
        if a == "--" then
            return o, i + 1, true
        elseif a == "--help" or a == "-h" then
            io.stdout:write(help.HELP[verb] or help.USAGE)
            exit(ex.OK)
        elseif a:sub(1, 2) == "--" then
            local name, value = a:match("^%-%-([^=]+)=(.*)$")
            name = name or a:sub(3)
            local kind = spec["--" .. name]
            if not kind then
                usage(verb, "zkcoord: unknown option --" .. name)
            end
            local key = name:gsub("%-", "_")
            if kind == "flag" then
                if value then usage(verb, "zkcoord: --" .. name .. " takes no value") end
                o[key] = true
            else
                if not value then
                    i = i + 1
                    value = args[i]
                    if value == nil then
                        usage(verb, "zkcoord: --" .. name .. " needs a value")
                    end
                end
                if kind == "number" then
                    local n = tonumber(value)
                    if not n or n ~= n or n < 0 or n == math.huge then
                        usage(verb, "zkcoord: --" .. name .. " needs a number of seconds >= 0, got '"
                                    .. value .. "'")
                    end
                    value = n
                end
                o[key] = value
            end
        elseif a:match("^%-%a+$") then
            for ch in a:sub(2):gmatch(".") do
                local kind = spec["-" .. ch]
                if kind ~= "flag" then
                    usage(verb, "zkcoord: unknown option -" .. ch)
                end
                o[ch] = true
            end
        else
            return o, i, false
        end
        i = i + 1
    end
    return o, i, false
end


function _M.check_path(verb, path)
    if type(path) ~= "string" or path:sub(1, 1) ~= "/" or (path ~= "/" and path:sub(-1) == "/")
            or path:find("//", 1, true) or path:find("%z") then
        usage(verb, "zkcoord: " .. verb .. ": PATH must be an absolute ZooKeeper path, got "
                    .. (path and ("'" .. path .. "'") or "none"))
    end
    return path
end


-- Exactly the operands a verb takes (after its options).
function _M.operands(verb, args, i, min, max)
    local n = #args - i + 1
    if n < min or n > max then
        usage(verb, ("zkcoord: %s takes %s operand%s, got %d"):format(verb,
              min == max and tostring(min) or (min .. " to " .. max), max == 1 and "" or "s", n))
    end
    local out = {}
    for k = i, #args do out[#out + 1] = args[k] end
    return out
end

return _M
