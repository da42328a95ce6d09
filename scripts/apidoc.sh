#!/usr/bin/env bash
# Builds the API reference from the sources into docs/api/ with LDoc
# (Debian's lua-ldoc, config.ld). The sources carry LuaLS annotations
# (---@class, ---@field, ---@param, ---@return): a copy of lua/ with those
# rewritten as LDoc tags is what LDoc reads.
#   bash scripts/apidoc.sh             regenerate docs/api/
#   bash scripts/apidoc.sh --check     fail if LDoc warns or docs/api/ is stale
#   bash scripts/apidoc.sh --out DIR   write the pages to DIR only (spec/apidoc_spec.lua)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in
  ""|--check) ;;
  --out) [ -n "${2:-}" ] || { echo "apidoc: --out needs a directory" >&2; exit 2; }
         mkdir -p "$2"
         [ -z "$(ls -A "$2")" ] || { echo "apidoc: --out $2 is not empty" >&2; exit 2; }
         dest=$(cd "$2" && pwd) ;;
  *) echo "usage: bash scripts/apidoc.sh [--check | --out DIR]" >&2; exit 2 ;;
esac
command -v ldoc >/dev/null || { echo "apidoc: ldoc not found (apt-get install lua-ldoc)" >&2; exit 1; }
work=$(mktemp -d /tmp/zkcoord-apidoc.XXXXXX)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/src"
cp -r lua/zkcoord "$work/src/"
find "$work/src" -name '*.so' -delete
# Parts with no public items of their own (their methods are documented on
# the class they join: cache.lua, the client's modules; the proxy's, on
# zkcoord.testing) and the old name of zkcoord.line: LDoc would list them as
# empty modules.
for f in cache/delivery cache/events cache/loader cache/tree client/class client/contract queue \
         testing/proxy testing/proxy_process; do
  rm -f "$work/src/zkcoord/$f.lua"
done
# The client is one class spread over client/*.lua: LDoc reads the parts
# that add its methods as one file, the page of zkcoord.client (init.lua's
# header first). Its internal parts (the pump a waiter drives, ACL
# conversion, argument checks, options, SASL, TLS) keep pages of their own, so the
# client's page lists what a user calls.
internal="acl checks options pump sasl tls"
( cd "$work/src/zkcoord/client" &&
  cat init.lua $(ls *.lua | grep -v '^init\.lua$' |
                 grep -vxF "$(printf '%s.lua\n' $internal)") >../client.lua &&
  for f in *.lua; do
    case " $internal " in *" ${f%.lua} "*) ;; *) rm "$f" ;; esac
  done )
