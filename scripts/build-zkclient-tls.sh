#!/usr/bin/env bash
# Builds the secure libzookeeper_mt: OpenSSL (zookeeper_init_ssl) and Cyrus
# SASL (zookeeper_init_sasl), from the distribution's source package of the
# installed zookeeper, never over the system's library. Debian's
# libzookeeper_mt has neither. The C client's CMake build makes static
# libraries (position-independent): the core built with
# `scripts/build.sh --secure` (alias --tls; -DZKCOORD_TLS=ON) takes them in,
# so that core needs no library path and the system's libzookeeper_mt stays
# the default.
#
#   bash scripts/build-zkclient-tls.sh
#   ZKCOORD_ZK_SOURCE=<dir> ...   use this zookeeper source tree instead of
#                                 `apt-get source zookeeper`
#
# Built once per machine and user, not per checkout (a fresh clone, as CI
# makes, would pay the build each time): into
#   ${XDG_CACHE_HOME:-$HOME/.cache}/zkcoord/zkclient-<version>-<hash>
# (version: the installed zookeeper package's, or the source tree's; hash:
# of this script, and of the tree's path with ZKCOORD_ZK_SOURCE), which
# build/zkclient-tls then links to. A second run finds it and only links
# (remove the cache dir to build again, e.g. after editing a tree of yours).
# Needs libssl-dev, libsasl2-dev, a JDK and zookeeper's jute jar
# (scripts/install-deps.sh installs them; DIGEST-MD5 at run time needs
# libsasl2-modules). Without a deb-src line for the installed zookeeper's
# suites it adds one (/etc/apt/sources.list.d/zkcoord-deb-src.sources) when
# run as root; any user can build once that line exists.
set -euo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.."
root=$PWD
link=$root/build/zkclient-tls
jute=/usr/share/java/zookeeper-jute.jar
die() { echo "build-zkclient-tls: $*" >&2; exit 1; }
[ -f /usr/include/openssl/ssl.h ] || die "no OpenSSL headers: apt-get install libssl-dev"
[ -f /usr/include/sasl/sasl.h ] || die "no Cyrus SASL headers: apt-get install libsasl2-dev"
[ -f "$jute" ] || die "no $jute: apt-get install libzookeeper-java"
command -v java >/dev/null || die "no java: apt-get install default-jdk-headless"

# A deb-src entry for each deb entry of Debian's own sources file (same
# URIs, suites, components, key), so that apt-get source finds the
# installed version's source.
add_deb_src() {
  local src=/etc/apt/sources.list.d/debian.sources
  local out=/etc/apt/sources.list.d/zkcoord-deb-src.sources
  [ "$(id -u)" = 0 ] || die "no deb-src line for zookeeper: add one, run as root, or set ZKCOORD_ZK_SOURCE"
  if [ -f "$src" ]; then
    sed -n 's/^Types: *deb *$/Types: deb-src/; p' "$src" >"$out"
  elif [ -f /etc/apt/sources.list ]; then
    sed -n 's/^deb \(.*\)$/deb-src \1/p' /etc/apt/sources.list >"${out%.sources}.list"
  else
    die "no apt sources to derive a deb-src line from"
  fi
  echo "build-zkclient-tls: added deb-src entries ($out), apt-get update" >&2
  apt-get update -qq
}

# The cache key: the version and what decides the build (this script;
# the user's tree's path). The installed package's version says which
# source package to fetch.
script_hash=$(sha256sum "$self" | cut -c1-12)
if [ -n "${ZKCOORD_ZK_SOURCE:-}" ]; then
  srctree=$(cd "$ZKCOORD_ZK_SOURCE" && pwd) || die "no directory $ZKCOORD_ZK_SOURCE"
  cml=$srctree/zookeeper-client/zookeeper-client-c/CMakeLists.txt
  [ -f "$cml" ] || die "no C client in $srctree (zookeeper-client/zookeeper-client-c)"
  key=$(sed -n 's/^project(zookeeper VERSION \([0-9.]*\)).*/\1/p' "$cml" | head -n 1)
  key=${key:-unknown}-$( (cat "$self"; echo "$srctree") | sha256sum | cut -c1-12)
