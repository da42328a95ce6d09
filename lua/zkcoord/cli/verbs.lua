-- zkcoord.cli.verbs: the plain verbs, one function each: get, set, create,
-- rm, ls, stat, tree, counter, watch (and locks, in locks.lua). Each reads
-- its options and operands, connects, does one thing, prints the result on
-- stdout. Not a public API.
local sys = require "zkcoord.cli.sys"
local ex = require "zkcoord.cli.exit"
local args_mod = require "zkcoord.cli.args"
local session = require "zkcoord.cli.session"
local show = require "zkcoord.cli.show"
local locks = require "zkcoord.cli.locks"
local services = require "zkcoord.cli.services"

local usage, fail, note = ex.usage, ex.fail, ex.note
local join, utc, fmt_number = show.join, show.utc, show.fmt_number
local SIG = sys.SIG

local _M = {}

-- The options each verb takes (none for the others).
local OPTIONS = {
    create = { ["-e"] = "flag", ["-s"] = "flag", ["-p"] = "flag" },
    rm = { ["-r"] = "flag" },
    ls = { ["-l"] = "flag" },
    watch = { ["--children"] = "flag" },
    locks = { ["--json"] = "flag" },
    services = { ["--dubbo"] = "flag" },
}

-- The operands each verb takes, { min, max } (1 for the others).
local OPERANDS = { set = { 2, 2 }, create = { 1, 2 }, counter = { 1, 3 }, services = { 1, 2 } }

local function delete_tree(c, path)
    local names, err, detail = c:children(path)
    if not names then
        if err == "nonode" then return true end
        return nil, err, detail
    end
    for _, n in ipairs(names) do
        local ok, e2, d2 = delete_tree(c, join(path, n))
        if not ok then return nil, e2, d2 end
    end
    if path == "/" then
        return true
    end
    local ok, derr, ddetail = c:delete(path)
    if not ok and derr ~= "nonode" then
        return nil, derr, ddetail
    end
    return true
end

local STAT_FIELDS = { "czxid", "mzxid", "pzxid", "ctime", "mtime", "version", "cversion",
                      "aversion", "data_length", "num_children", "ephemeral_owner" }

-- verb -> function(c, v): v holds path, o (options), ops (operands), what
-- (for messages), out (stdout), sigfd (watch).
local RUN = {}

function RUN.get(c, v)
    local data, err, detail = c:get(v.path)
    if not data then fail(v.what, err, detail) end
    v.out:write(data, "\n")
end

function RUN.set(c, v)
    local data = v.ops[2]
    if data == "-" then       -- the data from stdin, as it is (`printf - |` sets "-")
        data = io.stdin:read("*a") or ""
    end
    local st, err, detail = c:set(v.path, data)
    if not st then fail(v.what, err, detail) end
end

function RUN.create(c, v)
    local o = v.o
    local p, err, detail = c:create(v.path, v.ops[2], { ephemeral = o.e, sequential = o.s,
                                                        parents = o.p })
    if not p then fail(v.what, err, detail) end
    v.out:write(p, "\n")
end

function RUN.rm(c, v)
    local path, what = v.path, v.what
    if v.o.r then
        local st, err, detail = c:exists(path)
        if st == false then err = "nonode" end
        if not st then fail(what, err, detail) end
        local ok
        ok, err, detail = delete_tree(c, path)
        if not ok then fail(what, err, detail) end
    else
        local ok, err, detail = c:delete(path)
        if not ok then fail(what, err, detail) end
    end
end

function RUN.ls(c, v)
    local path, out = v.path, v.out
    local names, err, detail = c:children(path)
    if not names then fail(v.what, err, detail) end
    table.sort(names)
    if not v.o.l then
        for _, n in ipairs(names) do out:write(n, "\n") end
        return
    end
    local fs = {}
    for k, n in ipairs(names) do fs[k] = c:send("exists", join(path, n)) end
    for k, n in ipairs(names) do
        local st = fs[k]:wait()
        if st then
            out:write(table.concat({ n, st.data_length, st.num_children,
                st.ephemeral_owner and ("0x" .. st.ephemeral_owner) or "-",
                utc(st.mtime) }, "\t"), "\n")
        end
    end
end

