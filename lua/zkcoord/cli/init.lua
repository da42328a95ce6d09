--- zkcoord.cli: the `zkcoord` command (bin/zkcoord): a distributed flock for
--- any program, leader-only commands, and the everyday ZooKeeper verbs.
--
--   local code = require("zkcoord.cli").main(arg)   -- returns the exit status
--
-- Exit statuses (sysexits): 0 success; CMD's own status for lock/elect/once (a
-- signal death as 128+N, as a shell gives it); 1 a runtime failure (the
-- message names the ZooKeeper code); 64 bad usage; 69 no server reachable
-- within the connect timeout; 71 the lock or leadership was lost while CMD
-- ran; 75 the lock (or leadership) was not acquired within --timeout.

-- This module reads the global options and dispatches to the verb; the
-- parts (lua/zkcoord/cli/): help.lua the help texts; exit.lua exit
-- statuses and messages; args.lua options and operands; session.lua the
-- client; show.lua printing values; held.lua lock, elect and once;
-- once.lua once's record of the last run; locks.lua
-- the locks verb; verbs.lua the other verbs; sys.lua signals and processes
-- (over the core's process calls: any Lua, no FFI).
local help = require "zkcoord.cli.help"
local ex = require "zkcoord.cli.exit"
local args_mod = require "zkcoord.cli.args"
local session = require "zkcoord.cli.session"
local held = require "zkcoord.cli.held"
local locks = require "zkcoord.cli.locks"
local verbs = require "zkcoord.cli.verbs"

local _M = { _VERSION = require("zkcoord.version") }

_M.EX = { OK = ex.OK, FAIL = ex.FAIL, USAGE = ex.USAGE, UNAVAILABLE = ex.UNAVAILABLE,
          SOFTWARE = ex.SOFTWARE, OSERR = ex.OSERR, TEMPFAIL = ex.TEMPFAIL }
_M.describe = ex.describe
_M.classify = locks.classify

local usage = ex.usage

local VERBS = { lock = held.verb, elect = held.verb, once = held.verb }
for _, v in ipairs(verbs.NAMES) do
    VERBS[v] = verbs.verb
end

local GLOBAL = { ["--servers"] = "string", ["--session-timeout"] = "number",
                 ["--connect-timeout"] = "number", ["--chroot"] = "string",
                 ["--auth"] = "string",
                 ["--tls-ca"] = "string", ["--tls-cert"] = "string", ["--tls-key"] = "string",
                 ["--sasl-mechanism"] = "string", ["--sasl-user"] = "string",
                 ["--sasl-password-file"] = "string" }

local function run(args)
    local g, i = args_mod.parse_opts(nil, args, 1, GLOBAL)
    local verb = args[i]
    if not verb then
        usage(nil, "zkcoord: no verb given")
    end
    if verb == "help" then
        local topic = args[i + 1]
        io.stdout:write(help.HELP[topic] or help.USAGE)
        return (topic == nil or help.HELP[topic]) and ex.OK or ex.USAGE
    end
    local fn = VERBS[verb]
    if not fn then
        usage(nil, "zkcoord: unknown verb '" .. verb .. "'")
    end
    if g.servers and not g.servers:find("%S") then
        usage(nil, "zkcoord: --servers needs host:port[,host:port...]")
    end
    g.servers = g.servers or os.getenv("ZKCOORD_SERVERS")
    if not g.servers or g.servers == "" then
        g.servers = "127.0.0.1:2181"
    end
    if g.chroot then
        args_mod.check_path(verb, g.chroot)
    end
    return fn(g, verb, args, i + 1)
end


--- Runs the command with `args` (an array of strings); returns the exit
--- status. Messages go to stderr, results to stdout.
function _M.main(args)
    -- (Lua 5.1's xpcall passes no arguments)
    local ok, res = xpcall(function() return run(args) end, function(e)
        if ex.is_exit(e) then
            return e
        end
        return debug.traceback(tostring(e), 2)
    end)
    session.close_all()
    if ok then
        io.stdout:flush()
        return res or ex.OK
    end
    if ex.is_exit(res) then
        if res.msg then
            io.stderr:write(res.code == ex.USAGE and "" or "zkcoord: ", res.msg,
                            res.msg:sub(-1) == "\n" and "" or "\n")
        end
        io.stdout:flush()
        return res.code
    end
    io.stderr:write("zkcoord: internal error: ", tostring(res), "\n")
    return ex.SOFTWARE
end


return _M
