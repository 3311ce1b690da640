#!/usr/bin/env bash
# Debian packages the tests need: PostgreSQL 15 server binaries (initdb/pg_ctl, with
# pg_trgm, which Debian ships inside postgresql-15), Prometheus + promtool (PromQL and
# rule checks), wrk (benchmarks), chromium (the console's browser tests, driven by
# Playwright; its own browser downloads are never used), npm (the console's
# front-end assets, scripts/console-assets.sh), openssl (the signing keys the
# catalog's documented flow makes) and bubblewrap (the sandbox's sessions). Installs
# only what is missing, so a second run costs nothing. Services are never started: the tests start their own on
# loopback.
set -euo pipefail

need=()
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
   || ! ls /usr/share/postgresql/*/extension/pg_trgm.control >/dev/null 2>&1; then
  need+=(postgresql-15)
fi
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  need+=(prometheus)
fi
command -v wrk >/dev/null 2>&1 || need+=(wrk)
[[ -x /usr/bin/chromium ]] || need+=(chromium)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
[[ -x /usr/bin/bwrap ]] || need+=(bubblewrap)
((${#need[@]})) || exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "system deps: apt-get not found; install these packages (Debian 12 names) by hand: ${need[*]}" >&2
  exit 1
fi
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || {
    echo "system deps: need root or sudo to install: ${need[*]}" >&2
    exit 1
  }
  SUDO=(sudo)
fi

echo "system deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Keep packaged services from starting on install, without clobbering a policy the
# machine already has.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
  "${SUDO[@]}" chmod +x "$policy"
  trap '"${SUDO[@]}" rm -f "$policy"' EXIT
fi
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
