-- fuzz.run: one run of the fuzzer, start to end: seed, server and
-- namespace, the probes of known bugs, the batches until --iterations
-- calls or --seconds, the last round after close, clean-up, the report.
local zkcoord = require "zkcoord"
local rng = require "helpers.rng"
local S = require "fuzz.state"
local show = require "fuzz.show"
local known = require "fuzz.known"
local world = require "fuzz.world"
local driver = require "fuzz.driver"
local report = require "fuzz.report"

local floor = math.floor
local now = zkcoord.now

local _M = {}

local MAX_BATCHES = 1e7

--- Runs the fuzzer with the options of tools/fuzz.lua; returns the exit
--- status (0: no new bug).
function _M.main(opts)
    S.opts = opts
    -- our own generator: zkcoord reseeds math.random, and a seed must
    -- replay the same calls
    S.seed = floor(opts.seed or (os.time() % 1000000 * 1000 + floor(now() * 1000) % 1000))
    S.rng = rng.new(S.seed)
    show.trace_open()
    world.setup()
    known.probe_all()

    local t_start = now()
    local deadline = t_start + opts.seconds
    driver.start_watchdog()
    S.main = assert(world.connect_record("main", true))
    show.say(("fuzz: seed %d, namespace %s, servers %s%s"):format(S.seed, S.ns, S.hosts,
        opts.known_bugs and ", known-bug inputs included" or ""))

    local function done()
        return S.calls >= opts.iterations or now() >= deadline
    end
    while S.batch_no < MAX_BATCHES and not done() do
        driver.batch(done)
        if not opts.verbose and S.batch_no % 10 == 0 then
            show.say(("  %.0f s: %d calls, %d batches, %d bugs"):format(now() - t_start, S.calls,
                                                                       S.batch_no, #S.bug_order))
        end
    end
    local elapsed = now() - t_start

    driver.finish()
    local leftover = world.teardown()
    local nbugs = report.finish(elapsed, leftover)
    show.trace_close()
    return nbugs == 0 and 0 or 1
end

return _M
