#!/bin/sh
# Adds a release entry on top of packaging/changelog (the Debian-format changelog both packages
# use; the RPM %changelog is generated from it). The version must match package.json.
#   packaging/add-changelog-entry.sh VERSION "what changed" ["more" ...]
# VMKEEPER_CHANGELOG_DATE (RFC 2822) replaces the current date.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 VERSION CHANGE..." >&2; exit 2; }
cd "$(dirname "$0")"
version=$1; shift
who=${DEBFULLNAME:-vmkeeper developers}" <"${DEBEMAIL:-vmkeeper@example.org}">"
tmp=$(mktemp)
{
  echo "vmkeeper ($version) unstable; urgency=medium"
  echo
  for change in "$@"; do
    printf '%s\n' "$change" | fold -s -w 72 | sed -e '1s/^/  * /' -e '2,$s/^/    /' -e 's/ *$//'
  done
  echo
  echo " -- $who  ${VMKEEPER_CHANGELOG_DATE:-$(date -R)}"
  echo
  cat changelog
} > "$tmp"
mv "$tmp" changelog
chmod 0644 changelog
