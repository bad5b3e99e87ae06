#!/usr/bin/env bash
# Build the qemu-rpi4 VM image into ~/.cache/aot (or $AOT_CACHE_DIR); a no-op
# when the image of the current builder is there. --force rebuilds it.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m aot.deploy.vm_image "$@"
