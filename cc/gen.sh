#!/usr/bin/env bash
# Builds the eBPF objects cc/bpf/hera.bpf.o and cc/bpf/hera_paper.bpf.o from
# cc/bpf/hera.bpf.c. Needs clang, bpftool and libbpf's headers (see
# scripts/setup-cc.sh) and a kernel with BTF at /sys/kernel/btf/vmlinux.
# Run through `go generate ./cc/`. The objects are committed so that building
# xrealm needs no clang. No test compares them with the source (another clang
# would give other bytes): after editing the C, run this and commit the objects;
# cc/core_test.go checks the C rule itself, compiled for the host, against Go.
set -euo pipefail
cd "$(dirname "$0")/bpf"
if [[ ! -s vmlinux.h ]]; then
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > vmlinux.h.tmp
	mv vmlinux.h.tmp vmlinux.h
fi
# The source paths in BTF line info are kept relative (cc/bpf/…), so that the
# objects do not depend on where the repository was cloned.
CFLAGS=(-g -O2 -target bpf -D__TARGET_ARCH_x86 -I. -Wall -Werror "-ffile-prefix-map=$PWD=cc/bpf")
clang "${CFLAGS[@]}" -DHERA_VARIANT=1 -c hera.bpf.c -o hera.bpf.o
clang "${CFLAGS[@]}" -DHERA_VARIANT=0 -c hera.bpf.c -o hera_paper.bpf.o
# Drop DWARF (keeps BTF, which the loader needs) to keep the objects small.
llvm-strip -g hera.bpf.o hera_paper.bpf.o 2>/dev/null || true
