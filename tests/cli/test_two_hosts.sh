#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces joined by a veth pair act
# as hosts 10.77.0.1 and 10.77.0.2. mpirun runs in the first, with a hostfile
# of both addresses (one slot each); its remote-start agent enters the other
# namespace (ip netns exec) instead of ssh, and Open MPI's TCP traffic is held
# to the veth link. The 2-rank run across the two "hosts" must log the same
# per-step losses as one process with the same global batch (1e-5 relative),
# with ZeRO stage 0 and stage 3.
#   test_two_hosts.sh LLMFORGE SOURCE_DIR SHARED_DIR
# Needs root, permission to create network namespaces, iproute2 and Open
# MPI's mpirun; without them it prints "SKIPPED: reason" and exits 0.
set -u
bin=$1 shared=$3
skip() { echo "SKIPPED: $*"; exit 0; }

[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces need root)"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2)"
command -v mpirun >/dev/null 2>&1 || skip "no mpirun"
mpirun --version 2>/dev/null | grep -q "Open MPI" || skip "mpirun is not Open MPI's (plm_rsh_agent is Open MPI's)"

ns0=lf2h$$a ns1=lf2h$$b      # namespace names, unique to this run
veth0=lf2h$$a veth1=lf2h$$b  # interface names (15 characters at most)
dir=$(mktemp -d "${TMPDIR:-/tmp}/lf_two_hosts.XXXXXX")
cleanup() {
  ip netns del "$ns0" 2>/dev/null
  ip netns del "$ns1" 2>/dev/null # deleting a namespace removes its end of the veth pair, and so both
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "FAIL: $*"; [ -f "$dir/out" ] && { echo "--- output"; cat "$dir/out"; }; exit 1; }

ip netns add "$ns0" 2>"$dir/err" || skip "cannot create a network namespace: $(head -1 "$dir/err")"
ip netns add "$ns1" || fail "ip netns add $ns1"
ip link add "$veth0" netns "$ns0" type veth peer name "$veth1" netns "$ns1" 2>"$dir/err" ||
  skip "cannot create a veth pair: $(head -1 "$dir/err")"
ip -n "$ns0" addr add 10.77.0.1/24 dev "$veth0" || fail "address on $veth0"
ip -n "$ns1" addr add 10.77.0.2/24 dev "$veth1" || fail "address on $veth1"
for n in "$ns0" "$ns1"; do
  ip -n "$n" link set lo up || fail "loopback up in $n"
done
ip -n "$ns0" link set "$veth0" up || fail "$veth0 up"
ip -n "$ns1" link set "$veth1" up || fail "$veth1 up"
if command -v ping >/dev/null 2>&1; then
  ip netns exec "$ns0" ping -c 1 -W 2 10.77.0.2 >/dev/null 2>&1 || fail "10.77.0.2 unreachable from $ns0"
fi

# the remote-start agent: Open MPI calls it as `agent HOST COMMAND...` (as it would ssh)
cat >"$dir/agent.sh" <<EOF
#!/bin/sh
host=\$1
shift
case "\$host" in
  10.77.0.1) ns=$ns0 ;;
  10.77.0.2) ns=$ns1 ;;
  *) echo "agent.sh: unknown host '\$host'" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF
chmod +x "$dir/agent.sh"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$dir/hosts"

. "$(dirname "$0")/../../tests/train/mpi_cli_lib.sh"
tiny_job "$shared"

"$bin" train "$dir/cfg.json" --threads 1 --out_dir="$dir/one" >"$dir/one.out" 2>&1 ||
  { cat "$dir/one.out"; fail "1-process run"; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --allow-run-as-root -np 2 --hostfile "$dir/hosts"
     --mca plm_rsh_agent "$dir/agent.sh"
     --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24)
# a sanitizer build's LeakSanitizer settings (Open MPI's own allocations suppressed) reach both ranks
[ -n "${LSAN_OPTIONS:-}" ] && mpi+=(-x LSAN_OPTIONS)
echo "ip netns exec $ns0 ${mpi[*]} $bin train cfg.json"

# each rank runs in its own namespace: rank 0 in the first, rank 1 in the second
timeout -k 5 30 ip netns exec "$ns0" "${mpi[@]}" sh -c 'echo "rank $OMPI_COMM_WORLD_RANK in $(ip netns identify $$)"' \
  >"$dir/out" 2>&1 || fail "mpirun across the two namespaces (a shell per rank) exited $?"
grep -qx "rank 0 in $ns0" "$dir/out" && grep -qx "rank 1 in $ns1" "$dir/out" ||
  fail "the ranks did not run one in each namespace"
echo "rank 0 ran in $ns0 (10.77.0.1), rank 1 in $ns1 (10.77.0.2)"

rx() { ip netns exec "$ns1" cat "/sys/class/net/$veth1/statistics/rx_bytes"; }
rx0=$(rx)
t0=$(date +%s.%N)
timeout -k 5 50 ip netns exec "$ns0" "${mpi[@]}" "$bin" train "$dir/cfg.json" --threads 1 \
  --out_dir="$dir/two" >"$dir/out" 2>&1
rc=$?
t1=$(date +%s.%N)
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "mpirun across the two namespaces hung"
[ "$rc" -eq 0 ] || fail "mpirun across the two namespaces exited $rc"
# the gradients went over the veth link: 5 steps of a ~30k-parameter model at 4 bytes a parameter
rx1=$(rx)
[ $((rx1 - rx0)) -gt 200000 ] || fail "only $((rx1 - rx0)) bytes reached $veth1 during training"
grep -q "data parallel: 2 ranks (mpi" "$dir/out" || fail "no data-parallel line"
[ "$(grep -c '"type":"train"' "$dir/two/log.jsonl")" -eq 5 ] || fail "log.jsonl should hold 5 train records"
paste <(losses "$dir/one") <(losses "$dir/two") | awk -v b=$((rx1 - rx0)) -v t="$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")" '
  { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; n++ }
  END { if (n != 5 || w > 1e-5) { printf "losses differ: %d steps, worst relative %.3g\n", n, w; exit 1 }
        printf "2 ranks on 2 hosts = 1 process over %d steps (worst relative difference %.2g; mpirun %s s, %d bytes in over the veth)\n", n, w, t, b }' ||
  fail "losses across two hosts differ from one process's"
# ZeRO-3 across the two hosts: parameters gathered unit by unit over the link,
# the step-5 checkpoint written by both ranks (the namespaces share the filesystem)
timeout -k 5 50 ip netns exec "$ns0" "${mpi[@]}" "$bin" train "$dir/cfg.json" --threads 1 \
  --zero_optimization.stage=3 --out_dir="$dir/zero3" >"$dir/out" 2>&1
rc=$?
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "ZeRO-3 across the two namespaces hung"
[ "$rc" -eq 0 ] || fail "ZeRO-3 across the two namespaces exited $rc"
paste <(losses "$dir/one") <(losses "$dir/zero3") | awk '
  { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; n++ }
  END { if (n != 5 || w > 1e-5) { printf "ZeRO-3 losses differ: %d steps, worst relative %.3g\n", n, w; exit 1 }
        printf "ZeRO-3, 2 ranks on 2 hosts = 1 process over %d steps (worst relative difference %.2g)\n", n, w }' ||
  fail "ZeRO-3 losses across two hosts differ from one process's"
echo "PASS"