else
  version=$(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null) \
    || die "zookeeper is not installed (or set ZKCOORD_ZK_SOURCE)"
  key=$version-$script_hash
fi
# (HOME may be unset in a service's or a CI runner's environment)
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache=${XDG_CACHE_HOME:-$home/.cache}/zkcoord
prefix=$cache/zkclient-$key

# build/zkclient-tls -> the cache dir (where CMakeLists.txt looks). A
# directory there from an older checkout's build is replaced.
link_build() {
  mkdir -p "$root/build"
  if [ -e "$link" ] && [ ! -L "$link" ]; then rm -rf "$link"; fi
  ln -sfn "$prefix" "$link"
}
built() { [ -f "$1/lib/libzookeeper.a" ] && [ -f "$1/include/zookeeper/zookeeper.h" ] && [ -f "$1/features" ]; }
if built "$prefix"; then link_build; exit 0; fi

# One build at a time per cache (two checkouts building at once would
# share two cores for the same result); the second one then finds it.
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if built "$prefix"; then link_build; exit 0; fi
staging=$prefix.tmp.$$
work=$staging/work
trap 'rm -rf "$staging"' EXIT

# The source tree: the user's, or the installed version's source package.
mkdir -p "$work"
if [ -z "${ZKCOORD_ZK_SOURCE:-}" ]; then
  # (not a pipe into grep -q: apt-cache's SIGPIPE would fail it under pipefail)
  srcs=$(apt-cache showsrc zookeeper 2>/dev/null || true)
  if ! grep -qx "Version: $version" <<<"$srcs"; then
    add_deb_src
  fi
  # _apt may not write into the build dir: apt then downloads as root and
  # says so on stderr; its errors still fail this step.
  (cd "$work" && apt-get source -qq --only-source "zookeeper=$version" >/dev/null 2>"$staging/apt-source.log") \
    || { cat "$staging/apt-source.log" >&2; die "apt-get source zookeeper=$version failed"; }
  srctree=$(find "$work" -maxdepth 1 -mindepth 1 -type d -name 'zookeeper-*' | head -n 1)
fi
[ -n "$srctree" ] && [ -f "$srctree/zookeeper-client/zookeeper-client-c/CMakeLists.txt" ] \
  || die "no C client in $srctree (zookeeper-client/zookeeper-client-c)"
jutefile=$srctree/zookeeper-jute/src/main/resources/zookeeper.jute
[ -f "$jutefile" ] || die "no $jutefile"
# A copy of the C client (and the CMake modules it finds at ../../tools):
# the changes below never touch the user's tree.
mkdir -p "$work/src/zookeeper-client"
cp -r "$srctree/zookeeper-client/zookeeper-client-c" "$work/src/zookeeper-client/"
if [ -d "$srctree/tools/cmake" ]; then
  mkdir -p "$work/src/tools" && cp -r "$srctree/tools/cmake" "$work/src/tools/"
fi
client=$work/src/zookeeper-client/zookeeper-client-c

# The C client's generated sources (zookeeper.jute.c/.h): the source
# package has the jute grammar, Debian's jute jar the compiler.
mkdir -p "$client/generated"
(cd "$client/generated" && java -cp "$jute" org.apache.jute.compiler.generated.Rcc -l c "$jutefile" >/dev/null)

# 3.8.0 calls FIPS_mode(), which OpenSSL 3 no longer has: the library
# builds (an implicit declaration) and fails to load (undefined symbol).
# OpenSSL 3's equivalent, in our copy of the source only.
if grep -q 'FIPS_mode()' "$client/src/zookeeper.c" \
   && grep -Eq '^# *define OPENSSL_VERSION_MAJOR +[3-9]' /usr/include/openssl/opensslv.h; then
  sed -i 's/FIPS_mode()/EVP_default_properties_is_fips_enabled(NULL)/' "$client/src/zookeeper.c"
