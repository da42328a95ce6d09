#!/usr/bin/env bash
# The rock as a user gets it. From a copy of this tree (a local git repository
# stands in for the rockspecs' GitHub URL), a non-root user packs the scm and
# the release rockspec (tagging the copy as the README's release steps do),
# installs the release .src.rock into a fresh tree per VM (LuaJIT's with the
# README's luarocks config: lua_interpreter = "luajit"), runs
# spec/smoke/rock.lua from another directory on Lua 5.1, 5.2, 5.3, 5.4 and
# LuaJIT against one ZooKeeper server, and runs the installed `zkcoord`
# command through the wrapper luarocks wrote into each tree.
#
# As root it runs as user zkrock (created if missing), else as the caller.
# ZKCOORD_SMOKE_VMS="5.4 luajit" picks VMs. Ends with
# "rock smoke: N passed, N failed" (smoke checks, plus one per pack/install).
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
vms=${ZKCOORD_SMOKE_VMS:-"5.1 5.2 5.3 5.4 luajit"}
url=https://github.com/zkcoord/zkcoord.git
version=$(sed -n 's/^return "\([0-9.]*\)"$/\1/p' lua/zkcoord/version.lua)

passed=0; failed=0
pass() { passed=$((passed + 1)); echo "ok     $1"; }
fail() { failed=$((failed + 1)); echo "FAILED $1"; }
finish() {
  echo "rock smoke: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
}

if [ "$(id -u)" = 0 ]; then
  user=zkrock
  id -u "$user" >/dev/null 2>&1 || useradd -m "$user" || { fail "useradd $user"; finish; }
  as() { runuser -u "$user" -- env HOME="$(getent passwd "$user" | cut -d: -f6)" "$@"; }
else
  user=$(id -un)
  as() { "$@"; }
fi

work=$(mktemp -d /tmp/zkcoord-rock.XXXXXX)
zk_pid=
cleanup() {
  if [ -n "$zk_pid" ]; then
    exec {ZK[1]}>&-
    wait "$zk_pid" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT
chown "$user" "$work"
as mkdir -p "$work/src" "$work/pack" "$work/run"

# The tree as committed plus files not yet committed (ignored ones excluded).
git ls-files -co --exclude-standard -z | tar --null -cf - -T - 2>/dev/null \
  | as tar -xf - -C "$work/src" || { fail "copy the tree"; finish; }
as git -C "$work/src" init -q \
  && as git -C "$work/src" add -A \
  && as git -C "$work/src" -c user.name=zkcoord-ci -c user.email=ci@localhost commit -qm tree \
  && as git -C "$work/src" tag "v$version" || { fail "git repository of the copy"; finish; }

export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0="url.file://$work/src.insteadOf" GIT_CONFIG_VALUE_0="$url"
rock="$work/pack/zkcoord-$version-1.src.rock"
for spec in zkcoord-scm-1 "zkcoord-$version-1"; do
  if (cd "$work/pack" && as luarocks pack "$work/src/rockspec/$spec.rockspec") >"$work/log" 2>&1 \
      && [ -f "$work/pack/$spec.src.rock" ]; then
    pass "$user packs rockspec/$spec.rockspec"
  else
    cat "$work/log"; fail "$user packs rockspec/$spec.rockspec"
  fi
done
[ -f "$rock" ] || finish

# One ZooKeeper for every VM (zkcoord.testing from this checkout, its core
# built by scripts/build.sh): stopped when its stdin closes; its watchdog
# stops it anyway if that luajit dies.
coproc ZK { exec luajit -e '
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("ZKCOORD_CPATH") or "lua/?.so") .. ";" .. package.cpath
local s = assert(require("zkcoord.testing").server())
io.stdout:write(s.hosts, "\n"); io.stdout:flush()
io.stdin:read("*a"); s:destroy()' 2>&1; }
zk_pid=$ZK_PID
servers=
read -r servers <&"${ZK[0]}"
case "$servers" in
  127.0.0.1:*) ;;
  *) echo "$servers"; fail "start ZooKeeper"; finish ;;
esac

