-- helpers.options: the one command-line parser of the tools (tools/) and the
-- benchmarks (bench/). Both put spec/ on package.path, so both require it as
-- "helpers.options".
--
--   local options = require "helpers.options"
--   local opts, rest = options.parse(arg, {
--       name = "fuzz.lua",                          -- prefixes error messages
--       usage = "usage: luajit tools/fuzz.lua ...", -- printed on -h and on an error
--       status = 2,                                 -- exit status on an error (default 2)
--       positional = 0,                             -- operands allowed (default 0)
--       defaults = { batch = 40 },
--       options = {
--           ["--seconds"] = "number",               -- opts.seconds = tonumber(next)
--           ["--servers"] = "string",               -- opts.servers = next
--           ["--verbose"] = "flag",                 -- opts.verbose = true
--           ["--no-known"] = { "flag", key = "match_known", value = false },
--           ["--sizes"] = options.numbers,          -- a function: text -> value or nil, why
--       },
--   })
--
-- A key defaults to the option's name without "--", dashes made underscores
-- ("--known-bugs" -> known_bugs). Every value an option takes is the next
-- argument; "-h" and "--help" print the usage and exit 0. Anything else
-- (an unknown option, a missing or malformed value, too many operands)
-- prints "<name>: <why>" and the usage to stderr and exits with `status`.
-- Operands (arguments not starting with "-") come back in `rest`, in order.
--
-- options.numbers is the converter for a comma-separated list of numbers
-- ("1000,10000" -> { 1000, 10000 }), for options that take sizes or counts.
-- options.fail(spec, why) ends the script the way a bad argument does, for
-- what only the script can check after parse (an operand's value).
local _M = {}

local function key_of(name)
    return (name:gsub("^%-%-", ""):gsub("-", "_"))
end

local CONVERT = {
    number = function(v)
        local n = tonumber(v)
        if n == nil then
            return nil, "needs a number"
        end
        return n
    end,
    string = function(v)
        return v
    end,
}

--- Converts "1,16,64" to { 1, 16, 64 }; nil and the reason when an item
--- is not a number or the list is empty.
function _M.numbers(text)
    local list = {}
    for item in (text .. ","):gmatch("([^,]*),") do
        local n = tonumber(item)
        if n == nil then
            return nil, "needs numbers separated by commas"
        end
        list[#list + 1] = n
    end
    return list
end

local function fail(spec, msg)
    io.stderr:write(spec.name or "", spec.name and ": " or "", msg, "\n", spec.usage or "", "\n")
    os.exit(spec.status or 2)
end
_M.fail = fail

-- The option's kind (a CONVERT name, "flag" or a function), key and flag value.
local function describe(name, d)
    if type(d) ~= "table" then
        d = { d }
    end
    return d[1], d.key or key_of(name), d.value == nil and true or d.value
end

--- Parses `args` (a script's `arg`) by `spec`; see the header. Returns the
--- options table (`spec.defaults` copied, then what the arguments set) and
--- the list of operands.
function _M.parse(args, spec)
    local opts, rest = {}, {}
    for k, v in pairs(spec.defaults or {}) do
        opts[k] = v
    end
    local i = 1
    while args and args[i] ~= nil do
        local a = args[i]
        local d = spec.options and spec.options[a]
        if a == "-h" or a == "--help" then
            io.stderr:write(spec.usage or "", "\n")
            os.exit(0)
        elseif d then
            local kind, key, flag = describe(a, d)
            if kind == "flag" then
                opts[key] = flag
            else
                i = i + 1
                local text = args[i]
                if text == nil then
                    fail(spec, a .. " needs a value")
                end
                local convert = type(kind) == "function" and kind or CONVERT[kind]
                local v, why = convert(text)
                if v == nil then
                    fail(spec, a .. " " .. (why or "has a bad value"))
                end
                opts[key] = v
            end
        elseif a:sub(1, 1) ~= "-" and #rest < (spec.positional or 0) then
            rest[#rest + 1] = a
        else
            fail(spec, "unknown argument " .. a)
        end
        i = i + 1
    end
    return opts, rest
end

return _M
