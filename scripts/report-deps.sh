#!/bin/sh
# Host packages the HTML report's browser test needs (crates/tierd/tests/report.rs), for a
# fresh Debian 12 machine (run as root).
#   chromium          : renders the report headless (--dump-dom, --screenshot)
#   fonts-dejavu-core : a font for the page's text (the plots embed their own font; without
#                       any font Chromium draws the HTML text as empty boxes)
# Idempotent (scripts/apt-install.sh installs only what is missing).
set -eu
"$(dirname "$0")/apt-install.sh" chromium fonts-dejavu-core
chromium --version
