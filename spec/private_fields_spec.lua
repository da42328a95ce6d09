-- A `_` field or method is its owner's: no file under lua/ or bin/ may touch
-- another object's (`x._name`, `x:_name(` with x not `self`). A line that
-- touches another instance of its own file's class (two positions of one
-- line compared) says so with a trailing `-- same class` comment. Runs in
-- the normal suite: no server needed.

-- Every *.lua file under lua/, and the scripts in bin/.
local function files()
    local out = {}
    local p = assert(io.popen("find lua bin -type f \\( -name '*.lua' -o -path 'bin/*' \\) | sort"))
    for f in p:lines() do
        out[#out + 1] = f
    end
    p:close()
    return out
end

-- Names a file may use with a `_` field: its own object and module tables.
local ALLOWED = { self = true, _M = true, M = true, _G = true, string = true }

-- "file:line: obj.field" for each access outside its owner in `path`.
local function offenders(path, out)
    local n = 0
    for line in io.lines(path) do
        n = n + 1
        if line:find("%-%-%s*same class") then
            line = ""
        end
        local code = line:gsub("%-%-.*$", ""):gsub('"[^"]*"', '""'):gsub("'[^']*'", "''")
        for obj, sep, name in code:gmatch("([%w_%.]*[%w_])%s*([%.:])(_[%a][%w_]*)") do
            if not ALLOWED[obj] and name ~= "_VERSION" then
                out[#out + 1] = ("%s:%d: %s%s%s"):format(path, n, obj, sep, name)
            end
        end
    end
end

describe("private fields", function()
    it("the checker sees an access through another object and passes self", function()
        local tmp = os.tmpname()
        local f = assert(io.open(tmp, "w"))
        f:write("local x = client._state\n",
                "self._ok = other:_hidden()\n",
                "local y = self._fine\n",
                "if a._node == b._node then end  -- same class\n")
        f:close()
        local out = {}
        offenders(tmp, out)
        os.remove(tmp)
        assert.same({ tmp .. ":1: client._state", tmp .. ":2: other:_hidden" }, out)
    end)

    it("no file under lua/ or bin/ touches another object's _ fields", function()
        local out = {}
        for _, path in ipairs(files()) do
            offenders(path, out)
        end
        assert(#out == 0, #out .. " private field access(es) outside their owner:\n"
                          .. table.concat(out, "\n"))
    end)
end)
