-- fuzz.state: what the fuzzer's modules share during one run: the options,
-- the seed and generator, the server and namespace, the clients and objects
-- in play, and the counts the report prints. run.lua fills it in first.
local _M = {
    opts = nil,             -- the command line (tools/fuzz.lua)
    seed = nil,
    rng = nil,              -- helpers.rng: a seed must replay the same calls
    hosts = nil, server = nil, admin = nil,
    ns = nil,               -- the namespace every fuzzed client is chrooted to
    dir = nil,              -- scratch: the ticker's and the probes' scripts
    auth = nil, logger = nil,
    logged = { error = 0, warn = 0, info = 0, debug = 0, other = 0 },

    -- known bug id -> true: its inputs are used (fixed, or --known-bugs) /
    -- its probe still shows it
    include = {}, present = {},

    clients = {},           -- records { c =, name =, main =, guarded = }
    main = nil,             -- the record of the main client
    objects = {},           -- records { kind =, obj =, owner = client record }

    -- Set when generated arguments make a request above the limit that only
    -- the server notices (K9); classify.run takes its value when a call starts.
    oversize = false,
    nesting = 0, nested_calls = 0,

    counts = { ok = 0, err = 0, arg_error = 0, by_fuzzer = 0, known_bug = 0, internal = 0,
               unclear = 0, bad_code = 0, nil_no_code = 0, hang = 0, oracle = 0, health = 0 },
    codes = {},             -- code -> count
    known_hits = {},        -- known bug id -> count
    coverage = {},          -- key -> calls
    bugs = {},              -- signature -> { class, key, call, message, traceback, count }
    bug_order = {},
    slowest = { t = 0 },
    calls = 0, wrong_self_calls = 0, coroutine_calls = 0,
    health_ok = 0, health_failed = 0, health_retries = 0,
    victims = 0, rotations = 0, guard_closes = 0, batch_no = 0,
}

-- Timing bounds.
_M.REQUEST_TIMEOUT = 3
_M.SESSION_TIMEOUT = 4
_M.SLACK = 10            -- seconds: loaded machines, sanitizers
-- A read may take the retry policy's bound after a connection loss: the
-- default 5 tries of up to REQUEST_TIMEOUT each, plus backoff (< 2 s).
_M.CALL_BOUND = 5 * _M.REQUEST_TIMEOUT + 2
_M.TICK = 0.2
_M.TICK_NODE = "/_tick"
_M.MAX_OBJECTS = 60

-- Raised by the fuzzer's own callbacks and metamethods: not the library's.
_M.SENTINEL = "FUZZ-SENTINEL"

return _M
