// Deletes from a production node_modules every package that is only needed to build or install,
// and everything reachable only through those. Usage: node prune-modules.mjs APPDIR NAME...
//
// Some runtime dependencies declare build tools as regular dependencies (@unraid/libvirt lists
// tsx and @mapbox/node-pre-gyp; usocket lists node-gyp). npm installs them with --omit=dev, but
// nothing loads them at run time; the stage's smoke test proves the agent still loads.
import { existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';

const [appDir, ...buildOnly] = process.argv.slice(2);
const skip = new Set(buildOnly);
const root = path.resolve(appDir);
const manifest = (dir) => JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
const depsOf = (m) => [...Object.keys(m.dependencies ?? {}), ...Object.keys(m.optionalDependencies ?? {})];

/** Node's lookup: <from>/node_modules/<name>, then each parent's, up to the app. */
function resolve(from, name) {
  for (let dir = from; ; dir = path.dirname(dir)) {
    const candidate = path.join(dir, 'node_modules', name);
    if (existsSync(path.join(candidate, 'package.json'))) return candidate;
    if (dir === root || !dir.startsWith(root)) return undefined;
  }
}

const keep = new Set();
const queue = depsOf(manifest(root)).map((name) => [root, name]);
while (queue.length) {
  const [from, name] = queue.pop();
  if (skip.has(name)) continue;
  const dir = resolve(from, name);
  if (!dir || keep.has(dir)) continue;
  keep.add(dir);
  for (const dep of depsOf(manifest(dir))) queue.push([dir, dep]);
}

const removed = [];
function sweep(nodeModules) {
  if (!existsSync(nodeModules)) return;
  for (const entry of readdirSync(nodeModules)) {
    if (entry.startsWith('.')) continue;
    const dirs = entry.startsWith('@')
      ? readdirSync(path.join(nodeModules, entry)).map((e) => path.join(nodeModules, entry, e))
      : [path.join(nodeModules, entry)];
    for (const dir of dirs) {
      if (keep.has(dir)) sweep(path.join(dir, 'node_modules'));
      else {
        rmSync(dir, { recursive: true, force: true });
        removed.push(path.relative(root, dir));
      }
    }
    if (entry.startsWith('@') && readdirSync(path.join(nodeModules, entry)).length === 0) rmSync(path.join(nodeModules, entry), { recursive: true });
  }
}
sweep(path.join(root, 'node_modules'));
console.log(`prune-modules: kept ${keep.size} packages, removed ${removed.length}: ${removed.join(' ')}`);
