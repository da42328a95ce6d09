#!/usr/bin/env bash
# Runs each spec file N times in a row, one busted process per run, with
# busy loops beside it (one per core by default) to find the tests that
# fail only under load. Prints per file: runs, failures, slowest run; then a
# summary. The logs of failed runs stay in a temp dir.
#
#   bash scripts/soak-specs.sh [-n RUNS] [-l LOAD] [-s] [-f PATTERN] [spec/x_spec.lua ...]
#   -n RUNS   runs per file (default 20)
#   -l LOAD   busy loops beside the runs (default: one per core; 0: none)
#   -s        the ASan+UBSan build, as scripts/test.sh runs it
#   -f PATTERN only the tests whose name matches (busted --filter)
#   files     default: every *_spec.lua under spec/ (spec/regress/ too)
set -uo pipefail
cd "$(dirname "$0")/.."

runs=20; load=$(nproc); sanitize=0; filter=
while getopts "n:l:sf:h" o; do
  case $o in
    n) runs=$OPTARG ;;
    l) load=$OPTARG ;;
    s) sanitize=1 ;;
    f) filter=$OPTARG ;;
    *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  for f in spec/*_spec.lua spec/*/*_spec.lua; do [ -f "$f" ] && files+=("$f"); done
fi
case $runs$load in *[!0-9]*) echo "soak-specs: -n and -l take numbers" >&2; exit 2 ;; esac

busted_args=(-o utfTerminal)
# busted splits an option's value at spaces: a space in a test name is "."
if [ -n "$filter" ]; then busted_args+=("--filter=${filter// /.}"); fi
if [ "$sanitize" = 1 ]; then
  [ -f build-asan/lib/zkcoord/core.so ] || bash scripts/build.sh --sanitize || exit 1
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export ZKCOORD_CPATH="build-asan/lib/?.so"
  busted_args+=(--exclude-tags=slow,nosan)
fi

# The busy loops are our own children, stopped by pid whatever ends us.
busy=()
stop_busy() {
  [ ${#busy[@]} -gt 0 ] && kill "${busy[@]}" 2>/dev/null
  [ ${#busy[@]} -gt 0 ] && wait "${busy[@]}" 2>/dev/null
  busy=()
}
trap stop_busy EXIT
trap 'exit 130' INT TERM
for _ in $(seq 1 "$load"); do
  ( trap - INT TERM; while :; do :; done ) &
  busy+=($!)
done

logdir=$(mktemp -d /tmp/zkcoord-soak.XXXXXX)
summary_re='^[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors? / [0-9]+ pending'
echo "soak: ${#files[@]} file(s), $runs run(s) each, $load busy loop(s)$([ "$sanitize" = 1 ] && echo ', ASan+UBSan'); logs of failed runs in $logdir"
printf '%-34s %5s %8s %9s\n' file runs failures slowest
total_runs=0; total_failed=0; bad_files=0
t0=$SECONDS
for f in "${files[@]}"; do
  nfail=0; slowest=0
  for i in $(seq 1 "$runs"); do
    log="$logdir/$(basename "$f" .lua).$i.log"
    start=$EPOCHREALTIME
    busted "${busted_args[@]}" "$f" >"$log" 2>&1
    rc=$?
    slowest=$(awk -v a="$start" -v b="$EPOCHREALTIME" -v m="$slowest" \
                  'BEGIN { t = b - a; print (t > m ? t : m) }')
    line=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E "$summary_re" | tail -n 1)
    # A run fails on a failure, an error, a crash (no summary) or a bad exit.
    if [ "$rc" -ne 0 ] || [ -z "$line" ] || ! echo "$line" | grep -qE ' 0 failures / 0 errors '; then
      nfail=$((nfail + 1))
      echo "   $f run $i failed (exit $rc): ${line:-no busted summary}; $log"
    else
      rm -f "$log"
    fi
  done
  printf '%-34s %5d %8d %8.1fs\n' "$f" "$runs" "$nfail" "$slowest"
  total_runs=$((total_runs + runs)); total_failed=$((total_failed + nfail))
  [ "$nfail" -gt 0 ] && bad_files=$((bad_files + 1))
done
rmdir "$logdir" 2>/dev/null
echo "soak: $total_runs runs of ${#files[@]} file(s) at load $load in $((SECONDS - t0)) s: $total_failed failed runs in $bad_files file(s)"
[ "$total_failed" -eq 0 ]
