#!/usr/bin/env bash
# Build (or reuse) the GPU check's venv: vLLM's CUDA build from the package index, with
# this checkout's mol-platform (catalog, router, demo extras) and test rigs installed
# editable, so the resolver plugin and the check always run the current sources. Kept
# outside the clone, keyed by version; prints its path on stdout, progress on stderr.
#
# MOL_GPU_VENV: use (or build) that venv instead. MOL_GPU_VLLM_VERSION (0.32.0),
# MOL_GPU_PYTHON (python3). pip reads its index from its own configuration
# (PIP_INDEX_URL, PIP_FIND_LINKS with PIP_NO_INDEX=1 for a folder of wheels).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
VLLM_VERSION="${MOL_GPU_VLLM_VERSION:-0.32.0}"
PY="${MOL_GPU_PYTHON:-python3}"
PYVER="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
CACHE="${MOL_CACHE_DIR:-$HOME/.cache/mol-platform}"
VENV="${MOL_GPU_VENV:-$CACHE/engine/vllm-cuda-$VLLM_VERSION-py$PYVER}"
VENV="${VENV%/}"
PIP=(-q --disable-pip-version-check)

mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
if command -v flock >/dev/null; then flock 9; fi

if [[ ! -f "$VENV/.complete" ]]; then
  echo "gpu venv: building $VENV (vllm==$VLLM_VERSION, CUDA; several GB, minutes)" >&2
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  if ! "$VENV/bin/pip" install "${PIP[@]}" --upgrade pip hatchling \
      || ! "$VENV/bin/pip" install "${PIP[@]}" "vllm==$VLLM_VERSION" \
           "$ROOT[catalog,router,demo]"; then
    echo "gpu venv: pip could not install vllm==$VLLM_VERSION and the project's" \
         "dependencies; this machine needs the package index (or PIP_FIND_LINKS with" \
         "PIP_NO_INDEX=1 naming a folder of those wheels)" >&2
    rm -rf "$VENV"
    exit 1
  fi
  # Editable, without build isolation: nothing more is fetched, and later edits count.
  "$VENV/bin/pip" install "${PIP[@]}" --no-deps --no-build-isolation -e "$ROOT" -e "$ROOT/testkit"
  "$VENV/bin/python" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' \
    || { echo "gpu venv: torch in $VENV is not a CUDA build" >&2; exit 1; }
  touch "$VENV/.complete"
  echo "gpu venv: ready" >&2
else
  echo "gpu venv: reusing $VENV" >&2
fi
echo "$VENV"