fi

# 3.8.0's TLS handshake (init_ssl_for_socket) loops on SSL_connect with a
# 1 s select and no end: a server that takes the connection and never
# answers the handshake holds libzookeeper's IO thread, and so
# zookeeper_close, for ever. A select that times out fails the attempt
# instead (libzookeeper then tries the next server, as after any error).
zkc=$client/src/zookeeper.c
sel='rc = select(sock + 1, &s_rfds, &s_wfds, NULL, &tv);'
if [[ $(grep -F -A1 "$sel" "$zkc" || true) == *'if (rc == -1) {'* ]]; then
  sed -i "/$sel/{n;s/if (rc == -1) {/if (rc <= 0) {/}" "$zkc"
  [[ $(grep -F -A1 "$sel" "$zkc") == *'if (rc <= 0) {'* ]] \
    || die "patching the TLS handshake's wait failed"
fi

# 3.8.0's SASL: a failed exchange (a wrong password: the server answers
# AUTHFAILED and closes) marks the handle ZOO_AUTH_FAILED_STATE and
# returns, with no session event and the socket left open: the client
# only ever sees "connecting". Going through handle_socket_error_msg, as
# any other failed read does, closes the socket and sends the session
# event ZOO_AUTH_FAILED_STATE (cleanup(): an unrecoverable state).
if perl -0ne 'exit(/zoo_sasl_mark_failed\(zh\);\n\s*return rc;/ ? 0 : 1)' "$zkc"; then
  perl -0pi -e 's/(zoo_sasl_mark_failed\(zh\);\n(\s*))return rc;/$1return handle_socket_error_msg(zh, __LINE__, __func__, rc, "SASL authentication failed");/g' "$zkc"
  [ "$(grep -c 'rc, "SASL authentication failed")' "$zkc")" = 2 ] \
    || die "patching the SASL failure's session event failed"
fi

# The library, and its cli as a link check (a symbol the library needs and
# nothing defines fails here, not when the core loads); no tests
# (cppunit). An implicit declaration is an error for the same reason.
cmake -S "$client" -B "$work/cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DWITH_OPENSSL=ON -DWITH_CYRUS_SASL=ON -DWANT_CPPUNIT=OFF \
      -DCMAKE_C_FLAGS=-Werror=implicit-function-declaration \
      >"$work/cmake.log" 2>&1 \
  || { cat "$work/cmake.log" >&2; die "cmake failed"; }
cmake --build "$work/cmake" -j 2 --target zookeeper cli >"$work/build.log" 2>&1 \
  || { tail -n 40 "$work/build.log" >&2; die "build failed"; }

syms=$(nm --defined-only "$work/cmake/libzookeeper.a" 2>/dev/null || true)
grep -q ' T zookeeper_init_ssl$' <<<"$syms" \
  || die "the library built has no zookeeper_init_ssl (OpenSSL not found?)"
grep -q ' T zookeeper_init_sasl$' <<<"$syms" \
  || die "the library built has no zookeeper_init_sasl (Cyrus SASL not found?)"
mkdir -p "$staging/lib" "$staging/include/zookeeper"
cp "$client"/include/*.h "$client/generated/zookeeper.jute.h" "$staging/include/zookeeper/"
cp "$work/cmake/libhashtable.a" "$work/cmake/libzookeeper.a" "$staging/lib/"
# What the library has, for CMakeLists.txt (which links OpenSSL and libsasl2).
echo "tls sasl" >"$staging/features"
rm -rf "$work" "$staging/apt-source.log"
rm -rf "$prefix"; mv "$staging" "$prefix"
link_build
echo "build-zkclient-tls: $prefix/lib/libzookeeper.a"
