std = "luajit"
max_line_length = 110
globals = { "ngx" }
files["spec/"] = { std = "+busted" }
-- The library runs on Lua 5.1 to 5.4 and LuaJIT: only what all of them have
-- (differences go through zkcoord.compat).
files["lua/"] = { std = "min" }
files["lua/zkcoord/wait/ngx.lua"] = { read_globals = { "ngx" } }
exclude_files = { "build/", "build-asan/" }
