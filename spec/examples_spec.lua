-- Every example runs as written against a real server (as the README's
-- demo runs them), and so do the README's first example and the Synopsis: each in a process of
-- its own with ZKCOORD_SERVERS set, exit status 0, and the lines that show
-- it did what it says.
local zk = require "helpers.zk"
local proc = require "helpers.proc"

-- Runs `cmd` with ZKCOORD_SERVERS; returns ok, output (stdout and stderr).
local function run(cmd, seconds)
    local out = os.tmpname()
    local rc = os.execute(("ZKCOORD_SERVERS=%s timeout -s KILL %d %s >%s 2>&1")
                          :format(zk.hosts(), seconds or 60, cmd, out))
    local text = proc.read_file(out) or ""
    os.remove(out)
    return rc == 0 or rc == true, text
end

-- The first lua code block after `heading` (nil: the first) in `file`.
local function lua_block(file, heading)
    local text = assert(proc.read_file(file))
    local at = 1
    if heading then
        at = assert(text:find("\n" .. heading, 1, true), heading)
    end
    return assert(text:match("```lua\n(.-)```", at))
end

-- Runs a documented block with the test server: `servers = "..."` becomes
-- ZKCOORD_SERVERS; `prelude` defines what the reader brings.
local function run_block(code, prelude)
    code = code:gsub('servers = "[^"]*"', 'servers = os.getenv("ZKCOORD_SERVERS")')
    local file = os.tmpname()
    assert(proc.write_file_atomic(file, "package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path\n"
                                  .. "package.cpath = 'lua/?.so;' .. package.cpath\n"
                                  .. (prelude or "") .. code))
    local ok, out = run("luajit " .. file)
    os.remove(file)
    return ok, out
end

local EXAMPLES = {
    -- file, args, what its output must hold
    { "basic.lua", "", "" },
    { "lock.lua", "1 /zkcoord-examples/lock 2", "round 2 holds" },
    { "rwlock.lua", "", "" },
    { "counter.lua", "", "" },
    { "election.lua", "", "elected" },
    { "semaphore.lua", "", "" },
    { "barrier.lua", "", "" },
    { "custom_recipe.lua", "", "" },
    { "cache.lua", "", "" },
    { "watch.lua", "", "" },     -- no arguments: it writes a few values itself
    { "work_queue.lua", "", "done urgent job" },
    { "partitioner.lua", "", "two members, 6 partitions each:\ttrue" },
    { "group.lua", "", "api-1 sees: api-1=10.0.0.5:8080 api-2=10.0.0.6:8080" },
    { "persistent_node.lua", "", "back:\tready" },
    { "multi_lock.lua", "", "audit while the transfer holds:\tnil\ttimeout" },
    { "lease.lua", "", "host-b: skipped, host-a has it" },
}

describe("examples #zk #nosan", function()
    lazy_setup(function()
        zk.server()
    end)

    for _, e in ipairs(EXAMPLES) do
        it("examples/" .. e[1] .. " runs as written", function()
            local ok, out = run("luajit examples/" .. e[1] .. " " .. e[2])
            assert.is_true(ok, out)
            assert.truthy(out:find(e[3], 1, true), "expected " .. e[3] .. " in:\n" .. out)
            assert.is_nil(out:find("deprecated", 1, true), out)
        end)
    end

    it("every example in examples/ is run here", function()
        local listed = {}
        for _, e in ipairs(EXAMPLES) do listed[e[1]] = true end
        listed["ttl_lease.lua"] = true     -- spec/line_spec.lua runs it
        local p = assert(io.popen("ls examples/*.lua"))
        for f in p:lines() do
            local name = f:match("([^/]+)$")
            assert.truthy(listed[name], name .. " is not run by spec/examples_spec.lua")
        end
        p:close()
    end)

    it("the README's first example runs as written", function()
        local ok, out = run_block(lua_block("README.md"))
        assert.is_true(ok, out)
        assert.truthy(out:find("holding, fencing token\t%d+"), out)
        assert.truthy(out:find("leading", 1, true), out)
    end)

    it("the Synopsis (docs/client.md) runs as written", function()
        local ok, out = run_block(lua_block("docs/client.md", "## Synopsis"),
            "local function do_the_job(token) print('job with token', token) end\n")
        assert.is_true(ok, out)
        assert.truthy(out:find("job with token\t%d+"), out)
    end)
end)
