#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds the normal, the
# ASan+UBSan and the TLS cores (scripts/build.sh --tls, normal and
# ASan+UBSan), runs luacheck, checks the API reference is current, runs
# every busted spec against real ZooKeeper servers with each build
# (spec/tls_spec.lua and spec/sasl_spec.lua also with the TLS cores), and packs and installs the
# rock as a non-root user and runs its smoke test on Lua 5.1, 5.2, 5.3, 5.4
# and LuaJIT. Ends with "N passed, N failed".
#
# Each spec file runs in its own busted process (its own ZooKeeper servers,
# on ports spec/helpers reserves across processes), ZKCOORD_TEST_JOBS at a
# time (default: 2 per core; the specs mostly wait on ZooKeeper), beside the
# rock smoke. Per-file logs stay in a temp dir; a failed file's log is
# printed in full at the end.
#
#   bash scripts/test.sh [--quick] [spec/x_spec.lua ...] [busted options]
#   --quick: the normal build's specs only (the developer's loop).
set -uo pipefail
cd "$(dirname "$0")/.."

quick=0
files=(); bargs=()
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    *_spec.lua) files+=("$a") ;;
    *) bargs+=("$a") ;;
  esac
done
# The longest files first so that they do not start last; every other
# *_spec.lua under spec/ follows (spec/regress/ too), so new files are
# picked up.
if [ ${#files[@]} -eq 0 ]; then
  first=(spec/ngx_spec.lua spec/chaos_spec.lua spec/outage_spec.lua
         spec/soak_spec.lua spec/valgrind_soak_spec.lua spec/fuzz_spec.lua
         spec/bench_spec.lua spec/session_spec.lua spec/cli_spec.lua
         spec/work_queue_spec.lua spec/line_spec.lua)
  for f in "${first[@]}"; do [ -f "$f" ] && files+=("$f"); done
  for f in spec/*_spec.lua spec/*/*_spec.lua; do
    [ -f "$f" ] || continue
    case " ${first[*]} " in *" $f "*) ;; *) files+=("$f") ;; esac
  done
fi
jobs=${ZKCOORD_TEST_JOBS:-$(( $(nproc) * 2 ))}

t_start=$SECONDS
load0=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$quick" = 0 ]; then
  bash scripts/install-deps.sh || exit 1
fi
bash scripts/build.sh || exit 1
if [ "$quick" = 0 ]; then
  bash scripts/build.sh --sanitize || exit 1
  # the secure (TLS and SASL) core for spec/tls_spec.lua and
  # spec/sasl_spec.lua (its libzookeeper is built once per machine, in
  # ~/.cache/zkcoord, which build/zkclient-tls links to)
  bash scripts/build.sh --tls || exit 1
  bash scripts/build.sh --tls --sanitize || exit 1
fi

passed=0; failed=0
logdir=$(mktemp -d /tmp/zkcoord-test.XXXXXX)
bad=()   # logs to print in full at the end

if [ "$quick" = 0 ]; then
  echo "== luacheck"
  if luacheck -q lua/ spec/ examples/ bench/ tools/ scripts/ bin/zkcoord >"$logdir/luacheck.log" 2>&1; then
    passed=$((passed + 1)); echo "luacheck: clean"
  else
    cat "$logdir/luacheck.log"; failed=$((failed + 1))
  fi

  echo "== API reference (scripts/apidoc.sh --check)"
  if bash scripts/apidoc.sh --check >"$logdir/apidoc.log" 2>&1; then
    passed=$((passed + 1)); cat "$logdir/apidoc.log"
  else
    cat "$logdir/apidoc.log"; failed=$((failed + 1))
  fi
fi

asan=$(gcc -print-file-name=libasan.so)
ubsan=$(gcc -print-file-name=libubsan.so)
run_normal() { busted -o utfTerminal "${bargs[@]}" "$1"; }
run_sanitized() {
  LD_PRELOAD="$asan $ubsan" \
  ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  ZKCOORD_CPATH="build-asan/lib/?.so" \
    busted -o utfTerminal --exclude-tags=slow,nosan "${bargs[@]}" "$1"
}
run_rock() { bash scripts/rock-smoke.sh; }
# spec/tls_spec.lua and spec/sasl_spec.lua with the secure core (with the
# others they only check that connect's tls and sasl options raise)
run_tls() { ZKCOORD_CPATH="build-tls/lib/?.so" busted -o utfTerminal "${bargs[@]}" "$1"; }
run_tls_sanitized() {
  LD_PRELOAD="$asan $ubsan" \
  ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  ZKCOORD_CPATH="build-tls-asan/lib/?.so" \
    busted -o utfTerminal --exclude-tags=slow,nosan "${bargs[@]}" "$1"
}

