-- zkcoord.cli.locks: `zkcoord locks PATH`: the lines of lock-like nodes
-- at and below PATH (this library's and Curator's locks, read-write locks
-- and leader latches, kazoo's locks), recognised by their names. Not a
-- public API.
--
-- A lock is a node with at least one child named as a lock node. The walk
-- starts at PATH and goes depth first through every child that is not a
-- lock node (a lock node's own children, if any, are not locks of ours),
-- so a parent of many locks lists them all, and a lock that has other
-- children (e.g. a sub-lock beside its line) lists those too.
local sys = require "zkcoord.cli.sys"
local ex = require "zkcoord.cli.exit"
local show = require "zkcoord.cli.show"

local fail = ex.fail

local _M = {}

local KINDS = {   -- most specific first
    { "__READ__(%d+)$", "read" },
    { "__WRIT__(%d+)$", "write" },
    { "__rlock__(%d+)$", "read" },
    { "__lock__(%d+)$", "lock" },
    { "lock%-(%d+)$", "lock" },
    { "latch%-(%d+)$", "leader" },
}

_M.COLUMNS = { "LOCK", "STATE", "KIND", "NODE", "DATA", "SESSION", "AGE" }


-- The kind of a node by its name ("read", "write", "lock", "leader") and
-- its sequence number; nil for another node.
function _M.classify(name)
    for _, k in ipairs(KINDS) do
        local seq = name:match(k[1])
        if seq then
            return k[2], tonumber(seq)
        end
    end
end


-- The rows of the lock at `path` whose children are `names`, in line
-- order (appended to `rows`): lock, state (holder or waiter), kind, node,
-- data, session (hex or nil), age (seconds). Returns the children that
-- are not lock nodes, to walk on.
local function lock_rows(c, path, names, now, rows)
    local entries, others = {}, {}
    for _, name in ipairs(names) do
        local kind, seq = _M.classify(name)
        if kind then
            entries[#entries + 1] = { name = name, kind = kind, seq = seq }
        else
            others[#others + 1] = name
        end
    end
    table.sort(entries, function(a, b) return a.seq < b.seq end)
    local futures = {}
    for k, en in ipairs(entries) do
        futures[k] = c:send("get", show.join(path, en.name))
    end
    local exclusive_seen, first = false, true
    for k, en in ipairs(entries) do
        local data, st = futures[k]:wait()
        if data then        -- else gone meanwhile
            local holder
            if en.kind == "read" then
                holder = not exclusive_seen
            else
                holder = first
                exclusive_seen = true
            end
            first = false
            rows[#rows + 1] = { lock = path, state = holder and "holder" or "waiter",
                                kind = en.kind, node = en.name, data = data,
                                session = st.ephemeral_owner and ("0x" .. st.ephemeral_owner),
                                age = math.max(0, now - st.ctime) }
        end
    end
    table.sort(others)
    return others
end


-- The rows of the lock at `path` alone (no walk below it).
function _M.at(c, path)
    local names, err, detail = c:children(path)
    if not names then
        fail("locks " .. path, err, detail)
    end
    local rows = {}
    lock_rows(c, path, names, sys.walltime(), rows)
    return rows
end


-- Every lock at or below `path` (see the top of this file): the rows, in
-- walk order (depth first, children by name), each lock's in line order.
-- A node deleted during the walk is skipped; `path` itself must exist.
function _M.collect(c, path)
    local rows, now = {}, sys.walltime()
    local function walk(p, top)
        local names, err, detail = c:children(p)
        if not names then
            if err == "nonode" and not top then return end     -- deleted meanwhile
            fail("locks " .. path, err, detail)
        end
        for _, name in ipairs(lock_rows(c, p, names, now, rows)) do
            walk(show.join(p, name))
        end
    end
    walk(path, true)
    return rows
end


-- A JSON string (the data may hold any byte: control characters escaped,
-- others passed as they are).
local ESCAPED = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t",
                 ["\r"] = "\\r" }

local function json_string(s)
    return '"' .. s:gsub('[%c"\\]', function(ch)
        return ESCAPED[ch] or ("\\u%04x"):format(ch:byte())
    end) .. '"'
end

local function json_row(r)
    return ('{"lock":%s,"state":%s,"kind":%s,"node":%s,"data":%s,"session":%s,"age":%.1f}')
        :format(json_string(r.lock), json_string(r.state), json_string(r.kind),
                json_string(r.node), json_string(r.data),
                r.session and json_string(r.session) or "null", r.age)
end


-- Prints the rows of collect(c, path) on `out`: a header and one
-- tab-separated line per node, or (json) one JSON array of objects.
function _M.print(c, path, json, out)
    out = out or io.stdout
    local rows = _M.collect(c, path)
    if json then
        local items = {}
        for k, r in ipairs(rows) do items[k] = json_row(r) end
        out:write("[", table.concat(items, ",\n "), "]\n")
        return ex.OK
    end
    out:write(table.concat(_M.COLUMNS, "\t"), "\n")
    for _, r in ipairs(rows) do
        out:write(table.concat({ r.lock, r.state, r.kind, r.node, show.printable(r.data),
                                 r.session or "-", ("%.1fs"):format(r.age) }, "\t"), "\n")
    end
    return ex.OK
end

return _M
