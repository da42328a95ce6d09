#!/usr/bin/env bash
# Builds the C core into lua/zkcoord/core.so (and, with --sanitize, an
# ASan+UBSan build into build-asan/lib/zkcoord/core.so).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--sanitize" ]; then
  cmake -S . -B build-asan -DZKCOORD_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
        -DZKCOORD_OUTPUT_DIR="$PWD/build-asan/lib/zkcoord" >/dev/null
  cmake --build build-asan -j 2 >/dev/null
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j 2 >/dev/null
fi
