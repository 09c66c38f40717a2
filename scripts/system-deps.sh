#!/usr/bin/env bash
# The Debian packages the test suite needs, installed when missing. `make test` and `.ci/run` both
# call this one script so that the two never drift. It never skips: without root or sudo it stops
# with the one command to run.
#
#   chromium        browser tests (Playwright drives /usr/bin/chromium; nothing is downloaded)
#   openssh-server  SSH transport and lifecycle tests (a real sshd on loopback)
#   redis-server    scaled-mode tests (channel layer)
#   postgresql      scaled-mode tests (database)
#   cmake, g++      the real inference engines built from source by `make engines`
set -euo pipefail

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
test -x /usr/sbin/sshd || need+=(openssh-server)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || need+=(postgresql)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo)
else
  echo "The tests need Debian packages that are not installed: ${need[*]}" >&2
  echo "Install them (as root), then run make test again:" >&2
  echo "  sudo apt-get install -y --no-install-recommends ${need[*]}" >&2
  exit 1
fi
echo "installing system packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
# Retried (scripts/retry.sh): a mirror's hiccup should not fail the run.
retry="$(dirname "$0")/retry.sh"
"$retry" 3 "${sudo[@]}" apt-get update -qq
"$retry" 3 "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
