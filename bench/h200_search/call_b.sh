#!/usr/bin/env bash
# Call B on the H200: unpack the DSL (part B, ~25 MiB xz: everything but the MLIR library;
# part A follows in call C, which must start within 30 s while /tmp survives).
set -u
mkdir -p /tmp/dsl && tar -xJf carry/dslB/part_b.tar.xz -C /tmp/dsl && echo "DSL part B unpacked"
