-- fuzz.show: how the fuzzer prints values and calls (labels for objects,
-- escapes, truncation), and the trace file that holds the call in progress.
local S = require "fuzz.state"

local type, pairs = type, pairs
local huge = math.huge
local format, concat = string.format, table.concat

local _M = {}

function _M.say(...)
    io.stdout:write(...)
    io.stdout:write("\n")
    io.stdout:flush()
end

-- Objects are shown by a label ("lock#12"), given when they are made.
local labels = setmetatable({}, { __mode = "k" })
_M.labels = labels
local nlabel = 0
function _M.label(v, name)
    nlabel = nlabel + 1
    labels[v] = name .. "#" .. nlabel
    return v
end

local function esc(s)
    return (s:gsub("[%c\128-\255\"\\]", function(c)
        return format("\\%d", c:byte())
    end))
end

local function show_number(v)
    if v ~= v then return "0/0" end
    if v == huge then return "math.huge" end
    if v == -huge then return "-math.huge" end
    if v == 0 and 1 / v < 0 then return "-0.0" end
    return format("%.17g", v)
end

local show

local function show_table(v, depth)
    if depth > 2 then return "{...}" end
    local out, n = {}, 0
    for k, x in pairs(v) do
        n = n + 1
        if n > 6 then out[#out + 1] = "..."; break end
        if type(k) == "number" then
            out[#out + 1] = show(x, depth + 1)
        else
            out[#out + 1] = (type(k) == "string" and k:match("^[%a_][%w_]*$") and k
                             or "[" .. show(k, depth + 1) .. "]") .. "=" .. show(x, depth + 1)
        end
    end
    return "{" .. concat(out, ", ") .. "}"
end

function show(v, depth)
    depth = depth or 0
    local t = type(v)
    if labels[v] then
        return "<" .. labels[v] .. ">"
    elseif t == "string" then
        if #v > 48 then
            return format("<%d-byte string \"%s...\">", #v, esc(v:sub(1, 24)))
        end
        return "\"" .. esc(v) .. "\""
    elseif t == "number" then
        return show_number(v)
    elseif t == "table" then
        return show_table(v, depth)
    end
    return "<" .. t .. ">"
end
_M.show = show

function _M.show_args(args)
    local out = {}
    for i = 1, args.n do
        out[i] = show(args[i])
    end
    return concat(out, ", ")
end

-- The calls in progress (nested ones below their callers), rewritten at
-- every call so that it holds what was running when the process died.
-- (Coroutines make a stack unreliable: the top-level call and the last
-- call started, which may be one made from a callback inside it.)
local trace_file
local trace_top, trace_depth = "", 0

function _M.trace_open()
    trace_file = S.opts.trace and io.open(S.opts.trace, "w")
end

function _M.trace_push(text)
    if trace_depth <= 0 then
        trace_top, trace_depth = text, 0
    end
    trace_depth = trace_depth + 1
    if trace_file then
        trace_file:close()
        trace_file = io.open(S.opts.trace, "w")
        trace_file:write(trace_top, "\n")
        if trace_depth > 1 then
            trace_file:write("  and inside it, last: ", text, "\n")
        end
        trace_file:flush()
    end
end

function _M.trace_pop()
    trace_depth = trace_depth - 1
end

-- A new top-level call: whatever was open is over.
function _M.trace_reset()
    trace_depth = 0
end

function _M.trace_close()
    if trace_file then
        trace_file:close()
    end
end

return _M
