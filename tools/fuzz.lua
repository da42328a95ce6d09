-- tools/fuzz.lua: random calls to every public method, checking how each ends.
--
--   luajit tools/fuzz.lua [--iterations N] [--seconds S] [--seed X] [--servers HOSTS]
--                         [--batch N] [--report FILE] [--trace FILE] [--verbose]
--                         [--known-bugs] [--no-known]
--
-- Every call (client methods, zkcoord.connect, every recipe and the methods
-- of what they return, futures, leases) gets random arguments: every Lua
-- type, paths with "..", ".", "//", a trailing "/", NUL, unicode, invalid
-- UTF-8, control characters, 2000-character and 1.1 MB names, data of 0
-- bytes to over 1 MiB (and around ZooKeeper's request limit), negative,
-- NaN, fractional, huge timeouts and versions, wrong ACLs, options tables
-- with unknown keys or wrong types, callbacks that raise, close the client
-- or call back into it, calls after close, recipes whose client was closed
-- (also while they wait), and methods called with a wrong self.
--
-- Each call runs under xpcall and is timed. Its outcome is one of:
--   ok            returned values (false and nil-only where documented)
--   err           returned nil + a known error code (errors.lua, core codes)
--   arg_error     raised a clear message: "bad argument #n to '<our function>'",
--                 "'<method>' must be called on ...", or a documented refusal
--   by_fuzzer     raised by one of the fuzzer's own callbacks or metamethods
--   known_bug     matched a bug found earlier (fuzz/known.lua): a regression
-- and, for bugs: internal (a raw "attempt to ..." error), unclear (another
-- raise), bad_code (nil + an unknown code or a non-string), nil_no_code,
-- hang (longer than the retry policy's bound, 5 x request timeout + 2 s, + slack + its own wait),
-- oracle (an ACL or data read back differs from what was written), health
-- (after a batch, a create/get/delete round trip on the main client failed).
--
-- Unbounded waits (nil or huge timeouts, huge backoff delays) are given only
-- to recipes of a "victim" client that is closed, or that is about to be
-- closed by a watch on a node a ticker process changes every 0.2 s (so the
-- wait ends with "closed"); the main client gets bounded ones only.
-- Inputs of a known hang or crash (KNOWN entries marked `avoided`) are
-- probed at start, in a child process where the probe itself could hang or
-- crash, and left out only while the bug is still there (--known-bugs: used
-- anyway). --no-known reports every bug as new, known or not.
--
-- Servers: --servers, else $ZK_HOSTS, else a private standalone server.
-- Stops after --iterations calls or --seconds (default 60 when neither is
-- given). Exit status 0 when no new bug was found. --report FILE writes the
-- counts as a Lua table (`return {...}`); --trace FILE holds the call in
-- progress (what was running if the process died or hung).
--
-- The modules (tools/fuzz/), one concern each:
--   run.lua        one run, start to end
--   state.lua      what one run shares (options, seed, clients, counts)
--   show.lua       printing values and calls, the trace file
--   values.lua     random arguments: paths, data, timeouts, ACLs, options
--   catalogue.lua  every operation fuzzed, with what it may return
--   known.lua      the bugs found so far and the probes of their fixes
--   world.lua      servers, namespace, ticker, clients and their objects
--   classify.lua   running one call and judging its outcome
--   driver.lua     choosing calls, the batches
--   report.lua     the summary and the --report file
--
-- Adding an operation: one entry in fuzz/catalogue.lua, under its object's
-- kind: `name = op(args, { nil_ok = true, yields = "kind", ... })` (the
-- options are described there). The names a clear "bad argument" may
-- carry, the methods allowed to return nil alone, the objects a call
-- yields and the coverage list all come from that table. A new kind of
-- object also gets a line in world.lua's stock(), so every run has one.
local root = (arg and arg[0] or ""):match("^(.*)/tools/[^/]*$") or "."
package.path = root .. "/spec/?.lua;" .. package.path
require("helpers.tool").paths(root)

local options = require "helpers.options"

local opts = options.parse(arg, {
    name = "fuzz.lua",
    usage = "usage: luajit tools/fuzz.lua [--iterations N] [--seconds S] [--seed X]\n"
        .. "         [--servers HOSTS] [--batch N] [--report FILE] [--trace FILE] [--verbose]"
        .. " [--known-bugs] [--no-known]",
    defaults = { batch = 40, verbose = false, known_bugs = false, match_known = true },
    options = {
        ["--iterations"] = "number", ["--seconds"] = "number", ["--seed"] = "number",
        ["--servers"] = "string", ["--batch"] = "number", ["--report"] = "string",
        ["--trace"] = "string", ["--verbose"] = "flag", ["--known-bugs"] = "flag",
        ["--no-known"] = { "flag", key = "match_known", value = false },
    },
})
if not opts.iterations and not opts.seconds then
    opts.seconds = 60
end
opts.iterations = opts.iterations or 1e9
opts.seconds = opts.seconds or 1e9

os.exit(require("fuzz.run").main(opts))