-- The node's stat, or the command fails (nonode when it does not exist).
local function existing(c, v)
    local st, err, detail = c:exists(v.path)
    if st == nil then fail(v.what, err, detail) end
    if st == false then fail(v.what, "nonode") end
    return st
end

function RUN.stat(c, v)
    local st = existing(c, v)
    for _, k in ipairs(STAT_FIELDS) do
        local x = st[k]
        if k == "ctime" or k == "mtime" then
            x = utc(x)
        elseif k == "ephemeral_owner" then
            x = x and ("0x" .. x) or "-"
        elseif type(x) == "number" or type(x) == "cdata" then
            x = fmt_number(x)
        end
        v.out:write(k, "\t", tostring(x), "\n")
    end
end

function RUN.tree(c, v)
    existing(c, v)
    local function walk(p)
        v.out:write(p, "\n")
        local names, werr, wdetail = c:children(p)
        if not names then
            if werr == "nonode" then return end     -- deleted meanwhile
            fail(v.what, werr, wdetail)
        end
        table.sort(names)
        for _, n in ipairs(names) do walk(join(p, n)) end
    end
    walk(v.path)
end

function RUN.counter(c, v)
    local ops = v.ops
    local ctr = c:counter(v.path)
    local n, err, detail
    if ops[2] == "add" then
        n, err, detail = ctr:add(tonumber(ops[3]))
    elseif ops[2] == "set" then
        local ok
        ok, err, detail = ctr:set(tonumber(ops[3]))
        n = ok and tonumber(ops[3])
    else
        n, err, detail = ctr:get()
    end
    if n == nil then fail(v.what, err, detail) end
    v.out:write(fmt_number(n), "\n")
end

function RUN.locks(c, v)
    locks.print(c, v.path, v.o.json, v.out)
end

function RUN.services(c, v)
    services.print(c, v.path, v.ops[2], v.o.dubbo)
end

-- Prints the node's data (or its children) on every change until a signal.
function RUN.watch(c, v)
    local path, out = v.path, v.out
    local kind = v.o.children and "children" or "data"
    local w, err, detail = c:watch(path, function(value)
        if value == nil then
            note(path .. " does not exist (waiting for it)")
        elseif kind == "children" then
            out:write(table.concat(value, " "), "\n")
        else
            out:write(value, "\n")
        end
        out:flush()
    end, { kind = kind })
    if not w then fail(v.what, err, detail) end
    local fd = c:fd()
    local stop
    while not stop do
        sys.poll(0.25, v.sigfd, fd)
        c:process()
        for _, s in ipairs(sys.read_signals(v.sigfd)) do
            if s.signo ~= SIG.CHLD then stop = true end
        end
    end
    w:cancel()
end

_M.NAMES = { "locks", "get", "set", "create", "rm", "ls", "stat", "tree", "watch", "counter",
             "services" }

-- Is `n` (a string) an integer a double holds exactly, within
-- +-(2^53-1) as the counter takes it? Compared as digits: tonumber
-- would round a longer one into range.
local MAX_SAFE = "9007199254740991"

local function safe_integer(n)
    local digits = tostring(n):match("^[+-]?0*(%d+)$")
    return digits ~= nil and (#digits < #MAX_SAFE or (#digits == #MAX_SAFE and digits <= MAX_SAFE))
end


-- Runs plain verb `verb` with args[i..] (its options and operands).
function _M.verb(g, verb, args, i)
    local o
    o, i = args_mod.parse_opts(verb, args, i, OPTIONS[verb] or {})
    local n = OPERANDS[verb] or { 1, 1 }
    local ops = args_mod.operands(verb, args, i, n[1], n[2])
    if verb == "counter" and (#ops == 2 or (#ops == 3 and ((ops[2] ~= "add" and ops[2] ~= "set")
                                             or not safe_integer(ops[3])))) then
        usage(verb, "zkcoord: counter PATH [add N | set N], N an integer within +-(2^53-1)")
    end
    local path = args_mod.check_path(verb, ops[1])
    if verb == "rm" and path == "/" then
        usage(verb, "zkcoord: rm: refusing to remove /")
    end
    local v = { path = path, o = o, ops = ops, what = verb .. " " .. path, out = io.stdout }
    if verb == "watch" then
        v.sigfd = assert(sys.block_signals())
    end
    local c = session.connect(g)
    RUN[verb](c, v)
    v.out:flush()
    c:close()
    return ex.OK
end

return _M