# A taken work-queue item (work_queue/item.lua) is what a user holds: its
# methods are on the work queue's page, as they were before the split.
( cd "$work/src/zkcoord" && cat work_queue/item.lua >>work_queue.lua && rm work_queue/item.lua )
# Reference for what the sources generate (the client's operations).
cp docs/apidoc/*.luadoc "$work/src/zkcoord/"
# ---@tag opening a comment  ->  --- @tag, a doc comment of its own
# ---@class X                 ->  a doc comment of its own naming table X
# ---@tag                     ->  -- @tag, continuing the doc comment above it
find "$work/src" -name '*.lua' -print0 | xargs -0 perl -0pi -e \
  's/^((?![ \t]*--).*\n)([ \t]*)---@(param|return)/$1$2--- \@$3/mg'
find "$work/src" -name '*.lua' -print0 | xargs -0 sed -i -E \
  -e 's/^([[:space:]]*)---@class ([^[:space:]]+)(.*)$/\1--- Fields of \2.\3\n\1-- @table \2/' \
  -e 's/^([[:space:]]*)---@(field|param|return) /\1-- @\2 /'
# Internals (_name) stay out of the reference.
find "$work/src" -name '*.lua' -print0 | xargs -0 perl -0pi -e \
  's/^([ \t]*)(function [\w.]+[.:]_\w+)/$1-- \@local\n$1$2/mg'
# Internal modules (the parts a recipe author or a waiter may use, never a
# user) get a section of their own, after the modules users call: LDoc's
# "script" kind, named Internals in config.ld (a new_type would be listed
# first).
internal_modules="contract util util/args util/callbacks util/deadline util/deprecated util/held util/ids
  util/reads util/retry metrics/text client/checks client/options client/acl client/pump
  client/sasl client/tls line/node
  counter/line counter/write counter/format lease/format wait/ngx/ticker wait/ngx/loop
  wait/ngx/turn wait/ngx/gate cli cli/sys compat
  discovery/json discovery/curator discovery/dubbo discovery/view owned_node revocation
  work_queue/names work_queue/put work_queue/claim work_queue/ack_receipt
  testing/files testing/proc testing/socket line/walk line/join line/order line/enter line/wait
  layout/kazoo layout/kazoo_lease
  election/state election/rejoin election/run metrics/registry
  cohort/node cohort/registry cohort/seat cohort/step cohort/tie"
for f in $internal_modules; do
  src="$work/src/zkcoord/$f.lua"
  [ -f "$src" ] || src="$work/src/zkcoord/$f/init.lua"
  [ -f "$src" ] || { echo "apidoc: no module $f" >&2; exit 1; }
  name="zkcoord.${f//\//.}"
  # the module's own tag (or the name LDoc infers) becomes @script
  if grep -q '^-- @module ' "$src"; then
    sed -i -E 's/^-- @module .*/-- @script '"$name"'/' "$src"
  else
    # at the end of the file's first comment block: text after a tag is
    # the tag's value
    awk -v tag="-- @script $name" \
      '!done && !/^--/ { print tag; done = 1 } { print }' "$src" >"$src.tmp" &&
      mv "$src.tmp" "$src"
  fi
done
# Comments are plain text: <path>, <uuid>, a < b must show as written.
find "$work/src" \( -name '*.lua' -o -name '*.luadoc' \) -print0 |
  xargs -0 luajit scripts/apidoc_escape.lua

out="$work/api"
# LDoc takes project and title from its config only when it is run on "."
# (a path argument resets both to its defaults): run it in the work dir.
{ cat config.ld; printf '\nfile = "src"\ndir = "api"\n'; } >"$work/config.ld"
if ! (cd "$work" && ldoc -c config.ld .) >"$work/log" 2>&1; then
  cat "$work/log" >&2; echo "apidoc: ldoc failed" >&2; exit 1
fi
# LDoc reports problems as "file:line: message" and still exits 0.
if grep -E ':[0-9]+: ' "$work/log" >&2; then
  echo "apidoc: ldoc warnings (above)" >&2; exit 1
fi
# No build date in the pages: regenerating an unchanged tree changes nothing.
find "$out" -name '*.html' -print0 | xargs -0 sed -i -E \
  -e 's#<i style="float:right;">Last updated [0-9: -]+ </i>##' \
  -e "s#$work/src/##g"
sed -i 's#<h1>Script <code>#<h1>Internal module <code>#' "$out"/internals/*.html

if [ "$mode" = "--out" ]; then
  cp -r "$out"/. "$dest"/
  echo "apidoc: written to $dest ($(find "$dest" -name '*.html' | wc -l) pages)"
elif [ "$mode" = "--check" ]; then
  if ! diff -r "$out" docs/api >"$work/diff" 2>&1; then
    head -n 40 "$work/diff" >&2
    echo "apidoc: docs/api/ is stale: run bash scripts/apidoc.sh and commit it" >&2
    exit 1
  fi
  echo "apidoc: docs/api/ is current"
else
  rm -rf docs/api
  mkdir -p docs
  cp -r "$out" docs/api
  echo "apidoc: docs/api/ written ($(find docs/api -name '*.html' | wc -l) pages)"
fi
