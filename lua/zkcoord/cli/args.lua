-- zkcoord.cli.args: reading the command line: options (long, short,
-- --name=value), the PATH operand, the number of operands a verb takes. A
-- mistake ends the command with one line and a pointer to the verb's help
-- (status 64). Not a public API.
local help = require "zkcoord.cli.help"
local ex = require "zkcoord.cli.exit"

local VERSION = require "zkcoord.version"
local checks = require "zkcoord.client.checks"

local exit, usage = ex.exit, ex.usage

local _M = {}

-- `value` as option `name` of `kind` takes it ("number": seconds >= 0;
-- "code": an exit status 0-255; "string").
local function convert(verb, name, kind, value)
    if kind == "number" then
        local n = tonumber(value)
        if not n or n ~= n or n < 0 or n == math.huge then
            usage(verb, "zkcoord: " .. name .. " needs a number of seconds >= 0, got '" .. value .. "'")
        end
        return n
    elseif kind == "code" then
        local n = value:match("^%d+$") and tonumber(value)
        if not n or n > 255 then
            usage(verb, "zkcoord: " .. name .. " needs an exit status 0-255, got '" .. value .. "'")
        end
        return n
    end
    return value
end

-- The value of option `name`: `value` (joined to it: --x=V, -xV), else
-- args[i + 1]. Returns it and the index of the last argument used.
local function value_of(verb, name, kind, value, args, i)
    if value == nil then
        i = i + 1
        value = args[i]
        if value == nil then
            usage(verb, "zkcoord: " .. name .. " needs a value")
        end
    end
    return convert(verb, name, kind, value), i
end

-- spec: option name -> "flag" | "number" | "code" | "string" (long: "--x",
-- short: "-x"; short ones cluster, -nx, and take a value joined, -w5, or
-- next, -w 5). Parses options up to the first operand (or "--"); returns
-- opts, index of the first operand. --help (-h) and --version (-V) among
-- the options print and end the command.
function _M.parse_opts(verb, args, i, spec)
    local o = {}
    while i <= #args do
        local a = args[i]
        if a == "--" then
            return o, i + 1, true
        elseif a == "--help" or a == "-h" then
            io.stdout:write(help.HELP[verb] or help.USAGE)
            exit(ex.OK)
        elseif a == "--version" or a == "-V" then
            io.stdout:write("zkcoord ", VERSION, "\n")
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
                o[key], i = value_of(verb, "--" .. name, kind, value, args, i)
            end
        elseif a:match("^%-%a") then
            local k = 2
            while k <= #a do
                local ch = a:sub(k, k)
                local kind = spec["-" .. ch]
                if not kind then
                    usage(verb, "zkcoord: unknown option -" .. ch)
                end
                if kind == "flag" then
                    o[ch] = true
                    k = k + 1
                else
                    local joined = a:sub(k + 1)
                    o[ch], i = value_of(verb, "-" .. ch, kind, joined ~= "" and joined or nil, args, i)
                    break
                end
            end
        else
            return o, i, false
        end
        i = i + 1
    end
    return o, i, false
end


-- PATH must be a path the library takes: its checker (one place) says
-- what is wrong.
function _M.check_path(verb, path)
    if path == nil then
        usage(verb, "zkcoord: " .. verb .. ": no PATH given")
    end
    local ok, err = pcall(checks.check_path, path, verb, 1)
    if not ok then
        usage(verb, "zkcoord: " .. verb .. ": "
                    .. tostring(err):match("%((.*)%)$"):gsub("^path ", "PATH ", 1))
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
