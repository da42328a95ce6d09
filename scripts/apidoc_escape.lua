-- Escapes HTML in the comments of the Lua files named on the command line
-- (in place), for scripts/apidoc.sh: LDoc's "backtick" format copies comment
-- text into the pages as it is, so a node layout such as <path>/_c_<uuid>
-- would be read as unknown tags and vanish. `code` spans too: Debian's
-- LDoc 1.4.6 prints them as written, backticks and all. Only what follows
-- an @usage tag in its comment is left alone (LDoc escapes usage itself).
local ESC = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;" }


local function escape_block(text)
    local at = text:find("@usage", 1, true) or #text + 1
    return (text:sub(1, at - 1):gsub("[&<>]", ESC)) .. text:sub(at)
end


local function escape_file(name)
    local f = assert(io.open(name, "rb"))
    local src = f:read("*a")
    f:close()
    local out, block = {}, {}
    local function flush()
        if #block > 0 then
            out[#out + 1] = escape_block(table.concat(block, "\n"))
            block = {}
        end
    end
    -- A run of comment lines is one block, as LDoc reads it.
    for line in (src .. "\n"):gmatch("([^\n]*)\n") do
        if line:match("^%s*%-%-") and not line:match("^%s*%-%-%[=*%[") then
            block[#block + 1] = line
        else
            flush()
            out[#out + 1] = line
        end
    end
    flush()
    f = assert(io.open(name, "wb"))
    f:write(table.concat(out, "\n"))
    f:close()
end


for _, name in ipairs(arg) do
    escape_file(name)
end
