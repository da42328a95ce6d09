-- chaos.check.service_discovery: service discovery's promises (README),
-- from the contenders' sd_* lines and the driver's probe_sd:
--   dead instance  a view that lists an instance of a SIGKILLed process
--               (id and incarnation) once its session must be gone: one
--               session timeout after the kill (and after the end of any
--               server fault from then on: no session expires without a
--               quorum) plus half a session timeout to see the delete,
--               judged while the viewer and the servers had no fault for
--               that long; or a probe that still shows such an instance.
--   view differs  once stable (no fault for stable.window(R) s, and no
--               registration change by anyone that long: the driver's
--               settle stops them), a live process's view (its last sd_view)
--               is not exactly the server's instances with their data.
--   missing     then, an instance a live process registered (and did not
--               unregister) is not on the server with its incarnation and
--               its latest payload: a registration is a persistent node,
--               made again after a session loss.
--   stale       at any probe, an instance of a process that had no fault,
--               nor a server, for 2 session timeouts + 2 s (time to connect
--               again or expire, and for a killed predecessor's node to go)
--               is not on the server, or has a payload older than the last
--               one it set before that window (an update that failed on the
--               connection is written again once connected) or newer than
--               any it set.
--   not Curator's  an instance's JSON (every probe) that Curator's
--               JsonInstanceSerializer could not read into a ServiceInstance:
--               the fields it requires, with their types.
--   provider    a provider pick that its own process's view did not list.
-- At least one probe must be judged.
local stable = require "chaos.check.stable"
local util = require "chaos.util"
local json = require "zkcoord.discovery.json"

local format = string.format
local type, pairs, ipairs, tostring, tonumber = type, pairs, ipairs, tostring, tonumber

local _M = {}

local MUTATIONS = { sd_reg = true, sd_update = true, sd_unreg = true }
local SERVICE_TYPES = { DYNAMIC = true, STATIC = true, PERMANENT = true,
                        DYNAMIC_SEQUENTIAL = true }
local KNOWN = { name = true, id = true, address = true, port = true, sslPort = true,
                payload = true, registrationTimeUTC = true, serviceType = true, uriSpec = true,
                enabled = true }

local function int_or_null(v)
    return v == nil or v == json.null or (type(v) == "number" and v % 1 == 0)
end

--- What Curator's JsonInstanceSerializer (ServiceInstance<Object>, Jackson)
--- would refuse in the JSON `text` of instance `id` of service `name`, or
--- nil when it reads it.
function _M.curator_problem(text, name, id)
    local v = json.decode(text)
    if type(v) ~= "table" then
        return "not a JSON object"
    end
    for k in pairs(v) do
        if not KNOWN[k] then return "unknown field " .. tostring(k) end
    end
    if v.name ~= name then return "name " .. tostring(v.name) end
    if v.id ~= id then return "id " .. tostring(v.id) end
    if type(v.address) ~= "string" then return "address " .. type(v.address) end
    if not int_or_null(v.port) then return "port " .. tostring(v.port) end
    if not int_or_null(v.sslPort) then return "sslPort " .. tostring(v.sslPort) end
    if type(v.registrationTimeUTC) ~= "number" or v.registrationTimeUTC % 1 ~= 0
        or v.registrationTimeUTC <= 0 then
        return "registrationTimeUTC " .. tostring(v.registrationTimeUTC)
    end
    if not SERVICE_TYPES[v.serviceType] then return "serviceType " .. tostring(v.serviceType) end
    -- the payload is typed Object: a JSON object needs Jackson's class id
    if type(v.payload) == "table" and type(v.payload["@class"]) ~= "string" then
        return "payload without @class"
    end
    local u = v.uriSpec
    if u ~= nil and u ~= json.null then
        if type(u) ~= "table" or type(u.parts) ~= "table" then return "uriSpec" end
        for _, p in ipairs(u.parts) do
            if type(p) ~= "table" or type(p.value) ~= "string"
                or type(p.variable) ~= "boolean" then
                return "uriSpec part"
            end
        end
    end
    if v.enabled ~= nil and type(v.enabled) ~= "boolean" then return "enabled" end
    return nil
end

-- A probe's instances: id -> { sum = "id@inc:v", inc =, text = }, and the
-- summary of them all ("id@inc:v,..." in id order), as views log theirs.
local function server_state(nodes)
    local by, ids = {}, {}
    for id, hex in nodes:gmatch("([^=,]+)=(%x*)") do
        local text = util.unhex(hex)
        local v = json.decode(text)
        local p = type(v) == "table" and type(v.payload) == "table" and v.payload or {}
        by[id] = { sum = format("%s@%s:%s", id, tostring(p.inc), tostring(p.v)),
                   inc = tonumber(p.inc), v = tonumber(p.v), text = text }
        ids[#ids + 1] = id
    end
    table.sort(ids)
    local sums = {}
    for i, id in ipairs(ids) do sums[i] = by[id].sum end
    return by, table.concat(sums, ",")
end

-- When a SIGKILLed process's session must be gone and seen so: one session
-- timeout after the kill, restarted by every server fault that overlaps
-- (the new leader gives each session a new timeout), plus `margin`.
local function gone_by(R, t_kill, margin)
    local d = t_kill + R.st + margin
    local moved = true
    while moved do
        moved = false
        for _, f in ipairs(R.faults) do
            if f.target == nil and f.from <= d and (f.to or d) + R.st + margin > d then
                d, moved = (f.to or d) + R.st + margin, true
            end
        end
    end
    return d
end

-- The views of process P: { { t =, insts = { "id@inc:v" -> true }, ids = {} } }.
local function views(P)
    local out = {}
    for _, e in ipairs(P.events) do
        if e.ev == "sd_view" then
            local set = {}
            for s in (e.kv.insts or ""):gmatch("[^,]+") do set[s] = true end
            out[#out + 1] = { t = e.t, text = e.kv.insts or "", insts = set }
        end
    end
    return out
end

local function last_before(list, t)
    local found
    for _, x in ipairs(list) do
        if x.t > t then break end
        found = x
    end
    return found
end

local function closed_at(P)
    for _, e in ipairs(P.events) do
        if e.ev == "sd_close" then return e.t end
    end
    return P.last_t
end

-- (a) No view lists a dead process's instance past its session's end.
local function dead_instances(R, V, margin)
    local stale, samples = 0, 0
    for key, t_kill in pairs(R.killed) do
        local P = R.procs[key]
        if P then
            local d = gone_by(R, t_kill, margin)
            local mine = "^c" .. P.id .. "%-%d+@" .. P.inc .. ":"
            for _, Q in pairs(R.procs) do
                local killed = R.killed[Q.key] or R.stuck[Q.key]
                local till = math.min(closed_at(Q), killed or math.huge)
                local reported = false
                local list, i = V[Q.key], 0
                -- every quarter second from d while Q ran: its view then
                local t = d
                while t <= till and not reported do
                    while list[i + 1] and list[i + 1].t <= t do i = i + 1 end
                    if i > 0 and stable.untouched(R, Q, t - R.st - margin, t) then
                        local v = list[i]
                        samples = samples + 1
                        for s in pairs(v.insts) do
                            if s:match(mine) then
                                stale, reported = stale + 1, true
                                R:violation("service_discovery: dead instance in a view",
                                            format("%s's view at %.3f (logged %.3f) lists %s of "
                                                   .. "%s, SIGKILLed at %.3f (gone by %.3f)",
                                                   Q.key, t, v.t, s, key, t_kill, d))
                                break
                            end
                        end
                    end
                    t = t + 0.25
                end
            end
            for _, pr in ipairs(stable.probes(R, "probe_sd")) do
                if pr.t >= d and pr.kv.nodes then
                    local by = server_state(pr.kv.nodes)
                    for id, x in pairs(by) do
                        if id:match("^c" .. P.id .. "%-") and x.inc == P.inc then
                            R:violation("service_discovery: dead instance on the server",
                                        format("probe at %.3f lists %s of %s, SIGKILLed at %.3f",
                                               pr.t, x.sum, key, t_kill))
                        end
                    end
                end
            end
        end
    end
    return stale, samples
end

-- What process P had registered by t: id -> version (nil once unregistered).
local function registered(P, t)
    local regs = {}
    for _, e in ipairs(P.events) do
        if e.t > t then break end
        if e.ev == "sd_reg" or e.ev == "sd_update" then
            regs[e.kv.id] = tonumber(e.kv.v)
        elseif e.ev == "sd_unreg" then
            regs[e.kv.id] = nil
        end
    end
    return regs
end

-- The ids P unregistered or registered during [a, b].
local function churned(P, a, b)
    local out = {}
    for _, e in ipairs(P.events) do
        if e.t > b then break end
        if e.t >= a and (e.ev == "sd_reg" or e.ev == "sd_unreg") then out[e.kv.id] = true end
    end
    return out
end

-- (stale) every probe: the instances of processes untouched for D seconds.
local function fresh(R, P, pr, by, D)
    local lo, hi, skip = registered(P, pr.t - D), registered(P, pr.t), churned(P, pr.t - D, pr.t)
    local n = 0
    for id, v_lo in pairs(lo) do
        local v_hi = hi[id]
        if v_hi and not skip[id] then
            n = n + 1
            local x = by[id]
            if not x or x.inc ~= P.inc or x.v < v_lo or x.v > v_hi then
                R:violation("service_discovery: registration stale",
                            format("%s's %s at %.3f: the server has %s; it set version %d before "
                                   .. "%.3f, %d by then (no fault on it or a server for %g s)",
                                   P.key, id, pr.t, x and x.sum or "nothing", v_lo, pr.t - D,
                                   v_hi, D))
            end
        end
    end
    return n
end

local function changed_within(R, a, b)
    for _, P in pairs(R.procs) do
        for _, e in ipairs(P.events) do
            if e.t > b then break end
            if e.t >= a and MUTATIONS[e.ev] then return true end
        end
    end
    return false
end

function _M.run(R)
    local N = stable.window(R)
    local margin = R.st / 2
    local V = {}
    for key, P in pairs(R.procs) do V[key] = views(P) end

    local stale, samples = dead_instances(R, V, margin)

    -- (b) convergence once stable, (c) Curator's JSON at every probe
    local judged, compared, checked, bad_json, probes, fresh_checked = 0, 0, 0, 0, 0, 0
    local D = 2 * R.st + 2
    local json_seen = {}
    for _, pr in ipairs(stable.probes(R, "probe_sd")) do
        if pr.kv.nodes then
            probes = probes + 1
            local by, server = server_state(pr.kv.nodes)
            for id, x in pairs(by) do
                if not json_seen[x.text] then
                    json_seen[x.text] = true
                    local why = _M.curator_problem(x.text, "svc", id)
                    if why then
                        bad_json = bad_json + 1
                        R:violation("service_discovery: JSON not Curator's",
                                    format("%s at %.3f: %s: %s", id, pr.t, why, x.text:sub(1, 300)))
                    end
                end
            end
            for _, P in ipairs(stable.alive(R, pr.t, D + R.st)) do
                if stable.untouched(R, P, pr.t - D, pr.t) then
                    fresh_checked = fresh_checked + fresh(R, P, pr, by, D)
                end
            end
            if stable.settled(R, pr.t, N) and not changed_within(R, pr.t - N, pr.t) then
                judged = judged + 1
                for _, P in ipairs(stable.alive(R, pr.t, N)) do
                    local v = last_before(V[P.key], pr.t)
                    compared = compared + 1
                    if not v or v.text ~= server then
                        R:violation("service_discovery: view differs from the server's",
                                    format("%s at %.3f sees %s, the server has %s (quiet %g s)",
                                           P.key, pr.t, v and v.text or "no view", server, N))
                    end
                    for id, ver in pairs(registered(P, pr.t)) do
                        checked = checked + 1
                        local x = by[id]
                        if not x or x.inc ~= P.inc or x.v ~= ver then
                            R:violation("service_discovery: registered instance missing",
                                        format("%s registered %s version %d; at %.3f the server has "
                                               .. "%s (quiet %g s)", P.key, id, ver, pr.t,
                                               x and x.sum or "nothing", N))
                        end
                    end
                end
            end
        end
    end

    -- a provider picks from its own view
    local picks = 0
    for key, P in pairs(R.procs) do
        for _, e in ipairs(P.events) do
            if e.ev == "sd_get" and e.kv.id then
                picks = picks + 1
                local v = last_before(V[key], e.t)
                if not (v and (("," .. v.text):find("," .. e.kv.id .. "@", 1, true))) then
                    R:violation("service_discovery: provider picked outside its view",
                                format("%s picked %s at %.3f; its view: %s", key, e.kv.id, e.t,
                                       v and v.text or "none"))
                end
            end
        end
    end

    if judged == 0 then
        R:violation("service_discovery: never stable",
                    "no probe after " .. N .. " s without a fault or a registration change")
    end
    R.recipe_rows[#R.recipe_rows + 1] = {
        label = "service discovery: a dead instance listed, a view not the server's once stable, "
            .. "a registration missing or stale, JSON Curator cannot read",
        prefix = "service_discovery: ", name = "service_discovery",
        figures = { judged = judged, compared = compared, checked = checked, samples = samples,
                    fresh = fresh_checked,
                    stale = stale, picks = picks, probes = probes, bad_json = bad_json },
        details = format("dead-instance samples %d (views %g s after a killed session's end); "
                         .. "probes judged %d (quiet %g s), views compared %d, registrations "
                         .. "checked %d; registrations checked fresh %d times (%g s without a fault); "
                         .. "JSON read from %d probes; provider picks %d",
                         samples, R.st + margin, judged, N, compared, checked, fresh_checked, D,
                         probes, picks) }
end

return _M
