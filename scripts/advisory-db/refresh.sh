#!/usr/bin/env bash
# Replaces the vendored snapshot of the RustSec advisory database that scripts/audit-deps.sh checks
# against: crates.tar.xz (the database's `crates/` tree and its license files, nothing else) and
# SNAPSHOT (which commit it is, and when). The database is a git repository on GitHub, which this
# machine and CI cannot reach, so the snapshot is taken from a clone made wherever it can be:
#
#   scripts/advisory-db/refresh.sh PATH-TO-A-CLONE-OF-rustsec/advisory-db [REV]
#
# REV defaults to the clone's HEAD. The archive is made with `git archive`, so the same commit
# always gives the same tarball; commit both files together.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="${1:?usage: refresh.sh PATH-TO-ADVISORY-DB-CLONE [REV]}"
rev="${2:-HEAD}"

commit="$(git -C "$src" rev-parse --verify "$rev^{commit}")"
date="$(git -C "$src" show -s --format=%cI "$commit")"
if ! git -C "$src" cat-file -e "$commit:crates" 2>/dev/null; then
  echo "$src at $commit has no crates/ directory: is it the RustSec advisory database?" >&2
  exit 1
fi
git -C "$src" archive --format=tar "$commit" crates LICENSE.txt LICENSES | xz -9 > "$here/crates.tar.xz.new"
mv "$here/crates.tar.xz.new" "$here/crates.tar.xz"
count="$(tar -tJf "$here/crates.tar.xz" | grep -c '/RUSTSEC-.*\.md$')"
cat > "$here/SNAPSHOT" <<SNAP
# The vendored RustSec advisory database (scripts/advisory-db/refresh.sh writes this file).
url=https://github.com/rustsec/advisory-db
commit=$commit
date=$date
advisories=$count
sha256=$(sha256sum "$here/crates.tar.xz" | cut -d' ' -f1)
SNAP
echo "advisory database snapshot: $commit ($date), $count advisories" >&2
