#!/usr/bin/env bash
# Checks that C files follow the repository's .clang-format, without changing them.
#
#   scripts/check-format.sh                 every *.c and *.h under src/, tools/, include/
#   scripts/check-format.sh BASE            the *.c/*.h files changed since the git revision BASE
#                                           (committed or not; untracked files once git-added; deleted skipped)
#   scripts/check-format.sh [BASE] -- F...  exactly the files F (any C, C++ or CUDA source)
#
# Prints each file clang-format would change, with the number of its lines that would
# change, and exits 1 when there is one; 0 when every file is formatted; 2 for a usage
# error or no clang-format. CLANG_FORMAT names the binary (default: clang-format, else
# clang-format-14). Test fixtures and generated files ("Generated ... Do not edit" in
# their first lines) are never checked. Meant for CI, on the files a change
# touches (docs/contributing.md); reformatting is `clang-format -i FILE`.
set -u
me=check-format.sh
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2

cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
  for c in clang-format clang-format-14; do
    command -v "$c" >/dev/null 2>&1 && { cf=$c; break; }
  done
fi
[ -n "$cf" ] && command -v "$cf" >/dev/null 2>&1 || {
  echo "$me: no clang-format (Debian: apt-get install clang-format; or set CLANG_FORMAT)" >&2; exit 2; }
[ -f .clang-format ] || { echo "$me: no .clang-format in $root" >&2; exit 2; }

base="" files=()
while [ $# -gt 0 ]; do
  case $1 in
    --) shift; files=("$@"); break ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "$me: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) [ -z "$base" ] || { echo "$me: one BASE revision at most" >&2; exit 2; }; base=$1; shift ;;
  esac
done

if [ ${#files[@]} -eq 0 ]; then
  if [ -n "$base" ]; then
    git rev-parse --verify --quiet "$base^{commit}" >/dev/null || {
      echo "$me: '$base' is not a revision of this repository" >&2; exit 2; }
    mapfile -t files < <(git diff --name-only --diff-filter=ACMR "$base" -- \
      'src/*.c' 'src/*.h' 'tools/*.c' 'tools/*.h' 'include/*.h' 'tests/*.c' 'tests/*.h' 'fuzz/*.c' | LC_ALL=C sort -u)
  else
    mapfile -t files < <(find src tools include -type f \( -name '*.c' -o -name '*.h' \) | LC_ALL=C sort)
  fi
fi

bad=0 checked=0
for f in "${files[@]}"; do
  case $f in */fixtures/*) continue ;; esac
  [ -f "$f" ] || { echo "$me: '$f': no such file" >&2; bad=$((bad + 1)); continue; }
  # generated files (src/eval/unicode_tables.h) say so in their first lines
  head -n 3 -- "$f" | grep -qi 'generated.*do not edit' && continue
  checked=$((checked + 1))
  n=$("$cf" --style=file "$f" | diff -- "$f" - | grep -c '^<'; exit "${PIPESTATUS[0]}") || {
    echo "$me: clang-format failed on '$f'" >&2; bad=$((bad + 1)); continue; }
  if [ "$n" -gt 0 ]; then
    echo "$f: $n line(s) not formatted (clang-format -i $f)"
    bad=$((bad + 1))
  fi
done
if [ "$bad" -gt 0 ]; then
  echo "$me: $bad of $checked file(s) not formatted as .clang-format says" >&2
  exit 1
fi
echo "$me: $checked file(s) formatted"
