#!/bin/sh
# Builds everything the packages ship that is not a plain file copy from the tree, into DEST:
#
#   DEST/lib/         -> /usr/lib/vmkeeper: bin/node (the bundled runtime), dist/ (the built agent,
#                        and dist/ctl/ when vmkeeperctl exists), native/build/Release/ (the agent's
#                        own domain events addon), node_modules/ (production only, native addons
#                        compiled against bin/node), package.json
#   DEST/bin/         -> /usr/bin: vmkeeperd (and vmkeeperctl), shell wrappers that exec bin/node
#   DEST/man/         -> man pages rendered from docs/man/*.md
#   DEST/doc/         -> extra docs: nodejs-LICENSE
#   DEST/completions/ -> bash completion for vmkeeperctl, when completions/vmkeeperctl.bash exists
#
# Usage: packaging/stage-app.sh DEST   (run from the top of a source tree)
#
# Both debian/rules and the RPM spec call this. When VMKEEPER_STAGE_CACHE names a directory,
# a stage built earlier from identical inputs is copied from there instead of rebuilt (the
# `make packages` driver builds the stage once and lets both package builds reuse it).
#
# Network: only the npm registry (npm ci). node-pre-gyp is told to build from source, so no
# prebuilt binary is fetched from GitHub; node-gyp uses the runtime's own headers (--nodedir).
set -eu

dest=${1:?usage: stage-app.sh DEST}
top=$(pwd)
[ -f "$top/package.json" ] && [ -d "$top/src" ] || { echo "stage-app.sh: run from the top of the source tree" >&2; exit 1; }

