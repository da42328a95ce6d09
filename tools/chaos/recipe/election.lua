-- chaos.recipe.election: the election /chaos/election, rejoin on (the
-- default): an operation campaigns with a timeout, writes its token (the
-- node's czxid) to the fenced resource DIR/election.res while is_leader()
-- holds, and resigns; in one leadership of five it deletes its own node
-- first (as an operator would). A leadership lost unasked rejoins by
-- itself: the operation then waits (3 session timeouts at most) for it to
-- win, and that leadership is an operation of its own (try timeout=0
-- rejoin=1, then as a campaign's), checked as every grant.
-- Logged as op=election (try / enter / leave / release, on_lost as lost).
-- chaos/check/election.lua: no two live leaders, the accept log strictly
-- increasing.
local resource = require "chaos.resource"

local _M = {}

_M.paths = { "/chaos/election" }
_M.held = { "/chaos/election" }     -- the driver lists it at the end until empty
_M.weight = 2
_M.DELETE = 0.2    -- the share of leaderships whose node the leader's process deletes

function _M.start(ctx)
    local e = ctx.c:election("/chaos/election", { id = ctx.me })
    local st = { e = e, res = assert(resource.open(ctx.dir .. "/election.res")) }
    -- what ctx.critical asks at every step
    st.leader = { held = function() return e:is_leader() end }
    e:on_lost(function(reason)
        ctx.log("lost", { op = "election", token = st.held, reason = reason, sid = ctx.sid() })
    end)
    -- a leadership that did not come from campaign(): a rejoin won (counted, not judged)
    e:on_elected(function()
        if not st.campaigning then
            ctx.log("rejoined", { op = "election", sid = ctx.sid() })
        end
    end)
    return st
end

-- One leadership as operation n: write in it, then resign. Returns true
-- when it was lost unasked and the rejoin runs (not resigned then).
local function lead(ctx, st, n, token)
    local e = st.e
    st.held = token
    ctx.log("enter", { op = "election", n = n, token = token, sid = ctx.sid(),
                       node = e:node() and e:node():match("[^/]+$") })
    ctx.critical("election", st.leader, token, st.res, n)
    if ctx.rng:float() < _M.DELETE and e:is_leader() then
        -- an operator deletes the leader's node: on_lost("deleted"), and the
        -- rejoin takes us back to the line (waited for until noticed)
        local node = e:node()
        ctx.log("delete_own", { op = "election", n = n, token = token,
                                node = node:match("[^/]+$") })
        ctx.c:delete(node)
        local until_t = ctx.now() + 2 * ctx.st
        while e:is_leader() and ctx.now() < until_t do
            ctx.c:waiter():sleep(0.02)
        end
    end
    ctx.log("leave", { op = "election", n = n, token = token })
    st.held = nil
    if e:is_rejoining() then
        -- lost unasked: the rejoin runs (resign() would end it)
        ctx.log("release", { op = "election", n = n, token = token, ok = 0, err = "lost" })
        return true
    end
    local rok, rerr = e:resign()
    ctx.log("release", { op = "election", n = n, token = token, ok = rok and 1 or 0, err = rerr })
end

-- After a leadership lost unasked: wait (3 session timeouts at most) for
-- the rejoin to win; its leadership is an operation of its own, through
-- without a campaign (timeout 0). Bounded: 10 losses in a row, then resign.
local function after_loss(ctx, st)
    local e, c = st.e, ctx.c
    for _ = 1, 10 do
        local until_t = ctx.now() + 3 * ctx.st
        while e:is_rejoining() and ctx.now() < until_t do
            c:waiter():sleep(0.05)
        end
        local token = e:token()
        if not token then
            break        -- the rejoin did not win in time, or failed: end it
        end
        local n = ctx.next_n()
        ctx.log("try", { op = "election", n = n, timeout = 0, sid = ctx.sid(), rejoin = 1 })
        if not lead(ctx, st, n, token) then
            return
        end
    end
    e:resign()
end

function _M.op(ctx, st)
    local e, n = st.e, ctx.next_n()
    local timeout = ctx.rng:pick(ctx.TIMEOUTS)
    ctx.log("try", { op = "election", n = n, timeout = timeout, sid = ctx.sid() })
    st.campaigning = true
    local ok, err, detail = e:campaign(timeout)
    st.campaigning = false
    local token = ok and e:token()
    if not token then
        e:resign()     -- lost right after it won: nothing to write with
        return ctx.log("fail", { op = "election", n = n, err = err or "notleader",
                                 detail = detail })
    end
    if lead(ctx, st, n, token) then
        after_loss(ctx, st)
    end
end

function _M.stop(_, st)
    st.e:resign()
    st.res:close()
end

return _M
