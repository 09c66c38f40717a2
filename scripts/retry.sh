#!/usr/bin/env bash
# Run a download (apt, pip) again when it fails: a mirror's hiccup should cost a retry, not a
# CI run. Each wait doubles (SPECDASH_RETRY_DELAY_S, default 10 s: 10, 20, 40 ...).
#
#   scripts/retry.sh ATTEMPTS COMMAND [ARG...]
#
# Only for commands that are safe to repeat (an install resumes where it stopped).
set -uo pipefail

if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 ATTEMPTS COMMAND [ARG...]" >&2
  exit 2
fi
attempts=$1
shift
delay=${SPECDASH_RETRY_DELAY_S:-10}
for ((n = 1; ; n++)); do
  "$@"
  status=$?
  [ $status -eq 0 ] && exit 0
  if [ "$n" -ge "$attempts" ]; then
    echo "retry: failed $attempts times (last exit $status): $*" >&2
    exit $status
  fi
  echo "retry: attempt $n of $attempts failed (exit $status), again in ${delay}s: $*" >&2
  sleep "$delay"
  delay=$((delay * 2))
done
