-- bench/doc_section.lua: replaces one marked section of a document
-- (`<!-- NAME:begin -->` ... `<!-- NAME:end -->`), or appends it when the
-- document has none, so each bench rewrites only its own part.
--   local replace_section = dofile("bench/doc_section.lua")
--   replace_section("docs/PERFORMANCE.md", "cpu", text)  -- text carries the markers
return function(doc, marker, section)
    local f = io.open(doc)
    local text = f and f:read("*a") or "# Performance\n"
    if f then f:close() end
    local m = marker:gsub("%-", "%%-")
    local pat = "<!%-%- " .. m .. ":begin %-%->.-<!%-%- " .. m .. ":end %-%->"
    if text:find(pat) then
        text = text:gsub(pat, function() return section end)
    else
        text = text .. "\n" .. section .. "\n"
    end
    f = assert(io.open(doc, "w"))
    f:write(text)
    f:close()
    print("wrote " .. doc)
end
