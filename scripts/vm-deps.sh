#!/bin/sh
# Host packages the tierd-vm guest harness needs (crates/tierd-vm), for a fresh Debian 12 machine (run as root).
#   qemu-system-x86 : the emulator (TCG works without /dev/kvm)
#   busybox-static  : the guest userland, copied into the initramfs (/bin/busybox must be static)
#   zstd            : decompresses the kernel's zstd bzImage payload into an ELF vmlinux
#   dpkg, apt       : fetch and unpack the bookworm-backports kernel (already on any Debian)
#   ca-certificates : in case the archive URI is https
# Idempotent (scripts/apt-install.sh installs only what is missing).
set -eu
"$(dirname "$0")/apt-install.sh" qemu-system-x86 busybox-static zstd ca-certificates
qemu-system-x86_64 --version | head -1
test -x /bin/busybox && /bin/busybox | head -1
