#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the llama.cpp sources vendored in the pinned
# llama-cpp-python sdist (no prebuilt binaries, no model hub), into a cache outside the
# clone keyed by that version, so a machine builds it once.
#
#   engines/build_llama_server.sh          # build if missing, print the binary's path
#
# On a GPU host (nvcc on the PATH), SPECDASH_LLAMA_CUDA=1 builds the CUDA server instead, into
# its own cache entry (llama.cpp-<version>-cuda) for SPECDASH_CUDA_ARCHITECTURES ("native" by
# default, e.g. "90" for Hopper). SPECDASH_LLAMA_SOURCE names an unpacked llama.cpp source tree
# to build instead of the sdist's (a machine without a package index); SPECDASH_LLAMA_CMAKE_ARGS
# adds cmake options (e.g. -DGGML_CUDA_FA=OFF, which skips the flash-attention kernels and
# roughly halves a CUDA build).
#
# Idempotent: an existing binary is kept. Atomic: the build happens in a temporary
# directory beside the cache entry and is renamed into place only when it succeeded,
# so an interrupted build never leaves a half-made engine that later runs would trust.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${SPECDASH_ENGINE_CACHE:-$HOME/.cache/specdash/engines}"
CUDA="${SPECDASH_LLAMA_CUDA:-0}"
DEST="$CACHE/llama.cpp-$LLAMA_CPP_PYTHON_VERSION"
[ "$CUDA" = 1 ] && DEST="$DEST-cuda"
BIN="$DEST/bin/llama-server"
JOBS="${SPECDASH_BUILD_JOBS:-2}"
PYTHON="${PYTHON:-python3}"
# Downloads (apt, the sdist) are retried: scripts/retry.sh.
RETRY="$(cd "$(dirname "$0")" && pwd)/../scripts/retry.sh"

if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "build_llama_server: missing ${need[*]}; install them (as root: apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "installing: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  "$RETRY" 3 apt-get update -qq
  "$RETRY" 3 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$CACHE"
WORK="$(mktemp -d "$CACHE/.build-llama.cpp-$LLAMA_CPP_PYTHON_VERSION.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

start=$(date +%s)
if [ -n "${SPECDASH_LLAMA_SOURCE:-}" ]; then
  SRC="$SPECDASH_LLAMA_SOURCE"
else
  "$RETRY" 3 "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps \
    --no-binary :all: -d "$WORK/sdist" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  tar -xzf "$WORK"/sdist/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION".tar.gz -C "$WORK"
  SRC="$WORK/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
fi

# Native CPU code (GGML_NATIVE, the default) is fine: the cache is per machine.
options=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF)
if [ "$CUDA" = 1 ]; then
  options+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${SPECDASH_CUDA_ARCHITECTURES:-native}")
fi
# shellcheck disable=SC2206  # extra options are words by design
options+=(${SPECDASH_LLAMA_CMAKE_ARGS:-})
step() {  # run one build step; on failure show its log's end (the temporary tree is removed)
  local log="$1"; shift
  "$@" >"$log" 2>&1 || { tail -40 "$log" >&2; return 1; }
}
step "$WORK/cmake.log" cmake -S "$SRC" -B "$WORK/build" "${options[@]}"
step "$WORK/build.log" cmake --build "$WORK/build" --target llama-server -j"$JOBS"

mkdir -p "$WORK/out/bin"
cp "$WORK/build/bin/llama-server" "$WORK/out/bin/llama-server"
"$WORK/out/bin/llama-server" --version >"$WORK/out/VERSION" 2>&1 || true
echo "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION; cuda $CUDA; built in $(($(date +%s) - start)) s" >>"$WORK/out/VERSION"
# Another build may have finished first; keep whichever landed (both are the same sources).
if ! mv -T "$WORK/out" "$DEST" 2>/dev/null; then
  test -x "$BIN"
fi
echo "$BIN"
