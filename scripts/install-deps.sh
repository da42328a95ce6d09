#!/usr/bin/env bash
# Installs what zkcoord needs to build, test and benchmark, from Debian's
# packages only. Idempotent: installs only what is missing. Run as root.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config
  libzookeeper-mt-dev zookeeper
  luajit2 libluajit2-5.1-dev
  lua5.1 lua5.2 lua5.3 lua5.4
  liblua5.1-0-dev liblua5.2-dev liblua5.3-dev liblua5.4-dev
  lua-busted luarocks lua-check lua-ldoc git
  nginx-light libnginx-mod-http-lua lua-resty-core
  valgrind
  libssl-dev   # scripts/build-zkclient-tls.sh: libzookeeper with OpenSSL (the TLS core)
  libsasl2-dev   # the same with Cyrus SASL (connect's sasl option)
  libsasl2-modules   # Cyrus SASL's DIGEST-MD5 client plugin, at run time (spec/sasl_spec.lua)
  libsasl2-modules-gssapi-mit   # its GSSAPI plugin: spec/sasl_spec.lua's GSSAPI without Kerberos
  openssl      # spec/helpers/tlscerts.lua: the test certificates (keytool comes with the JDK)
  libcurator-recipes-java libcurator-framework-java   # spec/curator_spec.lua: Curator beside us
  libcurator-discovery-java   # spec/service_discovery_spec.lua: Curator's ServiceDiscovery
  lua-cjson   # zkcoord.service_discovery reads Curator's JSON
  python3-kazoo   # spec/work_queue_spec.lua: kazoo's LockingQueue takes our items
)
# javac for the Curator peer: any JDK will do (this machine kind may ship one)
command -v javac >/dev/null 2>&1 || pkgs+=(default-jdk-headless)
if [ "${ZKCOORD_BENCH_DEPS:-0}" = 1 ]; then
  pkgs+=(gnuplot-nox)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