# Job list: "kind file"; the rock smoke (one long job) starts first, then
# the long files with both builds (a long sanitized run started last would
# leave the other slots idle at the end), then the rest.
queue=()
if [ "$quick" = 0 ]; then queue+=("rock -"); fi
nfirst=0
if [ ${#files[@]} -gt 0 ]; then
  for f in "${first[@]:-}"; do
    [ "${files[$nfirst]:-}" = "$f" ] && nfirst=$((nfirst + 1))
  done
fi
# The sanitizer run is for the C core: recipe specs whose C calls are the
# client's plain operations (run under ASan by the client, session,
# outage, nginx, fuzz and soak specs) run with the normal build only, to
# keep the suite within its 7 minutes (about 200 s of jobs).
nosan=" spec/work_queue_spec.lua spec/cohort_spec.lua spec/partitioner_spec.lua"
nosan+=" spec/election_spec.lua spec/semaphore_spec.lua spec/lock_spec.lua"
nosan+=" spec/barrier_spec.lua spec/cache_spec.lua "
sanitized_of() {
  [ "$quick" = 0 ] || return 0
  for f in "$@"; do
    case $nosan in *" $f "*) ;; *) queue+=("sanitized $f") ;; esac
  done
}
for f in "${files[@]:0:$nfirst}"; do queue+=("normal $f"); done
sanitized_of "${files[@]:0:$nfirst}"
for f in "${files[@]:$nfirst}"; do queue+=("normal $f"); done
sanitized_of "${files[@]:$nfirst}"
if [ "$quick" = 0 ]; then
  for f in "${files[@]}"; do
    case $f in
      spec/tls_spec.lua|spec/sasl_spec.lua) queue+=("tls $f" "tls_sanitized $f") ;;
    esac
  done
fi

logname() { echo "$logdir/$1-$(basename "$2" .lua).log"; }

echo "== ${#queue[@]} jobs, $jobs at a time (logs in $logdir)"
running=0
for job in "${queue[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n; running=$((running - 1))
  fi
  set -- $job
  (
    t0=$SECONDS
    "run_$1" "$2" >"$(logname "$1" "$2")" 2>&1
    rc=$?
    echo "$rc $((SECONDS - t0))" >"$(logname "$1" "$2").rc"
    printf '%-9s %-34s exit %d, %d s\n' "$1" "$2" "$rc" "$((SECONDS - t0))"
  ) &
  running=$((running + 1))
done
wait

# Totals in a fixed order: busted's summary line per file; a file without
# one (a crash) or with a bad exit status despite a clean summary counts as
# one failure at least.
summary_re='^[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors? / [0-9]+ pending'
for job in "${queue[@]}"; do
  set -- $job
  log=$(logname "$1" "$2")
  read -r rc _ <"$log.rc" 2>/dev/null || rc=255
  if [ "$1" = rock ]; then
    line=$(grep -E '^rock smoke: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ -z "$line" ]; then
      echo "!! rock smoke: no summary"; failed=$((failed + 1)); bad+=("$log"); continue
    fi
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')
    echo "== rock: $line"
  else
    line=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E "$summary_re" | tail -n 1)
    if [ -z "$line" ]; then
      echo "!! $1 $2: no busted summary (crash?), exit $rc"
      failed=$((failed + 1)); bad+=("$log"); continue
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) success.*/\1/')
    f=$(( $(echo "$line" | sed -E 's/.* ([0-9]+) failures? .*/\1/')
        + $(echo "$line" | sed -E 's/.* ([0-9]+) errors? .*/\1/') ))
    echo "== $1 $2: $line"
  fi
  if [ "$f" -eq 0 ] && [ "$rc" -ne 0 ]; then
    echo "!! $1 $2: exit $rc despite no failure in its summary"; f=1
  fi
  passed=$((passed + p)); failed=$((failed + f))
  if [ "$f" -gt 0 ]; then bad+=("$log"); fi
done

for log in "${bad[@]}"; do
  echo
  echo "======== $log"
  cat "$log"
done
echo "== $((SECONDS - t_start)) s; load average $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; logs in $logdir"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
