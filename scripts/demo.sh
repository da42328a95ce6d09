#!/usr/bin/env bash
# The demo: installs what is missing, builds, starts a local ZooKeeper in a
# temp dir, runs the examples (several processes at once), stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
luajit scripts/demo.lua
