#!/bin/sh
# Host packages the tierd-vm guest harness needs (crates/tierd-vm), for a fresh Debian 12 machine (run as root).
#   qemu-system-x86 : the emulator (TCG works without /dev/kvm)
#   busybox-static  : the guest userland, copied into the initramfs (/bin/busybox must be static)
#   zstd            : decompresses the kernel's zstd bzImage payload into an ELF vmlinux
#   dpkg, apt       : fetch and unpack the bookworm-backports kernel (already on any Debian)
#   ca-certificates : in case the archive URI is https
# Idempotent: apt-get install is a no-op when everything is present.
set -eu
PKGS="qemu-system-x86 busybox-static zstd ca-certificates"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  # shellcheck disable=SC2086
  apt-get install -y --no-install-recommends $missing
fi
qemu-system-x86_64 --version | head -1
test -x /bin/busybox && /bin/busybox | head -1
