-- The API reference (scripts/apidoc.sh, LDoc) shows what the README
-- documents: generated into a temp dir (not the committed docs/api), every
-- `<word>` of a comment is text, not a tag the browser drops, and every
-- method and function the README's Synopsis, Client API and Recipes call is
-- in the reference. Runs in the normal suite: no server needed.

local proc = require "helpers.proc"


local function slurp(path)
    return assert(proc.read_file(path))
end


local function lines_of(cmd)
    local p = assert(io.popen(cmd))
    local out = {}
    for l in p:lines() do
        out[#out + 1] = l
    end
    p:close()
    return out
end


-- Element names LDoc itself writes: its default template and its markup
-- (`code`, links, paragraphs). Any other tag in a page came from a comment.
local function ldoc_tags()
    local path = "/usr/share/lua/5.1/?.lua;/usr/share/lua/5.2/?.lua;" .. package.path
    local tags = {}
    for _, mod in ipairs { "ldoc.html.ldoc_ltp", "ldoc.markup", "ldoc.html" } do
        local file = assert(package.searchpath(mod, path), "LDoc not found: " .. mod)
        for name in slurp(file):gmatch("</?(%a%w*)") do
            tags[name:lower()] = true
        end
    end
    return tags
end


-- "page: <tag ..." for each tag of `html` that is not one of `tags`.
local function foreign_tags(page, html, tags, out)
    html = html:gsub("<!%-%-.-%-%->", ""):gsub("<!%a[^>]*>", "")
    for at, name in html:gmatch("()</?([%a][%w_%-]*)") do
        if not tags[name:lower()] then
            out[#out + 1] = ("%s: %s"):format(page, (html:sub(at, at + 50):gsub("\n", " ")))
        end
    end
end


-- module name -> { [function or method name] = true } of the pages in `dir`.
local function reference(dir)
    local ref = {}
    for _, f in ipairs(lines_of("ls " .. dir .. "/modules")) do
        local mod = f:match("^(.+)%.html$")
        if mod then
            local names = {}
            for name in slurp(dir .. "/modules/" .. f):gmatch('<td class="name" nowrap><a href="#([^"]+)"') do
                names[name:match("[:.]([%w_]+)$") or name] = true
            end
            ref[mod] = names
        end
    end
    return ref
end


-- What the README documents as calls: { what =, line =, section =, recv =,
-- method = } for `obj:method(`, { mod =, fn = } for `zkcoord.x.fn(` (and
-- name = "x.fn"), `require("zkcoord.x").fn(` and `x.fn(` after
-- `local x = require "zkcoord.x"`. Sections: the `---` headings under the
-- Synopsis, Client API and Recipes chapters. A paragraph about a deprecated
-- name documents what the reference leaves out on purpose.
local REQUIRE = "local%s+([%a_][%w_]*)%s*=%s*require%s*%(?%s*[\"']zkcoord%.([%w_.]+)[\"']"
local CHAPTERS = { Synopsis = true, ["Client API"] = true, Recipes = true }

local function readme_calls(text)
    local calls, lines, aliases = {}, {}, {}
    -- local line = require "zkcoord.line": line.new(...) is zkcoord.line's
    for alias, mod in text:gmatch(REQUIRE) do
        aliases[alias] = "zkcoord." .. mod
    end
    for l in (text .. "\n"):gmatch("([^\n]*)\n") do
        lines[#lines + 1] = l
    end
    local chapter, section, para_skip = nil, nil, false
    for i, l in ipairs(lines) do
        local under = lines[i + 1] or ""
        if under:match("^=+$") and l ~= "" then
            chapter, section = l, l
        elseif under:match("^%-%-%-+$") and l ~= "" then
            section = l
        elseif l == "" then
            para_skip = false
        end
        if l:lower():find("deprecated") then
            para_skip = true
        end
        if CHAPTERS[chapter] and not para_skip then
            local function add(t)
                t.line, t.section, t.what = i, section, l
                calls[#calls + 1] = t
            end
            for recv, method in l:gmatch("([%a_][%w_]*):([%a_][%w_]*)%s*[%({]") do
                add { recv = recv, method = method }
            end
            for mod, fn in l:gmatch("require%s*%(?%s*[\"']zkcoord%.([%w_.]+)[\"']%s*%)?%.([%w_]+)%s*[%({]") do
                add { mod = "zkcoord." .. mod, fn = fn }
            end
            for alias, fn in l:gmatch("%f[%w_.]([%a_][%w_]*)%.([%a_][%w_]*)%s*[%({]") do
                if aliases[alias] then
                    add { mod = aliases[alias], fn = fn }
                end
            end
            for name in l:gmatch("%f[%w_.]zkcoord%.([%w_.]+)%s*[%({]") do
                local mod, fn = name:match("^(.*)%.([%w_]+)$")
                add { mod = mod and "zkcoord." .. mod or "zkcoord", fn = fn or name, name = name }
            end
        end
    end
    return calls
end


-- The README and the reference pages it points to (docs/client.md,
-- docs/recipes.md ...), as one text with setext headings (what
-- readme_calls reads): "# T" a chapter, "## T" a section; code blocks as
-- they are.
local PAGES = { "README.md", "docs/concepts.md", "docs/client.md", "docs/recipes.md",
                "docs/nginx.md", "docs/command.md" }
local function documented_text()
    local out = {}
    for _, page in ipairs(PAGES) do
        local fence = false
        for l in (slurp(page) .. "\n"):gmatch("([^\n]*)\n") do
            if l:match("^%s*```") then fence = not fence end
            local h1, h2 = l:match("^# (.+)$"), l:match("^## (.+)$")
            if not fence and h1 then
                out[#out + 1] = h1
                out[#out + 1] = ("="):rep(#h1)
            elseif not fence and h2 then
                out[#out + 1] = h2
                out[#out + 1] = ("-"):rep(#h2)
            else
                out[#out + 1] = l
            end
        end
    end
    return table.concat(out, "\n")
end


-- Variable name -> the recipe modules the README binds it to anywhere
-- (`q = client:line(...)`, `q = client:work_queue(...)`).
local function bindings(ref, readme)
    local out = {}
    for var, recipe in readme:gmatch("([%a_][%w_]*)[%w_%s,]-=%s*client:([%a_][%w_]*)%s*%(") do
        if ref["zkcoord." .. recipe] then
            out[var] = out[var] or {}
            out[var][#out[var] + 1] = "zkcoord." .. recipe
        end
    end
    return out
end


-- Modules a call `recv:method(` in a README section may be on: those the
-- heading names and the recipes the section makes with
-- client:<recipe>(...), plus the recipes the README binds `recv` to and
-- the client (futures); every page for a section about no module (the
-- waiter's).
local function section_modules(ref, section, calls, bound)
    local mods = {}
    for word in section:gmatch("[%w_]+") do
        if ref["zkcoord." .. word] then
            mods[#mods + 1] = "zkcoord." .. word
        end
    end
    for _, c in ipairs(calls) do
        if c.section == section and c.recv == "client" and ref["zkcoord." .. c.method] then
            mods[#mods + 1] = "zkcoord." .. c.method
        end
    end
    if #mods == 0 then
        for mod in pairs(ref) do
            mods[#mods + 1] = mod
        end
    end
    for _, mod in ipairs(bound or {}) do
        mods[#mods + 1] = mod
    end
    mods[#mods + 1] = "zkcoord.client"
    return mods
end


-- The README's calls that the reference lacks, as "README:line (section):
-- what".
local function missing_calls(ref, readme)
    local calls, binds = readme_calls(readme), bindings(ref, readme)
    local out = {}
    for _, c in ipairs(calls) do
        local found
        if c.mod then
            found = ref[c.mod] and ref[c.mod][c.fn]
        elseif c.recv == "client" then
            -- a client method, or a recipe's constructor: client:lock(...) is
            -- zkcoord.lock.new(client, ...)
            found = ref["zkcoord.client"][c.method]
                or (ref["zkcoord." .. c.method] and ref["zkcoord." .. c.method].new)
        else
            local mods = section_modules(ref, c.section, calls, binds[c.recv])
            for _, mod in ipairs(mods) do
                found = found or ref[mod][c.method]
            end
        end
        if not found then
            out[#out + 1] = ("README.md:%d (%s): %s"):format(c.line, c.section,
                c.mod and (c.mod .. "." .. c.fn) or (c.recv .. ":" .. c.method))
        end
    end
    return out, #calls
end


describe("API reference", function()
    local dir, ref

    setup(function()
        dir = assert(proc.mktemp_dir("zkcoord-apidoc-spec."))
        local log = lines_of("bash scripts/apidoc.sh --out " .. dir .. " 2>&1; echo rc=$?")
        assert(log[#log] == "rc=0", table.concat(log, "\n"))
        ref = reference(dir)
    end)

    teardown(function()
        if dir then
            proc.rm_rf(dir)
        end
    end)

    it("prints every <word> of a comment as text, never as a tag", function()
        local tags, bad = ldoc_tags(), {}
        for _, f in ipairs(lines_of("cd " .. dir .. " && find . -name '*.html' | sort")) do
            foreign_tags(f:sub(3), slurp(dir .. "/" .. f), tags, bad)
        end
        assert.same({}, bad)
        -- and the escaped form is there: node layouts read as written
        local election = slurp(dir .. "/modules/zkcoord.election.html")
        assert.truthy(election:find("&lt;path&gt;/_c_&lt;uuid&gt;-latch-&lt;seq&gt;", 1, true))
    end)

    it("the checker sees a foreign tag and passes LDoc's own", function()
        local bad = {}
        foreign_tags("x.html", '<p>layout: <a href="#x">x</a> <code>a</code> &lt;path&gt;</p>',
                     ldoc_tags(), bad)
        assert.same({}, bad)
        foreign_tags("x.html", "<p>layout: <path>/_c_<uuid>-latch-</p>", ldoc_tags(), bad)
        assert.same({ "x.html: <path>/_c_<uuid>-latch-</p>", "x.html: <uuid>-latch-</p>" }, bad)
    end)

    it("has config.ld's title, internals apart, every recipe on the client's page", function()
        local index = slurp(dir .. "/index.html")
        assert.truthy(index:find("<title>zkcoord API reference</title>", 1, true))
        assert.truthy(index:find("<h1>zkcoord</h1>", 1, true))
        -- the modules users call first, then the internals, each in its own folder
        local modules_at = assert(index:find("<h2>Modules</h2>", 1, true))
        local internals_at = assert(index:find("<h2>Internals</h2>", 1, true))
        assert.is_true(modules_at < internals_at)
        for _, m in ipairs { "util", "client.checks", "client.pump", "line.node", "cli.sys", "compat" } do
            assert.is_nil(ref["zkcoord." .. m], m .. " listed among the modules")
            assert.truthy(proc.read_file(dir .. "/internals/zkcoord." .. m .. ".html"), m)
        end
        assert.truthy(ref["zkcoord.lock"] and ref["zkcoord.line.rules"])
        -- every client:<recipe>() that zkcoord's init registers
        local src, missing = slurp("lua/zkcoord/init.lua"), {}
        local recipes = assert(src:match("local RECIPES = (%b{})"))
        for method in recipes:gmatch("\n%s*([%w_]+) = ") do
            if method ~= "queue" and not ref["zkcoord.client"][method] then  -- queue: the old name of line
                missing[#missing + 1] = method
            end
        end
        assert.same({}, missing)
    end)

    it("has every method and function the README documents", function()
        local missing, n = missing_calls(ref, documented_text())
        assert.same({}, missing)
        assert.is_true(n > 100, "README calls found: " .. n)
    end)

    it("reaches every zkcoord.x.fn the README calls through require \"zkcoord\"", function()
        local zkcoord, missing = require("zkcoord"), {}
        for _, c in ipairs(readme_calls(documented_text())) do
            if c.name then
                local v = zkcoord
                for k in c.name:gmatch("[^.]+") do
                    v = type(v) == "table" and v[k] or nil
                end
                if type(v) ~= "function" then
                    missing[#missing + 1] = ("README.md:%d: zkcoord.%s"):format(c.line, c.name)
                end
            end
        end
        assert.same({}, missing)
        assert.equal(require("zkcoord.lock").revoke, zkcoord.lock.revoke)
    end)

    it("the README parser finds methods in syntax lines and code, and skips deprecated names", function()
        local readme = table.concat({
            "Client API", "==========", "", "state", "-----",
            "`syntax: s = client:state()`, `client:no_such_method(x)`", "",
            "lock", "----", "`lock:acquire(t)`, `lock:no_such(t)`, `zkcoord.lock.revoke(c, n)`,",
            "`require(\"zkcoord.lock\").nope(c)`", "",
            "The deprecated `client:queue(parent)` is the old name.", "",
            "Command line", "============", "`client:not_here()`",
        }, "\n")
        local missing, n = missing_calls(ref, readme)
        assert.same({
            "README.md:6 (state): client:no_such_method",
            "README.md:10 (lock): lock:no_such",
            "README.md:11 (lock): zkcoord.lock.nope",
        }, missing)
        assert.equal(6, n)
    end)
end)
