#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds the normal and the
# ASan+UBSan core, runs luacheck, checks the API reference is current, runs
# every busted spec against real ZooKeeper servers with each build, and
# packs and installs the rock as a non-root user and runs its smoke test on
# Lua 5.1, 5.2, 5.3, 5.4 and LuaJIT. Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh || exit 1
bash scripts/build.sh || exit 1
bash scripts/build.sh --sanitize || exit 1

passed=0; failed=0
log=$(mktemp /tmp/zkcoord-test.XXXXXX)

count() {  # adds busted's summary line in $log to the totals
  local line s f e
  line=$(grep -E '^[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors? / [0-9]+ pending' "$log" | tail -n 1)
  if [ -z "$line" ]; then
    echo "!! $1: no busted summary (crash?)"; failed=$((failed + 1)); return
  fi
  s=$(echo "$line" | sed -E 's/^([0-9]+) success.*/\1/')
  f=$(echo "$line" | sed -E 's/.* ([0-9]+) failures? .*/\1/')
  e=$(echo "$line" | sed -E 's/.* ([0-9]+) errors? .*/\1/')
  passed=$((passed + s)); failed=$((failed + f + e))
  echo "== $1: $line"
}

echo "== luacheck"
if luacheck -q lua/ spec/ examples/ bench/ tools/ scripts/ bin/zkcoord >"$log" 2>&1; then
  passed=$((passed + 1)); echo "luacheck: clean"
else
  cat "$log"; failed=$((failed + 1))
fi

echo "== API reference (scripts/apidoc.sh --check)"
if bash scripts/apidoc.sh --check >"$log" 2>&1; then
  passed=$((passed + 1)); cat "$log"
else
  cat "$log"; failed=$((failed + 1))
fi

echo "== busted (normal build)"
busted -o utfTerminal "$@" 2>&1 | tee "$log"
count "normal build"

echo "== busted (ASan+UBSan build)"
asan=$(gcc -print-file-name=libasan.so)
ubsan=$(gcc -print-file-name=libubsan.so)
LD_PRELOAD="$asan $ubsan" \
ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
ZKCOORD_CPATH="build-asan/lib/?.so" \
  busted -o utfTerminal --exclude-tags=slow,nosan "$@" 2>&1 | tee "$log"
count "sanitizer build"

echo "== rock: non-root pack, install and smoke on every Lua VM"
bash scripts/rock-smoke.sh 2>&1 | tee "$log"
line=$(grep -E '^rock smoke: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
if [ -z "$line" ]; then
  echo "!! rock smoke: no summary"; failed=$((failed + 1))
else
  passed=$((passed + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
  failed=$((failed + $(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')))
fi

rm -f "$log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
