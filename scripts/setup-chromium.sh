#!/usr/bin/env bash
# Installs headless Chromium from Debian's packages for the browser test of
# the live page (/ui). Idempotent: does nothing when chromium is already on
# PATH. Needs root for apt-get, as scripts/setup-python.sh does.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
	exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null
