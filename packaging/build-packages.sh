#!/usr/bin/env bash
# Builds the .deb (debhelper) and the .rpm (rpmbuild) of the current tree into OUT/packages
# (OUT defaults to <repo>/out), then runs lintian and rpmlint on them.
#
#   packaging/build-packages.sh            (what `make packages` runs)
#   VMKEEPER_OUT=/some/dir packaging/build-packages.sh
#   VMKEEPER_FORCE=1 ...                   rebuild even when the inputs did not change
#
# The tree is copied as a clean checkout would be (git's tracked and untracked-but-not-ignored
# files; no node_modules, dist, out or caches; not test/, bench/, .ci/, which no package uses),
# so a dirty work tree builds the same as CI.
# Network: the npm registry (npm ci) and Debian's archive (missing build tools) only.
#
# OUT/packages/ then holds vmkeeper_<v>_<arch>.deb, vmkeeper-<v>-1.<arch>.rpm, lintian.txt,
# rpmlint.txt and build-info.txt. A second run with unchanged inputs only re-checks and exits.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${VMKEEPER_OUT:-$repo/out}
pkgdir=$out/packages
build=$out/build
started=$(date +%s)

log() { printf '== %s\n' "$*"; }
die() { printf 'build-packages: %s\n' "$*" >&2; exit 1; }

# 1. Build tools from Debian's archive, when missing.
. "$repo/scripts/lib/ensure-debian-packages.sh"
need=(debhelper lintian rpm rpmlint pandoc libvirt-dev libsystemd-dev pkg-config python3 make g++ binutils file)
ensure_debian_packages "== installing build tools" "${need[@]}"
command -v node >/dev/null || die "Node.js 20 (the runtime the package carries) must be on the PATH"

# 2. Version: package.json, and the changelog must have an entry for it.
cd "$repo"
version=$(node -p 'require("./package.json").version')
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+([~+.][0-9A-Za-z.~+]+)?$ ]] || die "package.json version '$version' is not a plain x.y.z version"
top=$(sed -n '1s/^vmkeeper (\([^)]*\)).*/\1/p' packaging/changelog)
[[ $top == "$version" ]] || die "packaging/changelog starts with $top, package.json says $version: add an entry (packaging/add-changelog-entry.sh $version 'what changed')"
arch=$(dpkg --print-architecture)
rpmarch=$(rpm --eval '%{_arch}')

