#!/bin/sh
# Host packages the fuzz targets need (scripts/fuzz.sh): libfuzzer-sys builds libFuzzer from
# its C++ sources, so a C++ compiler, for a fresh Debian 12 machine (run as root).
#   g++ : the C++ compiler (and libstdc++) libFuzzer is built and linked with
# Idempotent (scripts/apt-install.sh installs only what is missing).
set -eu
"$(dirname "$0")/apt-install.sh" g++
c++ --version | head -1
