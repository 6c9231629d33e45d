#!/usr/bin/env bash
# Install Debian's Chromium for the browser test (tests/browser/), driven by Playwright's Python
# package with executable_path=/usr/bin/chromium. Never `playwright install`: that downloads a
# browser of its own. Needs root (CI runs as root); does nothing when Chromium is already there.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  /usr/bin/chromium --version
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null
/usr/bin/chromium --version
