-- helpers.options, the option parser of tools/ and bench/: what it returns,
-- and how a script that uses it ends on a bad argument (run as a separate
-- process, as a user runs the scripts; no server is needed for either).
local options = require "helpers.options"

local ROOT = os.getenv("PWD") or "."

-- Runs `cmd` from the repository root (bounded) and returns its exit
-- status and stderr.
local function run(cmd)
    local errf = os.tmpname()
    local f = assert(io.popen(("cd %q && timeout 60 %s 2>%q; echo $?"):format(ROOT, cmd, errf)))
    local status = tonumber(f:read("*a"):match("(%d+)%s*$"))
    f:close()
    local ef = assert(io.open(errf))
    local err = ef:read("*a")
    ef:close()
    os.remove(errf)
    return status, err
end

describe("helpers.options", function()
    it("copies the defaults and sets what the arguments give", function()
        local defaults = { rounds = 3, doc = false }
        local opts, rest = options.parse({ "--doc", "lock", "--rounds", "2", "--only", "a,b",
                                           "--duration", "0.5" }, {
            positional = 1,
            defaults = defaults,
            options = { ["--doc"] = "flag", ["--rounds"] = "number", ["--only"] = "string",
                        ["--duration"] = { "number", key = "duration_set" } },
        })
        assert.same({ rounds = 2, doc = true, only = "a,b", duration_set = 0.5 }, opts)
        assert.same({ "lock" }, rest)
        assert.same({ rounds = 3, doc = false }, defaults)
    end)

    it("numbers reads a comma-separated list and rejects anything else", function()
        assert.same({ 1000, 10000 }, options.numbers("1000,10000"))
        assert.same({ 16 }, options.numbers("16"))
        assert.same({ 0.5, 2 }, options.numbers("0.5,2"))
        for _, bad in ipairs({ "", "1,x", "1,,2", "1 2" }) do
            local v, why = options.numbers(bad)
            assert.is_nil(v, bad)
            assert.is_string(why)
        end
    end)

    it("prints the reason and the usage and exits with the status on a bad argument", function()
        local script = [[package.path = "spec/?.lua;" .. package.path
            require("helpers.options").parse({ "--rounds", "x" }, { name = "t.lua", usage = "usage: t",
                status = 7, options = { ["--rounds"] = "number" } })
            os.exit(0)]]
        local status, err = run(("luajit -e %q"):format(script))
        assert.equal(7, status)
        assert.equal("t.lua: --rounds needs a number\nusage: t\n", err)
    end)
end)

describe("the benchmarks' options", function()
    -- Each script parses before it starts anything, so a bad argument costs
    -- no server.
    local cases = {
        { "bench/run.lua --bogus", 2 },
        { "bench/run.lua --rounds", 2 },
        { "bench/run.lua --duration x", 2 },
        { "bench/run.lua --only zk", 2 },
        { "bench/run.lua --only zkcoord --rows nope", 2 },
        { "bench/scale.lua", 64 },
        { "bench/scale.lua lokc", 64 },
        { "bench/scale.lua lock --bogus", 64 },
        { "bench/scale.lua lock --waiters 1,x", 64 },
        { "bench/ngx.lua --counts 1000", 64 },
        { "bench/ngx.lua scale --idle 3", 64 },
        { "bench/ngx.lua scale --only xlok", 64 },
        { "bench/ngx.lua scale --window", 64 },
    }
    for _, c in ipairs(cases) do
        it(("rejects `%s` with the usage and status %d"):format(c[1], c[2]), function()
            local status, err = run("luajit " .. c[1])
            assert.equal(c[2], status)
            local name = c[1]:match("bench/([%w_]+%.lua)")
            assert.matches("^" .. name:gsub("%.", "%%.") .. ": [^\n]+\nusage: luajit bench/" .. name, err)
        end)
    end

    for _, script in ipairs({ "run", "scale", "ngx" }) do
        it(("prints the usage of bench/%s.lua on --help and exits 0"):format(script), function()
            local status, err = run(("luajit bench/%s.lua --help"):format(script))
            assert.equal(0, status)
            assert.matches("^usage: luajit bench/" .. script .. "%.lua", err)
        end)
    end
end)
