#!/usr/bin/env bash
# Debian packages the tests need: PostgreSQL 15 server binaries (initdb/pg_ctl,
# pg_trgm), Prometheus (PromQL checks) and wrk (benchmarks). Installs only what is
# missing, so a second run costs nothing.
set -euo pipefail
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql-15 postgresql-contrib-15)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
if ((${#need[@]})); then
  echo "system deps: installing ${need[*]}" >&2
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # Services must not start on install: the tests start their own on loopback.
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  $SUDO rm -f /usr/sbin/policy-rc.d
fi
