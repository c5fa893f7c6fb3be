#!/usr/bin/env bash
# Installs what Hera's eBPF congestion control and its benchmark need from
# Debian: clang (to rebuild cc/bpf/*.bpf.o and the host test of the C core),
# llvm, libbpf's headers, bpftool, iproute2 and iperf3. Needs root. Safe to
# run again.
set -euo pipefail
need=()
command -v clang >/dev/null || need+=(clang llvm)
[[ -e /usr/include/bpf/bpf_helpers.h ]] || need+=(libbpf-dev)
command -v bpftool >/dev/null || need+=(bpftool)
command -v ip >/dev/null || need+=(iproute2)
command -v iperf3 >/dev/null || need+=(iperf3)
if ((${#need[@]})); then
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi
