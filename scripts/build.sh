#!/usr/bin/env bash
# Builds the C core into lua/zkcoord/core.so (LuaJIT's headers). Options:
#   --sanitize   an ASan+UBSan build into build-asan/lib/zkcoord/core.so
#   --lua 5.4    a build against Lua 5.4's headers into
#                build-lua5.4/lib/zkcoord/core.so (5.1, 5.2, 5.3, 5.4)
#   --secure     a core with TLS and SASL (connect's `tls` and `sasl` options)
#                into build-tls/lib/zkcoord/core.so, linked with the
#                libzookeeper scripts/build-zkclient-tls.sh builds (once per
#                machine) with OpenSSL and Cyrus SASL; use it with
#                ZKCOORD_CPATH="build-tls/lib/?.so" (checkout) or install it
#                in place of the rock's core. --tls: the same (its old name)
#   --secure --sanitize  the same with ASan+UBSan, into build-tls-asan/lib/zkcoord/core.so
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--secure" ]; then set -- --tls "${@:2}"; fi
if [ "${1:-}" = "--sanitize" ]; then
  cmake -S . -B build-asan -DZKCOORD_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
        -DZKCOORD_OUTPUT_DIR="$PWD/build-asan/lib/zkcoord" >/dev/null
  cmake --build build-asan -j 2 >/dev/null
elif [ "${1:-}" = "--lua" ]; then
  v=${2:?"usage: build.sh --lua 5.1|5.2|5.3|5.4"}
  inc=/usr/include/lua$v
  [ -f "$inc/lua.h" ] || { echo "build.sh: no $inc/lua.h (install liblua$v-dev)" >&2; exit 1; }
  cmake -S . -B "build-lua$v" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLUA_INCDIR="$inc" \
        -DZKCOORD_OUTPUT_DIR="$PWD/build-lua$v/lib/zkcoord" >/dev/null
  cmake --build "build-lua$v" -j 2 >/dev/null
elif [ "${1:-}" = "--tls" ] && [ "${2:-}" = "--sanitize" ]; then
  bash scripts/build-zkclient-tls.sh
  cmake -S . -B build-tls-asan -DCMAKE_BUILD_TYPE=Debug -DZKCOORD_TLS=ON -DZKCOORD_SANITIZE=ON \
        -DZKCOORD_TLS_PREFIX="$PWD/build/zkclient-tls" \
        -DZKCOORD_OUTPUT_DIR="$PWD/build-tls-asan/lib/zkcoord" >/dev/null
  cmake --build build-tls-asan -j 2 >/dev/null
elif [ "${1:-}" = "--tls" ]; then
  bash scripts/build-zkclient-tls.sh
  cmake -S . -B build-tls -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZKCOORD_TLS=ON \
        -DZKCOORD_TLS_PREFIX="$PWD/build/zkclient-tls" \
        -DZKCOORD_OUTPUT_DIR="$PWD/build-tls/lib/zkcoord" >/dev/null
  cmake --build build-tls -j 2 >/dev/null
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j 2 >/dev/null
fi
