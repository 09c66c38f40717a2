#!/usr/bin/env bash
# `make test`: every check in stages, stopping at the first that fails, and each stage's wall time
# printed at the end either way (CI has a time budget; this shows where it goes).
set -uo pipefail
cd "$(dirname "$0")/.."
make=${MAKE:-make}
# engines builds the real llama-server and vLLM (CPU) once per version into the engine cache;
# pytest serves llama-server, pytest-vllm serves vLLM in its own run (docs/engines.md). Lint and
# typecheck need only the venv and take seconds: they come before the build, which on a fresh
# machine takes 10-40 minutes, so that a style error fails at once.
stages=(system-deps venv lint typecheck engines pytest pytest-clock pytest-browser pytest-vllm)

timings=()
status=0
report() {
  echo
  echo "stage timings (wall seconds):"
  for line in "${timings[@]}"; do echo "  $line"; done
}
trap report EXIT
for stage in "${stages[@]}"; do
  echo "==> $stage"
  start=$(date +%s%N)
  "$make" --no-print-directory "$stage"
  status=$?
  end=$(date +%s%N)
  tenths=$(((end - start) / 100000000))
  timings+=("$(printf '%-16s %6d.%d%s' "$stage" $((tenths / 10)) $((tenths % 10)) \
    "$([ $status -ne 0 ] && echo '  FAILED')")")
  [ $status -ne 0 ] && exit $status
done
exit 0
