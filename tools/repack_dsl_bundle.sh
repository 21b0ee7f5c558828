#!/usr/bin/env bash
# Repack the CuTe DSL bundle for the GPU machine (.device/dsl.tar.xz, as
# ../shared/device/make-dsl-bundle writes it) smaller: xz's x86 filter in front of LZMA2
# with a dictionary that holds the DSL's largest library, and without the DSL's top-level
# `cutlass/experimental` package, which nothing here imports. A device call carries at
# most 64 MiB, the bundle and this tree together; plain `xz -9e` leaves the bundle too
# large for that (CONTRIBUTING.md). `tar xJf` (dsl-env) unpacks either.
#
#   bash tools/repack_dsl_bundle.sh [BUNDLE]      # default .device/dsl.tar.xz, a few minutes
set -euo pipefail
bundle=${1:-.device/dsl.tar.xz}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/site"
xz -dc "$bundle" | tar xf - -C "$tmp/site"
rm -rf "$tmp/site/nvidia_cutlass_dsl/dsl_packages/cutlass/experimental"
(cd "$tmp/site" && tar cf - .) | xz --x86 --lzma2=preset=9e,dict=192MiB >"$tmp/bundle.tar.xz"
xz -t "$tmp/bundle.tar.xz"
mv "$tmp/bundle.tar.xz" "$bundle"
ls -la "$bundle"