# 3. A clean copy of the tree.
list_files() {
  if [[ $(git -C "$repo" rev-parse --show-toplevel 2>/dev/null) == "$repo" ]]; then
    git -C "$repo" ls-files -z --cached --others --exclude-standard
  else
    find . \( -path ./node_modules -o -path ./dist -o -path ./out -o -path ./.cache -o -path ./.dev -o -path ./.git \
      -o -path ./.home -o -path ./native/build -o -name '*.log' \) -prune -o -type f -print0 | sed -z 's|^\./||'
  fi | while IFS= read -r -d '' f; do
    # Tests, benchmarks and CI scripts are not package inputs: changing them must not rebuild.
    case $f in test/* | bench/* | .ci/*) continue ;; esac
    [[ -f $f ]] && printf '%s\0' "$f"
  done | LC_ALL=C sort -z
}
tree=$build/tree
rm -rf "$tree"
mkdir -p "$tree" "$pkgdir"
list_files | tar -C "$repo" --null -T - -cf - | tar -C "$tree" -xf -

# Inputs of this build: every file of the copy, the runtime, the architecture.
inputs=$( { (cd "$tree" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum); node --version; sha256sum "$(readlink -f "$(command -v node)")"; echo "$arch"; } | sha256sum | cut -d' ' -f1)
deb=$pkgdir/vmkeeper_${version}_${arch}.deb
rpmfile=$pkgdir/vmkeeper-${version}-1.${rpmarch}.rpm
if [[ -z ${VMKEEPER_FORCE:-} && -f $pkgdir/.inputs-hash && $(cat "$pkgdir/.inputs-hash") == "$inputs" && -f $deb && -f $rpmfile ]]; then
  log "packages are up to date ($inputs)"
  ls -1 "$deb" "$rpmfile"
  exit 0
fi
rm -f "$pkgdir"/vmkeeper[_-]*.deb "$pkgdir"/vmkeeper-*.rpm "$pkgdir/.inputs-hash"

export VMKEEPER_STAGE_CACHE=$build/stage-cache
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(date -d "$(sed -n '0,/^ -- /s/^ -- .*>  //p' packaging/changelog)" +%s)}

# 4. The .deb, with debhelper.
log "building the .deb ($version)"
debsrc=$build/deb/vmkeeper-$version
rm -rf "$build/deb"
mkdir -p "$build/deb"
cp -a "$tree" "$debsrc"
cp -a "$tree/packaging/deb/debian" "$debsrc/debian"
cp "$tree/packaging/changelog" "$debsrc/debian/changelog"
t0=$(date +%s)
(cd "$debsrc" && dpkg-buildpackage -b -us -uc --no-sign) > "$build/deb-build.log" 2>&1 || {
  tail -n 60 "$build/deb-build.log" >&2; die "dpkg-buildpackage failed (log: $build/deb-build.log)"; }
deb_secs=$(( $(date +%s) - t0 ))
cp "$build/deb/vmkeeper_${version}_${arch}.deb" "$deb"

# 5. The .rpm, with rpmbuild (Version from package.json, %changelog from packaging/changelog).
log "building the .rpm ($version)"
rpmtop=$build/rpm
rm -rf "$rpmtop"
mkdir -p "$rpmtop"/{SOURCES,SPECS,BUILD,RPMS,SRPMS}
rpmsrc=$build/rpmsrc
rm -rf "$rpmsrc"; mkdir -p "$rpmsrc"
cp -a "$tree" "$rpmsrc/vmkeeper-$version"
tar -C "$rpmsrc" -czf "$rpmtop/SOURCES/vmkeeper-$version.tar.gz" "vmkeeper-$version"
spec=$rpmtop/SPECS/vmkeeper.spec
sed "s/@VERSION@/$version/" "$tree/packaging/rpm/vmkeeper.spec" > "$spec"
python3 "$tree/packaging/changelog-to-rpm.py" "$tree/packaging/changelog" 1 >> "$spec"
t0=$(date +%s)
rpmbuild -bb --nodeps --define "_topdir $rpmtop" --define "_build_id_links none" "$spec" > "$build/rpm-build.log" 2>&1 || {
  tail -n 60 "$build/rpm-build.log" >&2; die "rpmbuild failed (log: $build/rpm-build.log)"; }
rpm_secs=$(( $(date +%s) - t0 ))
cp "$rpmtop/RPMS/$rpmarch/vmkeeper-$version-1.$rpmarch.rpm" "$rpmfile"

# 6. Lint. lintian: no errors and no warnings; rpmlint: no errors.
log "lintian"
lintian --info --display-level '>=pedantic' "$deb" > "$pkgdir/lintian.txt" 2>&1 || true
cat "$pkgdir/lintian.txt"
if grep -qE '^[EW]: ' "$pkgdir/lintian.txt"; then die "lintian reports errors or warnings (see $pkgdir/lintian.txt)"; fi
log "rpmlint"
rpmlint -r "$tree/packaging/rpm/rpmlintrc" "$rpmfile" > "$pkgdir/rpmlint.txt" 2>&1 || true
cat "$pkgdir/rpmlint.txt"
grep -qE '^ *[0-9]+ packages and [0-9]+ specfiles checked; 0 errors' "$pkgdir/rpmlint.txt" || die "rpmlint reports errors (see $pkgdir/rpmlint.txt)"

secs=$(( $(date +%s) - started ))
cat > "$pkgdir/build-info.txt" <<EOF
version $version
inputs $inputs
node $(node --version)
deb $(basename "$deb") ${deb_secs}s
rpm $(basename "$rpmfile") ${rpm_secs}s
total ${secs}s
EOF
echo "$inputs" > "$pkgdir/.inputs-hash"
log "done in ${secs}s (deb ${deb_secs}s, rpm ${rpm_secs}s)"
ls -1 "$deb" "$rpmfile"
