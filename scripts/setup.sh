#!/usr/bin/env bash
# Set up a machine for aot: Debian toolchains (when missing) and .venv at the
# repo root with aot and its test extras. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# Toolchains and emulators from PLATFORM.md (cross compilers, QEMU, sshd).
DEB_PACKAGES=(clang lld llvm qemu-user qemu-user-static qemu-system-arm
  qemu-system-misc gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf
  gcc-riscv64-linux-gnu gcc-arm-none-eabi libnewlib-arm-none-eabi
  gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf
  openssh-server openssh-client binutils-multiarch cpio
  # Only recommended by qemu-system-arm and clang, and so left out by
  # --no-install-recommends: the virtio NIC ROM qemu-rpi4 boots with
  # (efi-virtio.rom) and the ASan/UBSan runtimes of the clang installed here.
  ipxe-qemu libclang-rt-14-dev
  # The cross glibc the static Linux harnesses link against: only recommended
  # by the cross gcc packages, so --no-install-recommends would leave it out.
  libc6-dev-arm64-cross libc6-dev-armhf-cross libc6-dev-riscv64-cross
  # Not on a bare Debian 12: the tests compile with gcc too (its warnings),
  # and `python3 -m venv` below needs python3-venv (it brings python3); the
  # firmware-build tests drive the package's CMakeLists.txt and Makefile.
  gcc python3-venv cmake make)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# The qemu-rpi4 image is made of Debian arm64 packages: apt must know them.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "setup: adding the arm64 architecture to apt (for the qemu-rpi4 image)"
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
elif ! apt-cache show linux-image-arm64:arm64 >/dev/null 2>&1; then
  $SUDO apt-get update -qq
fi

missing=()
for pkg in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
# Reinstall only when the project's dependency list changed.
stamp=.venv/.aot-setup-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -e "$stamp" ]; then
  echo "setup: installing aot and its test extras into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test]"
  rm -f .venv/.aot-setup-*
  touch "$stamp"
fi
# The qemu-rpi4 VM image (kernel + initramfs + keys) in ~/.cache/aot (or
# $AOT_CACHE_DIR): built only when its builder changed (its hash names it).
.venv/bin/python -m aot.deploy.vm_image
# The emulated boards' instruction counter (a QEMU plugin), likewise cached.
.venv/bin/python -m aot.deploy.insn_count
# The arm64 Python with LiteRT/XNNPACK that bench/compare.py --count-instructions
# (and its test) counts under qemu-aarch64, likewise cached.
.venv/bin/python -m aot.deploy.arm64_python
# Every program and file aot loads, found where aot's tools look for them.
if ! .venv/bin/aot doctor --json >/dev/null; then
  echo "setup: something is still missing: see .venv/bin/aot doctor" >&2
  exit 1
fi
echo "setup: ok"
