-- chaos.recipe.group: every contender is member "c<ID>" of /chaos/group
-- (joined at start, left at the end) and logs its view (group_view, from
-- on_change) with its session; the driver probes the members on the server
-- (probe_group). chaos/check/group.lua: once stable, every view is the
-- server's list.
local _M = {}

local PATH = "/chaos/group"
_M.paths = { PATH }
_M.weight = 0

local function ids(members)
    local out = {}
    for k in pairs(members or {}) do out[#out + 1] = k end
    table.sort(out)
    return table.concat(out, ",")
end

function _M.start(ctx)
    local g = ctx.c:group(PATH, "c" .. ctx.id, ctx.me)
    local ok, err = g:join(ctx.st * 3)
    ctx.log("group_join", { ok = ok and 1 or 0, err = err, sid = ctx.sid() })
    g:on_change(function(members)
        ctx.log("group_view", { members = ids(members), sid = ctx.sid() })
    end)
    return { g = g }
end

function _M.stop(_, st)
    st.g:close()
end

function _M.probe(admin, log)
    local kids, err = admin:children(PATH)
    if kids then
        table.sort(kids)
        log("probe_group", { members = table.concat(kids, ",") })
    else
        log("probe_group", { err = err })
    end
end

return _M
