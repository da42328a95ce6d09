-- zkcoord.cli.locks: `zkcoord locks PATH`: the lines of lock-like nodes
-- under PATH (this library's and Curator's locks, read-write locks and
-- leader latches), recognised by their names. Not a public API.
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

-- Prints the lock, rwlock and leader nodes under path, in line order:
-- holder or waiter, kind, node, its data, owner session, age.
function _M.print(c, path)
    local names, err, detail = c:children(path)
    if not names then
        fail("locks " .. path, err, detail)
    end
    local entries = {}
    for _, name in ipairs(names) do
        local kind, seq = _M.classify(name)
        if kind then
            entries[#entries + 1] = { name = name, kind = kind, seq = seq }
        end
    end
    table.sort(entries, function(a, b) return a.seq < b.seq end)
    local futures = {}
    for k, en in ipairs(entries) do
        futures[k] = c:send("get", show.join(path, en.name))
    end
    local now = sys.walltime()
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
            io.stdout:write(table.concat({
                holder and "holder" or "waiter", en.kind, en.name, show.printable(data),
                st.ephemeral_owner and ("0x" .. st.ephemeral_owner) or "-",
                ("%.1fs"):format(math.max(0, now - st.ctime)),
            }, "\t"), "\n")
        end
    end
    return ex.OK
end

return _M
