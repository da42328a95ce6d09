-- zkcoord.cli.exit: how the command ends and what it says: the exit
-- statuses (sysexits), an Exit raised with error() that main() turns into
-- a message and a status, the wording of ZooKeeper codes, and notes on
-- stderr. Not a public API.
local zkcoord = require "zkcoord"
local core = require "zkcoord.core"
local help = require "zkcoord.cli.help"

local _M = {}

_M.OK, _M.FAIL, _M.USAGE, _M.UNAVAILABLE, _M.SOFTWARE, _M.OSERR, _M.TEMPFAIL =
    0, 1, 64, 69, 70, 71, 75

-- Raised with error(); main() turns it into a message and an exit status.
local Exit = {}
Exit.__index = Exit

function _M.is_exit(e)
    return getmetatable(e) == Exit
end

-- Ends the command with status `code` and message `msg` (may be nil).
function _M.exit(code, msg)
    error(setmetatable({ code = code, msg = msg }, Exit), 0)
end
local exit = _M.exit

-- Bad usage: `msg` (one line) and where the help is.
function _M.usage(verb, msg)
    exit(_M.USAGE, (msg and msg .. "\n" or "")
                   .. (help.HELP[verb] and ("see 'zkcoord " .. verb .. " --help'")
                       or "see 'zkcoord --help'"))
end

local RC = {}
for rc, name in pairs(core.codes) do
    RC[name] = rc
end

-- "nonode (ZNONODE -101): detail", or our own code with its meaning.
function _M.describe(err, detail)
    local s = tostring(err)
    local rc = RC[err]
    if rc and rc ~= 0 then
        s = s .. " (Z" .. s:upper() .. " " .. rc .. ")"
    elseif zkcoord.errors.own[err] then
        s = s .. " (" .. zkcoord.errors.own[err] .. ")"
    end
    if detail ~= nil and detail ~= "" then
        s = s .. ": " .. tostring(detail)
    end
    return s
end

-- A runtime failure of `what`.
function _M.fail(what, err, detail)
    exit(_M.FAIL, what .. ": " .. _M.describe(err, detail))
end

function _M.note(msg)
    io.stderr:write("zkcoord: ", msg, "\n")
    io.stderr:flush()
end

return _M
