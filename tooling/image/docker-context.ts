// The image's build context as a builder sees it: the repository filtered by .dockerignore.
// Pure matching (dockerIgnored) plus a walk of the checkout, so that the build can tell
// whether anything the image would contain changed (contextDigest) and the Dockerfile test
// can check that every file the roles import gets in.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** The patterns of a .dockerignore file, comments and blank lines dropped. */
export function readDockerignore(root: string): string[] {
  return readFileSync(join(root, '.dockerignore'), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
}

const globToRegex = (glob: string) =>
  new RegExp(
    `^${glob
      .replace(/\/$/, '')
      .replace(/[.+^${}()|[\]]/g, '\\$&')
      .replace(/\*\*\//g, '\u0001')
      .replace(/\*\*/g, '\u0002')
      .replace(/\*/g, '[^/]*')
      .replace(/\?/g, '[^/]')
      .replace(/\u0001/g, '(.*/)?')
      .replace(/\u0002/g, '.*')}$`,
  );

/** Docker's rule: the last pattern that matches a path or one of its parents wins. */
export function dockerIgnored(patterns: readonly string[], path: string): boolean {
  const parts = path.split('/');
  const candidates = parts.map((_, i) => parts.slice(0, i + 1).join('/'));
  let ignored = false;
  for (const raw of patterns) {
    const negated = raw.startsWith('!');
    const re = globToRegex(negated ? raw.slice(1) : raw);
    if (candidates.some((c) => re.test(c))) ignored = !negated;
  }
  return ignored;
}

/** True when no `!pattern` can match below `dir`, so an ignored `dir` need not be walked. */
function nothingReincludedBelow(patterns: readonly string[], dir: string): boolean {
  return patterns
    .filter((p) => p.startsWith('!'))
    .every((p) => {
      const literal = p.slice(1).split(/[*?[]/)[0]!;
      return !(literal.startsWith(`${dir}/`) || `${dir}/`.startsWith(literal));
    });
}

/** The files of `root` that a build would send, as sorted relative paths. */
export function contextFiles(root: string, patterns = readDockerignore(root)): string[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      const path = dir === '' ? entry.name : `${dir}/${entry.name}`;
      if (entry.isDirectory()) {
        if (!(dockerIgnored(patterns, path) && nothingReincludedBelow(patterns, path))) walk(path);
      } else if (!dockerIgnored(patterns, path)) files.push(path);
    }
  };
  walk('');
  return files.sort();
}

/** A digest of everything the build reads from the checkout: each file's path, mode and content. */
export function contextDigest(root: string): string {
  const hash = createHash('sha256');
  for (const file of contextFiles(root)) {
    const full = join(root, file);
    hash.update(`${file}\0${statSync(full).mode.toString(8)}\0`).update(readFileSync(full));
  }
  return hash.digest('hex');
}
