#!/usr/bin/env bash
# Checks that the README's quick start works on a machine that has nothing:
# builds a minimal Debian 12 (bookworm) root with debootstrap --variant=minbase
# (no compiler, no make, no cmake), from the mirror this machine's apt uses;
# puts a clean clone of the repository and a copy of ../shared beside it in
# that root; and there, as root with a new login's environment, runs the
# README's prerequisite step and then `make run ITERS=$ITERS`. It passes when
# make succeeds, the last step was checkpointed and a sample was printed.
#
#   scripts/fresh-machine.sh [REPO]
#
# REPO is a git repository (default: the one holding this script); its HEAD
# commit is cloned, so uncommitted changes are not part of the check. ITERS
# (default 300) is the number of training steps. Needs root and the Debian
# mirror; installs debootstrap on this machine when it is missing.
#
# Nothing is cached, since a cache would hide a missing install step: every run
# starts from an empty root in a temporary directory under $TMPDIR (or /tmp),
# removed at the end. The script runs in a private mount namespace, and the
# /proc, /dev, /dev/pts and /dev/shm it mounts into the root are unmounted on
# every exit (success, failure, Ctrl-C); the root is deleted only once
# nothing is mounted in it.
set -euo pipefail

ITERS=${ITERS:-300}
SUITE=bookworm
me=fresh-machine

die() {
  echo "$me: FAILED: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot and mounts need it)"
case $ITERS in '' | *[!0-9]*) die "ITERS must be a positive integer, not '$ITERS'" ;; esac
[ "$ITERS" -gt 0 ] || die "ITERS must be a positive integer, not '$ITERS'"

# Mounts made in a private mount namespace are never seen outside it and
# disappear with its last process, whatever happens to this script.
if [ -z "${LF_FRESH_NS:-}" ]; then
  command -v unshare >/dev/null || die "unshare (util-linux) not found"
  LF_FRESH_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi

script_dir=$(cd "$(dirname "$0")" && pwd)
repo=${1:-$script_dir/..}
repo=$(cd "$repo" && pwd) || die "no directory '$1'"
rev=$(git -C "$repo" rev-parse --verify HEAD) || die "'$repo' is not a git repository with a commit"
shared=$(cd "$repo/.." && pwd)/shared
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
  echo "$me: note: '$repo' has uncommitted changes; they are not part of the check (HEAD $rev is)"
fi

