--- zkcoord.election.run: scoped leadership, election:run's rounds
--- (internal; kazoo's Election.run, Curator's LeaderSelector).
--
-- A round campaigns, runs fn(e, ...) while leader and resigns when fn
-- returns. self._in_run while fn runs: a loss then is run()'s to rejoin
-- (the election's own rejoin stays out of it), noted in self._run_lost.
local util = require "zkcoord.util"

local type, select = type, select
local argerror, unpack = util.argerror, require("zkcoord.compat").unpack

local _M = {}

local RUN_KEYS = { "timeout", "requeue", "rejoin" }


--- opts.requeue (argument #2 of `fname`) as a number of further rounds
--- (math.huge: as long as the client is open).
function _M.check_requeue(requeue, fname)
    if requeue == true then
        return math.huge
    elseif requeue == nil or requeue == false then
        return 0
    elseif type(requeue) ~= "number" or requeue < 0 or requeue % 1 ~= 0 then
        argerror(2, fname, "requeue must be a boolean or an integer >= 0")
    end
    return requeue
end


-- run()'s give-back. A loss not reported yet is found by resign() and
-- noted by the election's loss report (_run_lost), so that run() may
-- rejoin; is_leader() can't tell it: it is false too after fn resigned,
-- which ends the round.
local function resign_after(self)
    local ok, err = self:resign()
    self._in_run = nil
    return ok, err
end


local function pack(...)
    return { n = select("#", ...), ... }
end


-- The deprecated table form run(fn, { timeout =, requeue =, rejoin = }):
-- its timeout, and its requeue and rejoin over the election's.
local function run_opts(self, opts)
    opts = util.check_opts(opts, RUN_KEYS, "run", 2)
    util.check_timeout(opts.timeout, "run", 2)
    local requeue, rejoin = self.requeue, self.rejoin
    if opts.requeue ~= nil then
        requeue = _M.check_requeue(opts.requeue, "run")
    end
    if opts.rejoin ~= nil then
        if type(opts.rejoin) ~= "boolean" then
            argerror(2, "run", "rejoin must be a boolean")   -- "no" was taken for true
        end
        rejoin = opts.rejoin
    end
    util.deprecated(self.client, "election:run(fn, { timeout = })",
                    "election:run(fn, timeout?, ...) and the election's opts.requeue")
    return opts.timeout, requeue, rejoin
end


--- election:run(fn, timeout, ...) (its doc comment is the election's).
function _M.run(self, fn, timeout, ...)
    util.check_fn(fn, "run", 1)
    local requeue, rejoin = self.requeue, self.rejoin
    if type(timeout) == "table" then
        timeout, requeue, rejoin = run_opts(self, timeout)
    end
    util.check_timeout(timeout, "run", 2)
    local args = pack(...)
    local rounds = 0
    while true do
        local ok, err, detail = self:campaign(timeout)
        if not ok then
            return nil, err, detail
        end
        self._in_run = true       -- a loss while fn runs is run()'s to rejoin
        self._run_lost = nil
        local res = pack(util.run_held(resign_after, self, fn, self, unpack(args, 1, args.n)))
        local lost = self._run_lost
        if lost and not rejoin then
            return nil, "lost"
        end
        if not lost then
            rounds = rounds + 1
            if rounds > requeue or self.client:is_closed() then
                return unpack(res, 1, res.n)
            end
        end
    end
end


return _M
