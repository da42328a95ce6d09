-- chaos.recipe.partitioner: every contender is member "c<ID>" of the
-- partitioner /chaos/part (6 partitions) and logs what it owns (part_view,
-- from on_change, with its session). Its operation checks each partition it
-- owns against the server (part_claim: the owner node's ephemeralOwner,
-- and whether it still owned it, connected in the same session, after the
-- read). The driver probes the members and the owner nodes (probe_part).
-- chaos/check/partitioner.lua judges.
local _M = {}

local PATH = "/chaos/part"
_M.PARTITIONS = 6
_M.paths = { PATH }
_M.weight = 1

local function join(ctx, st)
    local p, err = ctx.c:partitioner(PATH, { partitions = _M.PARTITIONS, id = "c" .. ctx.id,
                                             data = ctx.me })
    ctx.log("part_join", { ok = p and 1 or 0, err = err, sid = ctx.sid() })
    if p then
        st.p = p
        p:on_change(function(owned)
            ctx.log("part_view", { owned = table.concat(owned, ","), sid = ctx.sid() })
        end)
    end
end

function _M.start(ctx)
    local st = {}
    join(ctx, st)
    return st
end

local function owns(p, x)
    for _, y in ipairs(p:owned()) do
        if y == x then return true end
    end
    return false
end

function _M.op(ctx, st)
    if not st.p then
        return join(ctx, st)
    end
    local c = ctx.c
    for _, x in ipairs(st.p:owned()) do
        local sid, state = c:session_id(), c:state()
        local stat, err = c:exists(PATH .. "/owners/" .. x)
        local still = owns(st.p, x) and c:session_id() == sid and state == "connected"
            and c:state() == "connected"
        ctx.log("part_claim", { p = x, owner = stat and stat.ephemeral_owner or (stat == false
                                and "none" or "error"), err = err, mine = sid,
                                still = still and 1 or 0 })
    end
end

function _M.stop(_, st)
    if st.p then st.p:close() end
end

function _M.probe(admin, log)
    local members, err = admin:children(PATH .. "/members")
    if not members then
        return log("probe_part", { err = err })
    end
    table.sort(members)
    local owners = {}
    for x = 0, _M.PARTITIONS - 1 do
        local stat, serr = admin:exists(PATH .. "/owners/" .. x)
        if stat == nil then
            return log("probe_part", { err = serr })
        end
        owners[#owners + 1] = x .. "=" .. (stat and stat.ephemeral_owner or "-")
    end
    log("probe_part", { members = table.concat(members, ","), owners = table.concat(owners, ",") })
end

return _M
