#!/usr/bin/env bash
# Keeps the map of the code and the README's links true (docs/architecture.md,
# docs/contributing.md).
#   check_architecture_doc.sh names SOURCE_DIR
#     fails, naming them, when a folder under src/ (any depth, e.g.
#     src/obs/dashboard) is not named in docs/architecture.md. A folder counts
#     as named when its path from the source root appears as a whole path:
#     `src/backend/cuda` or `src/backend/cuda/`, not only as the start of
#     `src/backend/cuda/shim` or `src/backend/cuda/README.md`.
#   check_architecture_doc.sh links SOURCE_DIR
#     fails, naming them, when README.md links to a docs/*.md file (or any
#     relative target) that does not exist.
# Hidden folders and __pycache__ are not code and are skipped.
set -u
mode=${1:-} src=${2:-}
[ -n "$mode" ] && [ -d "$src" ] || { echo "usage: $0 names|links SOURCE_DIR" >&2; exit 2; }
cd "$src" || exit 2
case $mode in
names)
  doc=docs/architecture.md
  [ -f "$doc" ] || { echo "FAIL: $doc is missing"; exit 1; }
  missing=0
  while IFS= read -r d; do
    # the path, then an optional slash, then anything but a path character
    re="(^|[^A-Za-z0-9_./-])${d//./\\.}/?([^A-Za-z0-9_./-]|$)"
    if ! grep -Eq "$re" "$doc"; then
      echo "FAIL: $d is not named in $doc (add it to the folder table)"
      missing=$((missing + 1))
    fi
  done < <(find src -mindepth 1 \( -name '.*' -o -name __pycache__ \) -prune -o -type d -print | LC_ALL=C sort)
  [ "$missing" -eq 0 ] || exit 1
  echo "every folder under src/ is named in $doc"
  ;;
links)
  [ -f README.md ] || { echo "FAIL: README.md is missing"; exit 1; }
  bad=0 n=0
  # every markdown link target in README.md that is not a URL or an anchor
  while IFS= read -r target; do
    path=${target%%#*}
    case $path in ''|http://*|https://*|mailto:*) continue ;; esac
    n=$((n + 1))
    if [ ! -e "$path" ]; then
      echo "FAIL: README.md links to '$target', which does not exist"
      bad=$((bad + 1))
    fi
  done < <(grep -o '](\([^) ]*\))' README.md | sed -e 's/^](//' -e 's/)$//')
  grep -q '](docs/[^)]*\.md' README.md || { echo "FAIL: README.md links to no docs/*.md"; exit 1; }
  [ "$bad" -eq 0 ] || exit 1
  echo "all $n relative links of README.md resolve"
  ;;
*) echo "usage: $0 names|links SOURCE_DIR" >&2; exit 2 ;;
esac
