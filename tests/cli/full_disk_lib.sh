# Shared by the full-disk CLI tests (sourced after cli_lib.sh, not run):
# small tmpfs mounts standing in for a disk that fills up.
#   full_disk_setup NAME   needs root and mount -t tmpfs (else "SKIPPED: reason", exit 0);
#                          a fresh $tmp (cwd, unmounted and removed on exit), a registry in it,
#                          ds/: a 20 KB character dataset of $SHARED's tinyshakespeare
#   ckpt_pages DIR         tmpfs pages the files of checkpoint DIR take (ceil(size / 4096) each)
#   disk RUN FREE_PAGES    RUN/ckpt a tmpfs with exactly FREE_PAGES pages free (a filler takes the rest)
#   no_temporaries RUN LABEL   fails when RUN/ckpt holds .tmp_*, .del_*, .old_* or latest.tmp
skip() { echo "SKIPPED: $*"; exit 0; }
mounts=()
full_disk_cleanup() {
    for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
    rm -rf "$tmp"
}
full_disk_setup() {
    [ "$(id -u)" -eq 0 ] || skip "not root (mount -t tmpfs needs it)"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/lf_cli_$1.XXXXXX") || fail "mktemp"
    trap full_disk_cleanup EXIT
    cd "$tmp" || fail "cd"
    mkdir probe
    mount -t tmpfs -o size=64k tmpfs probe 2>probe.err || skip "mount -t tmpfs is not permitted here: $(cat probe.err)"
    umount probe
    export LLMFORGE_REGISTRY=$tmp/registry.db
    head -c 20480 "$SHARED/data/tinyshakespeare.txt" >small.txt
    "$LF" prepare --char small.txt --out ds >/dev/null || fail "prepare"
}
ckpt_pages() {
    find "$1" -type f -printf '%s\n' | awk '{ p += int(($1 + 4095) / 4096) } END { print p }'
}
disk() {
    local run=$1 free=$2 size=$(($2 + 8))
    mkdir -p "$run/ckpt"
    mount -t tmpfs -o "size=$((size * 4))k" tmpfs "$run/ckpt" || fail "mount"
    mounts+=("$run/ckpt")
    head -c $((8 * 4096)) /dev/zero >"$run/ckpt/filler" 2>/dev/null
    local avail
    avail=$(df -B4096 --output=avail "$run/ckpt" | tail -1 | tr -d ' ')
    [ "$avail" -eq "$free" ] || fail "tmpfs of $size pages leaves $avail free, wanted $free"
}
no_temporaries() {
    local left
    left=$(find "$1/ckpt" -maxdepth 1 \( -name '.tmp_*' -o -name '.del_*' -o -name '.old_*' -o -name latest.tmp \) | wc -l)
    [ "$left" -eq 0 ] || fail "$2: temporaries left: $(ls -a "$1/ckpt" | tr '\n' ' ')"
}