# --- timing --------------------------------------------------------------
phase_names=()
phase_secs=()
phase_t0=
now() { echo "$EPOCHREALTIME"; }
phase_begin() {
  echo "$me: == $1"
  phase_cur=$1
  phase_t0=$(now)
}
phase_end() {
  phase_names+=("$phase_cur")
  phase_secs+=("$(awk -v a="$phase_t0" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }')")
  phase_t0=
}
print_phases() {
  [ ${#phase_names[@]} -gt 0 ] || return 0
  echo "$me: time per phase (seconds):"
  local i total=0
  for i in "${!phase_names[@]}"; do
    printf '  %-52s %5s\n' "${phase_names[$i]}" "${phase_secs[$i]}"
    total=$((total + phase_secs[i]))
  done
  printf '  %-52s %5s\n' total "$total"
}

# --- cleanup: on every exit path -------------------------------------------
work=
root=
mounted=()
# mount points under $root, deepest first (debootstrap's own included)
mounts_under() {
  awk -v r="$1" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}
cleanup() {
  local rc=$? m pid i
  trap - EXIT INT TERM HUP
  set +e
  [ -z "$phase_t0" ] || { phase_cur="$phase_cur (unfinished)" && phase_end; }
  if [ -n "$root" ] && [ -d "$root" ]; then
    # processes still running inside the root (only ours: it is our chroot)
    for pid in /proc/[0-9]*; do
      [ "$(readlink "$pid/root" 2>/dev/null)" = "$root" ] && kill -KILL "${pid#/proc/}" 2>/dev/null
    done
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
      umount "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}"
    done
    for m in $(mounts_under "$root"); do
      umount "$m" 2>/dev/null || umount -l "$m"
    done
    if [ -n "$(mounts_under "$root")" ]; then
      echo "$me: still mounted under $root, not removing it:" >&2
      mounts_under "$root" >&2
      rc=1
    fi
  fi
  if [ -n "$work" ] && [ -z "$(mounts_under "$work")" ]; then
    rm -rf --one-file-system "$work"
  fi
  print_phases
  if [ "$rc" -eq 0 ]; then
    echo "$me: PASSED: a bare Debian 12 root ran the README's prerequisite step and \`make run ITERS=$ITERS\`"
  else
    echo "$me: FAILED (exit status $rc)" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# --- this machine's Debian mirror ----------------------------------------
# Prints "URI SUITE" for every enabled deb entry of apt's sources: one-line
# files (sources.list, *.list) and deb822 files (*.sources).
apt_entries() {
  local sl=/etc/apt/sources.list sld=/etc/apt/sources.list.d/ f
  eval "$(apt-config shell sl Dir::Etc::sourcelist/f sld Dir::Etc::sourceparts/d 2>/dev/null)" || true
  for f in "$sl" "${sld%/}"/*.list; do
    [ -f "$f" ] || continue
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk '$1 == "deb" && NF >= 3 { print $2, $3 }'
  done
  for f in "${sld%/}"/*.sources; do
    [ -f "$f" ] || continue
    # RFC 822 paragraphs; continuation lines start with white space
    awk '
      function flush(  i, j, nu, ns, u, s) {
        if (f["types"] ~ /(^| )deb( |$)/ && tolower(f["enabled"]) != "no") {
          nu = split(f["uris"], u, " "); ns = split(f["suites"], s, " ")
          for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print u[i], s[j]
        }
        delete f; key = ""
      }
      /^#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]/ { if (key != "") f[key] = f[key] " " $0; next }
      {
        key = tolower(substr($0, 1, index($0, ":") - 1)); v = substr($0, index($0, ":") + 1)
        gsub(/^[ \t]+|[ \t]+$/, "", v); f[key] = v
      }
      END { flush() }
    ' "$f"
  done
}
entries=$(apt_entries)
# the archive: an entry for a release itself (not -updates, -security, ...),
# this suite's when there is one
mirror=$(awk -v s="$SUITE" '$2 == s { print $1; exit }' <<<"$entries")
[ -n "$mirror" ] || mirror=$(awk '$2 !~ /-/ && $2 !~ /\// { print $1; exit }' <<<"$entries")
security=$(awk '$2 ~ /-security$/ { print $1; exit }' <<<"$entries")
[ -n "$mirror" ] || die "no Debian mirror found in this machine's apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d/*.list, *.sources)"
echo "$me: mirror $mirror${security:+, security $security} (from this machine's apt sources)"

# --- debootstrap -----------------------------------------------------------
if ! command -v debootstrap >/dev/null; then
  phase_begin "install debootstrap on this machine"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q debootstrap >/dev/null 2>&1 || {
    apt-get update -q >/dev/null && apt-get install -y -q debootstrap >/dev/null
  } || die "could not apt-get install debootstrap"
  phase_end
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/llmforge-fresh.XXXXXX")
root=$work/root
mkdir "$root"
log=$work/make-run.log

phase_begin "debootstrap --variant=minbase $SUITE"
include=()
case $mirror in https:*) include=(--include=ca-certificates) ;; esac
debootstrap --variant=minbase "${include[@]}" "$SUITE" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2
  die "debootstrap $SUITE from $mirror failed (log above)"
}
{
  echo "deb $mirror $SUITE main"
  awk -v m="$mirror" -v s="$SUITE-updates" '$1 == m && $2 ~ /-updates$/ { print "deb", m, s, "main"; exit }' <<<"$entries"
  [ -z "$security" ] || echo "deb $security $SUITE-security main"
} >"$root/etc/apt/sources.list"
phase_end

phase_begin "clone HEAD ${rev:0:12} and copy ../shared"
mkdir -p "$root/work"
git clone -q --no-hardlinks "$repo" "$root/work/llmforge"
git -C "$root/work/llmforge" checkout -q --detach "$rev"
if [ -d "$shared" ]; then
  cp -a "$shared" "$root/work/shared"
else
  echo "$me: note: no $shared to copy"
fi
phase_end

# mount_in POINT MOUNT-ARGS...: mounts onto $root/POINT, remembered for cleanup
mount_in() {
  local at=$root/$1
  shift
  mount "$@" "$at" || die "could not mount $* on $at"
  mounted+=("$at")
}
mount_in proc -t proc proc
mount_in dev --bind /dev
mount_in dev/pts --bind /dev/pts
mount_in dev/shm -t tmpfs -o mode=1777,nosuid,nodev tmpfs # the root's own, for MPI's shared memory
cp -L /etc/resolv.conf "$root/etc/resolv.conf"

# A login shell of a new user (root, as on the project's machines): nothing
# of this script's environment goes in.
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -lc "$1"
}

# The prerequisite step is the README's own line, so the two cannot drift apart:
# the first indented line of the quick start that runs apt-get.
prereq=$(awk '/^## Quick start/ { q = 1; next } /^## / { q = 0 } q && /^    (sudo )?apt-get / { print; exit }' \
  "$root/work/llmforge/README.md" | sed -e 's/#.*//' -e 's/^ *//' -e 's/ *$//' -e 's/\bsudo //g')
[ -n "$prereq" ] || die "README.md's quick start names no apt-get prerequisite step"
phase_begin "the README's prerequisite line"
echo "$me: # $prereq"
in_root "$prereq" </dev/null >"$work/prereq.log" 2>&1 || {
  tail -n 30 "$work/prereq.log" >&2
  die "the README's prerequisite step failed in the fresh root: $prereq"
}
phase_end

# make run, its output shown and kept; the phases inside it are told apart by
# the lines that end them
run_phase() { phase_begin "make run ITERS=$ITERS: $1"; }
run_phase "scripts/setup.sh (apt-get)"
state=setup
while IFS= read -r line; do
  printf '%s\n' "$line"
  printf '%s\n' "$line" >>"$log"
  case $state:$line in
    setup:"setup: done" | setup:"["*"%]"*) # setup.sh is silent when it has nothing to do
      phase_end && run_phase "configure + build" && state=build ;;
    build:*"/llmforge prepare "*) phase_end && run_phase "prepare + train" && state=train ;;
    train:*"/llmforge sample "*) phase_end && run_phase "sample" && state=sample ;;
  esac
done < <(in_root "cd /work/llmforge && make run ITERS=$ITERS; echo \"make-run-exit-status \$?\"" </dev/null 2>&1)
phase_end
status=$(sed -n 's/^make-run-exit-status \([0-9]*\)$/\1/p' "$log" | tail -n 1)
[ "$status" = 0 ] || die "make run ITERS=$ITERS exited with status ${status:-unknown} in the fresh root (output above)"

# The last step was trained and checkpointed, and sample read it: after the
# echoed sample command, the prompt and at least 100 more characters (the
# lines sample writes to stderr about itself, "llmforge sample: ...", aside).
step_dir=$(printf 'step_%08d' "$ITERS")
grep -q "checkpoint saved: .*/ckpt/$step_dir" "$log" || die "no 'checkpoint saved: .../$step_dir' line: training did not reach step $ITERS"
[ -e "$root/work/llmforge/out/run/ckpt/latest" ] || [ -L "$root/work/llmforge/out/run/ckpt/latest" ] || die "no out/run/ckpt/latest after make run"
sample=$(awk '/\/llmforge sample / { s = 1; next } /^make-run-exit-status / { s = 0 } /^llmforge sample: / { next } s' "$log")
case $sample in "Q: "*) ;; *) die "the sample does not start with the prompt 'Q: ': '${sample:0:80}'" ;; esac
generated=${sample#Q: }
generated=${generated//[[:space:]]/}
[ ${#generated} -ge 100 ] || die "the sample holds only ${#generated} printed characters after the prompt: '$sample'"
echo "$me: sample of ${#sample} characters printed after $ITERS steps"
