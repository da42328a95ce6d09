-- chaos.doc: --doc, the generated part of the chaos section of
-- docs/RELIABILITY.md (between <!-- chaos-run:begin --> and
-- <!-- chaos-run:end -->): when, on what, the command, the checker's table.
local zkcoord = require "zkcoord"
local proc = require "helpers.proc"

local _M = {}

-- Replaces the text between two markers of a file (the markers stay).
local function replace_between(text, b, e, body)
    local s1, e1 = text:find(b, 1, true)
    local s2 = text:find(e, 1, true)
    if not s1 or not s2 or s2 < e1 then
        return nil
    end
    return text:sub(1, e1) .. "\n" .. body .. "\n" .. text:sub(s2)
end


local DOC_SKELETON = [[
# Reliability

What zkcoord has been shown to survive, with the commands to reproduce it.

## Chaos run

<!-- chaos:begin -->
<!-- chaos-run:begin -->
<!-- chaos-run:end -->
<!-- chaos:end -->

## Fuzzer

<!-- fuzz:begin -->
<!-- fuzz:end -->

## Soak

<!-- soak:begin -->
<!-- soak:end -->
]]


--- Writes the generated part of the chaos section of <root>/docs/RELIABILITY.md;
--- returns its path.
function _M.write(root, result, cmd)
    local path = root .. "/docs/RELIABILITY.md"
    local text = proc.read_file(path) or DOC_SKELETON
    if not text:find("<!-- chaos:begin -->", 1, true) then
        text = text .. "\n## Chaos run\n\n<!-- chaos:begin -->\n<!-- chaos:end -->\n"
    end
    if not text:find("<!-- chaos-run:begin -->", 1, true) then
        text = text:gsub("<!%-%- chaos:begin %-%->",
                         "<!-- chaos:begin -->\n<!-- chaos-run:begin -->\n<!-- chaos-run:end -->", 1)
    end
    local uname = io.popen("uname -srm"):read("*l") or "?"
    local cpu = (io.popen("grep -m1 'model name' /proc/cpuinfo"):read("*l") or ""):match(":%s*(.*)$")
    local ncpu = io.popen("nproc"):read("*l") or "?"
    local zkv = (io.popen("dpkg-query -W -f='${Version}' zookeeper 2>/dev/null"):read("*l") or "?")
    local body = table.concat({
        ("Last full run: %s, on %s (%s CPUs, %s), ZooKeeper %s (Debian package), "
         .. "libzookeeper_mt %s, LuaJIT."):format(os.date("!%Y-%m-%d %H:%M UTC"), uname, ncpu,
                                                  cpu or "?", zkv,
                                                  tostring(zkcoord.zookeeper_version)),
        "",
        "```sh",
        cmd,
        "```",
        "",
        result.text,
    }, "\n")
    local new = replace_between(text, "<!-- chaos-run:begin -->", "<!-- chaos-run:end -->", body)
    assert(new, "docs/RELIABILITY.md: chaos-run markers not found")
    assert(proc.write_file(path, new))
    return path
end

return _M