NODE=${VMKEEPER_NODE:-$(command -v node)}
NODE=$(readlink -f "$NODE")
node_major=$("$NODE" -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "stage-app.sh: the bundled runtime must be Node.js 20 or newer ($NODE is $("$NODE" --version))" >&2
  exit 1
fi
# Headers of exactly this runtime, for node-gyp (node installs them under <prefix>/include/node).
nodedir=$(dirname "$(dirname "$NODE")")
[ -f "$nodedir/include/node/node_api.h" ] || { echo "stage-app.sh: no Node.js headers under $nodedir/include/node" >&2; exit 1; }
node_license=
for f in /usr/share/doc/nodejs/LICENSE "$nodedir/LICENSE" "$nodedir/share/doc/node/LICENSE"; do
  [ -f "$f" ] && { node_license=$f; break; }
done
[ -n "$node_license" ] || { echo "stage-app.sh: cannot find the LICENSE of the Node.js runtime $NODE" >&2; exit 1; }

# Inputs that decide the stage's content. Package metadata (changelog, debian/, spec) is not one.
inputs_hash() {
  {
    echo "recipe 6"
    "$NODE" --version
    sha256sum "$NODE" | cut -d' ' -f1
    uname -m
    find src native docs/man completions -type f ! -path 'native/build/*' 2>/dev/null | LC_ALL=C sort | xargs -r sha256sum
    sha256sum package.json package-lock.json tsconfig.json tsconfig.build.json packaging/stage-app.sh packaging/prune-modules.mjs packaging/node-flags
  } | sha256sum | cut -d' ' -f1
}
hash=$(inputs_hash)

if [ -n "${VMKEEPER_STAGE_CACHE:-}" ] && [ -f "$VMKEEPER_STAGE_CACHE/.inputs-hash" ] &&
   [ "$(cat "$VMKEEPER_STAGE_CACHE/.inputs-hash")" = "$hash" ]; then
  echo "stage-app.sh: reusing the stage in $VMKEEPER_STAGE_CACHE ($hash)"
  rm -rf "$dest"
  mkdir -p "$dest"
  cp -a "$VMKEEPER_STAGE_CACHE/." "$dest/"
  exit 0
fi

echo "stage-app.sh: building the stage in $dest with $NODE ($("$NODE" --version))"
rm -rf "$dest"
mkdir -p "$dest/lib/bin" "$dest/bin" "$dest/man" "$dest/doc"
dest=$(cd "$dest" && pwd)

# npm and node-gyp run with this runtime and its headers; nothing is fetched except from npm.
PATH=$(dirname "$NODE"):$PATH
npm_config_nodedir=$nodedir
npm_config_build_from_source=true
npm_config_audit=false
npm_config_fund=false
npm_config_update_notifier=false
export PATH npm_config_nodedir npm_config_build_from_source npm_config_audit npm_config_fund \
  npm_config_update_notifier
[ -n "${VMKEEPER_NPM_CACHE:-}" ] && { npm_config_cache=$VMKEEPER_NPM_CACHE; export npm_config_cache; }
# dpkg-buildpackage may run with a HOME that does not exist.
if [ -z "${HOME:-}" ] || [ ! -w "${HOME:-/nonexistent}" ]; then HOME=$top/.home; mkdir -p "$HOME"; export HOME; fi

# 1. Build the agent from the tree (dev dependencies: typescript).
npm ci --no-audit --no-fund --loglevel=warn
npm run --silent build

# 2. Production dependencies in a separate folder, native addons compiled against $NODE.
lib=$dest/lib
cp package.json package-lock.json "$lib/"
(cd "$lib" && npm ci --omit=dev --no-audit --no-fund --loglevel=warn)
rm -f "$lib/package-lock.json"
cp -a dist "$lib/dist"
# The agent's own addon (built by `npm run build` against $NODE), where dist/ looks for it.
mkdir -p "$lib/native/build/Release"
cp native/build/Release/domain_events.node "$lib/native/build/Release/"

# 3. Trim what is not needed at run time (and what lintian/rpmlint would rightly complain about).
nm=$lib/node_modules
# Build-only packages that runtime dependencies declare as regular dependencies (tsx and
# node-pre-gyp from @unraid/libvirt, node-gyp from usocket), what only they need, the .bin
# links, and compiler intermediates of the native addons.
"$NODE" packaging/prune-modules.mjs "$lib" tsx esbuild @mapbox/node-pre-gyp node-gyp
rm -rf "$nm/.bin" "$nm/.package-lock.json"
for release in $(find "$nm" -type d -path '*/build/Release'); do
  build=$(dirname "$release")
  find "$build" -mindepth 1 -maxdepth 1 ! -name Release -exec rm -rf {} +
  find "$release" -mindepth 1 -maxdepth 1 ! -name '*.node' -exec rm -rf {} +
done
# Native sources, docs, type declarations, source maps, tests, editor and VCS files. Folders are
# only removed at a package's top level, where they are never code (yaml has a dist/doc/ of code).
for pkg in $(find "$nm" -name package.json -path '*/node_modules/*' -exec dirname {} \; | grep -E '/node_modules/(@[^/]+/)?[^/@]+$' | LC_ALL=C sort -u); do
  [ -f "$pkg/package.json" ] || continue
  for d in test tests __tests__ example examples; do rm -rf "$pkg/$d"; done
  find "$pkg" -mindepth 1 -maxdepth 1 -name '.*' -exec rm -rf {} +   # .github, .nyc_output, .babelrc, ...
done
find "$nm" -type f \( -name '*.md' -o -name '*.markdown' -o -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' \
    -o -name '*.map' -o -name '*.ts' -o -name '.npmignore' -o -name '.gitignore' -o -name '.gitattributes' \
    -o -name '.eslintrc*' -o -name '.prettierrc*' -o -name '.editorconfig' -o -name '.travis.yml' -o -name '.jshintrc' \
    -o -name '.nycrc' -o -name 'Makefile' -o -name '*.gyp' -o -name '*.gypi' -o -name '*.cc' -o -name '*.cpp' \
    -o -name '*.c' -o -name '*.h' -o -name '*.hpp' -o -name '*.tsbuildinfo' -o -name 'tsconfig*.json' \
    -o -name '*.yml' -o -name '*.yaml' -o -name 'CHANGELOG*' -o -name 'History*' -o -name 'AUTHORS*' \) -delete
find "$nm" -type d -empty -delete
find "$lib/dist" -type f -name '*.map' -delete
# Scripts meant for a `node` on the PATH: the package runs everything with its own runtime, so
# drop the shebangs (nothing in node_modules is executed directly) and the executable bits.
find "$nm" "$lib/dist" -type f ! -name '*.node' -exec grep -l '^#!' {} + | while read -r f; do
  if [ "$(head -c 2 "$f")" = '#!' ]; then
    sed -i '1s|^#!.*$|// (shebang removed: run with /usr/lib/vmkeeper/bin/node)|' "$f"
  fi
done
find "$lib" -type f ! -name '*.node' -exec chmod 0644 {} +
find "$lib" -type d -exec chmod 0755 {} +
find "$nm" "$lib/native" -type f -name '*.node' -exec chmod 0644 {} +

# 4. The runtime itself (stripped: the debug info alone is 12 MB), and its licence.
cp "$NODE" "$lib/bin/node"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$lib/bin/node"
chmod 0755 "$lib/bin/node"
cp "$node_license" "$dest/doc/nodejs-LICENSE"
chmod 0644 "$dest/doc/nodejs-LICENSE"
for addon in $(find "$nm" "$lib/native" -type f -name '*.node'); do
  strip --strip-unneeded --remove-section=.comment "$addon"
done

# 5. Entry points on the PATH, always with the bundled runtime.
wrapper() { # name script [node options]
  cat > "$dest/bin/$1" <<EOF
#!/bin/sh
# $1: runs the agent's code with the Node.js runtime bundled in /usr/lib/vmkeeper/bin.
exec /usr/lib/vmkeeper/bin/node ${3:+$3 }/usr/lib/vmkeeper/$2 "\$@"
EOF
  chmod 0755 "$dest/bin/$1"
}
wrapper vmkeeperd dist/main.js "$(sed 's/#.*//' packaging/node-flags | xargs)"
[ -f dist/ctl/main.js ] && wrapper vmkeeperctl dist/ctl/main.js

# 6. Man pages (pandoc), and the vmkeeperctl completion when there is one.
version=$("$NODE" -p 'require("./package.json").version')
date=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(stat -c %Y package.json)}" +%Y-%m-%d)
for md in docs/man/*.md; do
  [ -f "$md" ] || continue
  page=$(basename "$md" .md)            # vmkeeperd.8
  pandoc --standalone --from markdown --to man \
    --metadata "footer=vmkeeper $version" --metadata "date=$date" \
    "$md" -o "$dest/man/$page"
done
# vmkeeperctl(1) comes from docs/man/vmkeeperctl.1.md; until that exists, from its --help.
if [ -f dist/ctl/main.js ] && [ ! -f docs/man/vmkeeperctl.1.md ]; then
  {
    printf -- '---\ntitle: VMKEEPERCTL\nsection: 1\nheader: User Commands\n---\n\n'
    printf '# NAME\n\nvmkeeperctl - operate the machines of vmkeeperd over D-Bus\n\n# DESCRIPTION\n\n'
    "$lib/bin/node" "$lib/dist/ctl/main.js" --help | sed 's/^/    /'
    printf '\n# SEE ALSO\n\n**vmkeeperd**(8), **vmkeeper.conf**(5)\n'
  } | pandoc --standalone --from markdown --to man --metadata "footer=vmkeeper $version" --metadata "date=$date" \
      -o "$dest/man/vmkeeperctl.1"
fi
if [ -f completions/vmkeeperctl.bash ]; then
  mkdir -p "$dest/completions"
  cp completions/vmkeeperctl.bash "$dest/completions/vmkeeperctl"
  chmod 0644 "$dest/completions/vmkeeperctl"
fi

# 7. Smoke test of the staged agent with its own runtime: every production dependency loads.
"$lib/bin/node" "$lib/dist/main.js" --version
(cd "$lib" && ./bin/node --input-type=module -e '
  import { readFileSync } from "node:fs";
  const deps = Object.keys(JSON.parse(readFileSync("package.json", "utf8")).dependencies);
  for (const d of deps) await import(d);
  const { createRequire } = await import("node:module");
  const require = createRequire(process.cwd() + "/");
  require("usocket");
  require("./native/build/Release/domain_events.node");
  console.log("loaded:", deps.join(" "), "usocket", "domain_events.node");
')

echo "$hash" > "$dest/.inputs-hash"
if [ -n "${VMKEEPER_STAGE_CACHE:-}" ]; then
  rm -rf "$VMKEEPER_STAGE_CACHE"
  mkdir -p "$VMKEEPER_STAGE_CACHE"
  cp -a "$dest/." "$VMKEEPER_STAGE_CACHE/"
fi
echo "stage-app.sh: done ($hash)"
