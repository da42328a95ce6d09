--- zkcoord.metrics.text: samples as text (internal): Prometheus's text
--- exposition format, sample sets added together, and the line format
--- nginx workers publish them in (a lua_shared_dict's values).
local registry = require "zkcoord.metrics.registry"

local type, pairs, ipairs, tostring, tonumber = type, pairs, ipairs, tostring, tonumber
local concat = table.concat
local format, gsub = string.format, string.gsub
local HELP, ORDER = registry.HELP, registry.ORDER
local REQUEST_BUCKETS, WAIT_BUCKETS = registry.REQUEST_BUCKETS, registry.WAIT_BUCKETS
local add = registry.add

local _M = { _VERSION = require("zkcoord.version") }

local function escape(v)
    return (gsub(gsub(gsub(tostring(v), "\\", "\\\\"), "\n", "\\n"), '"', '\\"'))
end

local function num(v)
    if v == 1 / 0 then return "+Inf" end
    if v % 1 == 0 and v > -1e15 and v < 1e15 then return format("%d", v) end
    local s = format("%.15g", v)      -- the shortest form that reads back the same
    if tonumber(s) ~= v then s = format("%.17g", v) end
    return s
end

local function label_text(labels, extra_k, extra_v)
    local parts = {}
    for i, kv in ipairs(labels) do
        parts[i] = kv[1] .. '="' .. escape(kv[2]) .. '"'
    end
    if extra_k then
        parts[#parts + 1] = extra_k .. '="' .. extra_v .. '"'
    end
    return #parts > 0 and "{" .. concat(parts, ",") .. "}" or ""
end


-- Adds sample sets together (several clients, or nginx workers): series
-- with the same labels sum, histograms bucket by bucket.
local function merge(sets)
    local out, index = {}, {}
    for _, set in ipairs(sets) do
        for name, list in pairs(set) do
            for _, s in ipairs(list) do
                local key = name .. label_text(s.labels)
                local have = index[key]
                if not have then
                    local v = s.value
                    if type(v) == "table" then
                        local h = { bounds = v.bounds, sum = v.sum, count = v.count }
                        for i = 1, #v.bounds + 1 do h[i] = v[i] end
                        v = h
                    end
                    have = { labels = s.labels, value = v }
                    index[key] = have
                    add(out, name, have.labels, v)
                    out[name][#out[name]] = have
                elseif type(have.value) == "table" then
                    local h, v = have.value, s.value
                    for i = 1, #h.bounds + 1 do h[i] = h[i] + v[i] end
                    h.sum, h.count = h.sum + v.sum, h.count + v.count
                else
                    have.value = have.value + s.value
                end
            end
        end
    end
    return out
end


local function render(samples)
    local lines = {}
    for _, name in ipairs(ORDER) do
        local list = samples[name]
        if list and #list > 0 then
            local kind, help = HELP[name][1], HELP[name][2]
            lines[#lines + 1] = "# HELP " .. name .. " " .. help
            lines[#lines + 1] = "# TYPE " .. name .. " " .. kind
            for _, s in ipairs(list) do
                local v = s.value
                if kind == "histogram" then
                    local cum = 0
                    for i, b in ipairs(v.bounds) do
                        cum = cum + v[i]
                        lines[#lines + 1] = name .. "_bucket" .. label_text(s.labels, "le", num(b))
                                            .. " " .. num(cum)
                    end
                    lines[#lines + 1] = name .. "_bucket" .. label_text(s.labels, "le", "+Inf")
                                        .. " " .. num(v.count)
                    lines[#lines + 1] = name .. "_sum" .. label_text(s.labels) .. " " .. num(v.sum)
                    lines[#lines + 1] = name .. "_count" .. label_text(s.labels) .. " "
                                        .. num(v.count)
                else
                    lines[#lines + 1] = name .. label_text(s.labels) .. " " .. num(v)
                end
            end
        end
    end
    lines[#lines + 1] = ""
    return concat(lines, "\n")
end

_M.merge, _M.render = merge, render


local function encode(samples)
    -- name \t labels (k=v;...) \t value or bucket counts, one series a line;
    -- label text is escaped already, so \t and \n never appear in it raw.
    local out = {}
    for name, list in pairs(samples) do
        for _, s in ipairs(list) do
            local ls = {}
            for i, kv in ipairs(s.labels) do ls[i] = kv[1] .. "=" .. escape(kv[2]) end
            local v = s.value
            local vt
            if type(v) == "table" then
                local parts = { num(v.sum), num(v.count) }
                for i = 1, #v.bounds + 1 do parts[#parts + 1] = num(v[i]) end
                vt = concat(parts, ",")
            else
                vt = num(v)
            end
            out[#out + 1] = name .. "\t" .. concat(ls, ";") .. "\t" .. vt
        end
    end
    return concat(out, "\n")
end

local function unescape(v)
    return (gsub(v, "\\(.)", { n = "\n", ['"'] = '"', ["\\"] = "\\" }))
end

local function decode(text)
    local samples = {}
    for line in text:gmatch("[^\n]+") do
        local name, ls, vt = line:match("^([^\t]+)\t([^\t]*)\t([^\t]+)$")
        if name and HELP[name] then
            local labels = {}
            for k, v in ls:gmatch("([%w_]+)=([^;]*)") do
                labels[#labels + 1] = { k, unescape(v) }
            end
            local value
            if HELP[name][1] == "histogram" then
                local nums = {}
                for x in vt:gmatch("[^,]+") do nums[#nums + 1] = tonumber(x) end
                local bounds = name == "zkcoord_request_seconds" and REQUEST_BUCKETS
                               or WAIT_BUCKETS
                value = { bounds = bounds, sum = nums[1], count = nums[2] }
                for i = 1, #bounds + 1 do value[i] = nums[i + 2] or 0 end
            else
                value = tonumber(vt)
            end
            add(samples, name, labels, value)
        end
    end
    return samples
end
_M.encode, _M.decode = encode, decode


return _M
