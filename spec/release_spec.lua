-- The release is consistent: one version (lua/zkcoord/version.lua) in every
-- module, core.so, the release rockspec and CHANGES.md; the rockspecs agree
-- with each other and with LICENSE; node uuids never repeat across
-- processes that seed math.random alike. (The rock's build and install as a
-- normal user on every VM: scripts/rock-smoke.sh.)
local VERSION = require "zkcoord.version"

local function read(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("*a")
    f:close()
    return s
end

local function load_rockspec(path)
    local env = {}
    local chunk = assert(loadfile(path))
    setfenv(chunk, env)
    chunk()
    return env
end

local function lua_files(dir, out)
    out = out or {}
    local p = io.popen("find " .. dir .. " -name '*.lua' | sort")
    for line in p:lines() do
        out[#out + 1] = line
    end
    p:close()
    return out
end

-- Variables luarocks substitutes in a cmake build (anything else is left as
-- "$(X)" with a warning, as $(BUILD_DIR) was).
local LUAROCKS_VARS = {
    LUA_INCDIR = true, LUA_LIBDIR = true, LUA_BINDIR = true, LUA = true,
    LUADIR = true, LIBDIR = true, BINDIR = true, CONFDIR = true, DOCDIR = true,
    PREFIX = true, CFLAGS = true, LIBFLAG = true,
    ZOOKEEPER_INCDIR = true, ZOOKEEPER_LIBDIR = true, ZOOKEEPER_DIR = true,
}

describe("release", function()
    local release_path = "rockspec/zkcoord-" .. VERSION .. "-1.rockspec"

    it("has one version, x.y.z, that every module and core.so report", function()
        assert.is_truthy(VERSION:match("^%d+%.%d+%.%d+$"))
        assert.equal(VERSION, require("zkcoord")._VERSION)
        assert.equal(VERSION, require("zkcoord.core")._VERSION)
        local n = 0
        for _, file in ipairs(lua_files("lua/zkcoord")) do
            local name = file:match("^lua/(.-)%.lua$"):gsub("/", "."):gsub("%.init$", "")
            if name ~= "zkcoord.ngx" and name ~= "zkcoord.wait.ngx" then   -- need nginx
                local m = require(name)
                if type(m) == "table" and m._VERSION ~= nil then
                    assert.equal(VERSION, m._VERSION, name)
                    n = n + 1
                end
            end
            -- No module writes its own version: they all read zkcoord.version.
            if name ~= "zkcoord.version" then
                assert.is_nil(read(file):match('_VERSION%s*=%s*"'), file)
            end
        end
        assert.is_true(n >= 10)
    end)

    it("has a release rockspec of that version, from a tag, and CHANGES names it", function()
        local r = load_rockspec(release_path)
        assert.equal("zkcoord", r.package)
        assert.equal(VERSION .. "-1", r.version)
        assert.equal("v" .. VERSION, r.source.tag)
        assert.is_truthy(r.source.url:match("^git%+https://"))
        assert.is_truthy(read("CHANGES.md"):find("\n## " .. VERSION, 1, true))
        local p = io.popen("ls rockspec")
        for name in p:lines() do
            assert.is_truthy(name == "zkcoord-scm-1.rockspec"
                             or name == "zkcoord-" .. VERSION .. "-1.rockspec", "stale rockspec " .. name)
        end
        p:close()
    end)

    it("has an scm rockspec that differs from the release only in version and tag", function()
        local r = load_rockspec(release_path)
        local s = load_rockspec("rockspec/zkcoord-scm-1.rockspec")
        assert.equal("scm-1", s.version)
        assert.is_nil(s.source.tag)
        assert.equal(r.source.url, s.source.url)
        assert.same(r.description, s.description)
        assert.same(r.dependencies, s.dependencies)
        assert.same(r.external_dependencies, s.external_dependencies)
        assert.same(r.build, s.build)
    end)

    it("names a homepage and the license of LICENSE, and luarocks knows every variable", function()
        for _, path in ipairs({ release_path, "rockspec/zkcoord-scm-1.rockspec" }) do
            local r = load_rockspec(path)
            assert.is_truthy(r.description.homepage:match("^https://"))
            assert.equal("Apache-2.0", r.description.license)
            for k, v in pairs(r.build.variables) do
                for var in tostring(v):gmatch("%$%(([%w_]+)%)") do
                    assert.is_true(LUAROCKS_VARS[var] == true, path .. ": " .. k .. " uses $(" .. var .. ")")
                end
            end
        end
        local license = read("LICENSE")
        assert.is_truthy(license:find("Apache License", 1, true))
        assert.is_truthy(license:find("Version 2.0, January 2004", 1, true))
        assert.is_truthy(license:find("END OF TERMS AND CONDITIONS", 1, true))
    end)

    it("packs every rockspec offline as docs/install.md says, the release after its tag step", function()
        local readme = read("docs/install.md")
        -- the README's offline git setting and its release tag command
        local export = readme:match("\n(export GIT_CONFIG_COUNT=1 .-)\nluarocks pack")
        assert.truthy(export, "no insteadOf export in docs/install.md")
        export = export:gsub("\\\n%s*", " ")
        local tag_cmd = readme:match("\n(git tag %-a v" .. VERSION:gsub("%.", "%%.") .. " [^\n]*)")
        assert.truthy(tag_cmd, "no release tag step in docs/install.md")
        assert.truthy(readme:find("luarocks pack rockspec/zkcoord-" .. VERSION .. "-1.rockspec", 1, true))
        local p = io.popen("mktemp -d /tmp/zkcoord-release.XXXXXX")
        local tmp = p:read("*l")
        p:close()
        -- a clone stands in for the repository; the releaser's tag, on HEAD
        -- (the push is the releaser's, not ours)
        local tag_here = tag_cmd:gsub("<commit>", "HEAD"):gsub(" && git push.*$", "")
        local script = table.concat({
            "set -e",
            "git clone -q \"$PWD\" " .. tmp .. "/clone",
            "git -C " .. tmp .. "/clone -c user.name=r -c user.email=r@localhost " .. tag_here:sub(5),
            "mkdir " .. tmp .. "/pack",
            export:gsub("/path/to/clone", tmp .. "/clone"),
            "cd " .. tmp .. "/pack",
            "for r in \"$OLDPWD\"/rockspec/*.rockspec; do luarocks pack \"$r\" >/dev/null; done",
            "ls",
        }, "\n")
        p = io.popen("bash -c '" .. script:gsub("'", "'\\''") .. "' 2>&1")
        local out = p:read("*a")
        p:close()
        os.execute("rm -rf " .. tmp)
        local q = io.popen("ls rockspec")
        for name in q:lines() do
            local rock = name:gsub("%.rockspec$", ".src.rock")
            assert.truthy(out:find(rock, 1, true), out)
        end
        q:close()
    end)

    it("gives different node uuids to processes that seed math.random alike", function()
        local cmd = [[luajit -e 'package.path="lua/?.lua;lua/?/init.lua;"..package.path
            package.cpath="]] .. package.cpath .. [[;"..package.cpath
            math.randomseed(1) io.write(require("zkcoord.queue").uuid())']]
        local seen = {}
        for _ = 1, 3 do
            local p = io.popen(cmd)
            local u = p:read("*a")
            p:close()
            assert.is_truthy(u:match("^%x+%-%x+%-4%x+%-[89ab]%x+%-%x+$"), u)
            assert.is_nil(seen[u])
            seen[u] = true
        end
    end)
end)
