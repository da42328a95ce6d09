-- chaos.recipe.persistent_node: every contender keeps an ephemeral
-- persistent node under /chaos/pn, "c<ID>" (odd ids: sequential,
-- "c<ID>-<seq>"), data "<INC>:<version>"; its operation sets the next
-- version (pn_set, logged before the set). The driver probes every node
-- with its data (probe_pn). chaos/check/persistent_node.lua.
local _M = {}

local PATH = "/chaos/pn"
_M.paths = { PATH }
_M.weight = 1

function _M.start(ctx)
    local seq = ctx.id % 2 == 1
    local st = { v = 1 }
    local path = PATH .. "/c" .. ctx.id .. (seq and "-" or "")
    ctx.log("pn_set", { v = st.v, seq = seq and 1 or 0 })
    st.node = ctx.c:persistent_node(path, ctx.inc .. ":" .. st.v,
                                    { ephemeral = true, sequential = seq })
    return st
end

function _M.op(ctx, st)
    st.v = st.v + 1
    ctx.log("pn_set", { v = st.v })
    st.node:set(ctx.inc .. ":" .. st.v)
end

function _M.stop(ctx, st)
    ctx.log("pn_close", {})
    st.node:close()
end

function _M.probe(admin, log)
    local names, err = admin:children(PATH)
    if not names then
        return log("probe_pn", { err = err })
    end
    table.sort(names)
    local parts = {}
    for _, name in ipairs(names) do
        local data = admin:get(PATH .. "/" .. name)
        if data then parts[#parts + 1] = name .. "=" .. data end
    end
    log("probe_pn", { nodes = table.concat(parts, ",") })
end

return _M