# The installed command, through the wrapper luarocks wrote ($2), on VM $1:
# it runs that VM, prints the version, runs a command under the lock, and
# holds the lock until a grandchild of the command (its child gone) exits.
command_smoke() {
  local lua=$1 zk=$2 path="/rock-smoke-$1" go="$work/run/go-$1" out rc holder i

  if grep -q "exec '[^']*/$lua' " "$zk" 2>/dev/null; then
    pass "[$lua] the zkcoord wrapper runs $lua"
  else
    cat "$zk"; fail "[$lua] the zkcoord wrapper runs $lua"
  fi
  out=$(cd "$work/run" && as "$zk" --version 2>&1)
  if [ "$out" = "zkcoord $version" ]; then
    pass "[$lua] zkcoord --version"
  else
    echo "$out"; fail "[$lua] zkcoord --version"
  fi
  out=$(cd "$work/run" && as env ZKCOORD_SERVERS="$servers" "$zk" lock -n "$path" \
        -c 'echo "token $ZKCOORD_FENCING_TOKEN"' 2>&1)
  rc=$?
  if [ "$rc" = 0 ] && echo "$out" | grep -qE '^token [0-9]+$'; then
    pass "[$lua] zkcoord lock runs a command with its token"
  else
    echo "$out (exit $rc)"; fail "[$lua] zkcoord lock runs a command with its token"
  fi
  (cd "$work/run" && as env ZKCOORD_SERVERS="$servers" "$zk" lock "$path" \
     -c "echo \$\$ > '$go.pid'; (while [ ! -e '$go' ]; do sleep 0.05; done) & exit 0" \
     >/dev/null 2>&1) &
  holder=$!
  # until the command's own process is gone (reaped); its grandchild is not
  for i in $(seq 100); do
    [ -s "$go.pid" ] && [ ! -e "/proc/$(cat "$go.pid")" ] && break
    sleep 0.1
  done
  as env ZKCOORD_SERVERS="$servers" "$zk" lock -n -E 3 "$path" -- true >/dev/null 2>&1
  rc=$?
  as touch "$go"
  wait "$holder"
  if [ "$rc" = 3 ] && as env ZKCOORD_SERVERS="$servers" "$zk" lock -n "$path" -- true; then
    pass "[$lua] zkcoord lock holds the lock until the command's grandchild exits"
  else
    fail "[$lua] zkcoord lock holds the lock until the command's grandchild exits (-n -E 3: $rc)"
  fi
}

for vm in $vms; do
  tree="$work/tree-$vm"
  # LuaJIT: luarocks' 5.1 with the README's config, so that the wrapper it
  # writes runs luajit and the core is built against LuaJIT's headers
  # every VM: lua-cjson is Debian's (lua-cjson, install-deps.sh), outside
  # luarocks: the README's rocks_provided line, so that nothing is fetched
  config="$work/luarocks-$vm.lua"
  echo 'rocks_provided = { ["lua-cjson"] = "2.1.0-1" }' | as tee "$config" >/dev/null
  if [ "$vm" = luajit ]; then
    lv=5.1; lua=luajit
    printf '%s\n' 'lua_interpreter = "luajit"' \
      'variables = { LUA_INCDIR = "/usr/include/luajit-2.1" }' | as tee -a "$config" >/dev/null
  else
    lv=$vm; lua=lua$vm
  fi
  if ! command -v "$lua" >/dev/null; then
    fail "$lua not installed (scripts/install-deps.sh)"; continue
  fi
  if as env LUAROCKS_CONFIG="$config" \
      luarocks --lua-version "$lv" --tree "$tree" install "$rock" >"$work/log" 2>&1; then
    pass "$user installs $(basename "$rock") for $lua into a fresh tree"
  else
    tail -n 30 "$work/log"; fail "$user installs $(basename "$rock") for $lua"; continue
  fi
  out=$(cd "$work/run" && as env ZKCOORD_SMOKE_SERVERS="$servers" ZKCOORD_SMOKE_TREE="$tree" \
        sh -c 'eval "$(luarocks --lua-version "$1" --tree "$2" path)" && exec "$3" "$4" "$5"' \
        _ "$lv" "$tree" "$lua" "$work/src/spec/smoke/rock.lua" "$version" 2>&1)
  echo "$out" | sed "s/^/[$lua] /"
  line=$(echo "$out" | grep -E '^smoke .*: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
  if [ -z "$line" ]; then
    fail "$lua smoke: no summary (crash?)"; continue
  fi
  p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
  f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')
  passed=$((passed + p)); failed=$((failed + f))
  command_smoke "$lua" "$tree/bin/zkcoord"
done
finish
