#!/usr/bin/env bash
# `make test`: every check in stages, stopping at the first that fails, and the stage table at the
# end either way: each stage's wall time, the pytest stages' passed/failed/skipped/deselected
# counts and the 30 slowest tests of the whole run (scripts/stage_report.py; docs/testing.md).
#
# A watchdog keeps the run inside CI's 90-minute limit: when SPECDASH_TEST_BUDGET_S (default
# 4800 s, 80 minutes) is spent, the running stage is stopped (TERM, then KILL 30 s later), the
# table is printed with the test that was running, and the run fails saying so. A skip that
# tests/fixtures/stagereport.py does not expect fails its stage. The records go to
# SPECDASH_TEST_REPORTS (default var/test-reports), emptied first.
set -uo pipefail
cd "$(dirname "$0")/.."
make=${MAKE:-make}
budget=${SPECDASH_TEST_BUDGET_S:-4800}
# engines builds the real llama-server and vLLM (CPU) once per version into the engine cache;
# pytest serves llama-server, pytest-vllm serves vLLM in its own run (docs/engines.md). Lint and
# typecheck need only the venv and take seconds: they come before the build, which on a fresh
# machine takes 10-40 minutes, so that a style error fails at once.
stages=(system-deps venv lint typecheck engines pytest pytest-llamacpp pytest-clock pytest-browser pytest-vllm)
pytest_stages=" pytest pytest-llamacpp pytest-clock pytest-browser pytest-vllm "

reports=${SPECDASH_TEST_REPORTS:-var/test-reports}
rm -rf "$reports"
mkdir -p "$reports"
timings="$reports/stages.tsv"
: >"$timings"

report() {
  python3 scripts/stage_report.py "$reports" "$timings" --slowest 30
}
trap report EXIT

run_start=$(date +%s)
for stage in "${stages[@]}"; do
  left=$((budget - ($(date +%s) - run_start)))
  if [ "$left" -le 0 ]; then
    echo "watchdog: the budget of $budget s was spent before stage $stage" >&2
    exit 124
  fi
  echo "==> $stage"
  start=$(date +%s%N)
  if [[ $pytest_stages == *" $stage "* ]]; then
    export SPECDASH_TEST_REPORT="$(realpath "$reports")/$stage.jsonl"
  else
    unset SPECDASH_TEST_REPORT
  fi
  # timeout puts the stage in its own process group and signals all of it.
  timeout --kill-after=30 "$left" "$make" --no-print-directory "$stage"
  status=$?
  end=$(date +%s%N)
  tenths=$(((end - start) / 100000000))
  case $status in
    0) outcome=ok ;;
    124 | 137) outcome=STOPPED ;;
    *) outcome=FAILED ;;
  esac
  printf '%s\t%d.%d\t%s\n' "$stage" $((tenths / 10)) $((tenths % 10)) "$outcome" >>"$timings"
  if [ "$outcome" = STOPPED ]; then
    echo "watchdog: make test passed its budget of $budget s (SPECDASH_TEST_BUDGET_S) in stage" \
      "$stage, stopped before CI's limit; the stage table below names the test it was running" >&2
  fi
  [ $status -ne 0 ] && exit $status
done
exit 0
