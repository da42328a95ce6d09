std = "luajit"
max_line_length = 110
globals = { "ngx" }
files["spec/"] = { std = "+busted" }
files["lua/zkcoord/wait/ngx.lua"] = { read_globals = { "ngx" } }
exclude_files = { "build/", "build-asan/" }
