// `npm run image:build`: builds rollcall's image from the Dockerfile with podman, on the local
// base (tooling/image/base.ts) unless --base names another (`--base docker.io/library/node:24-slim`
// where a registry is reachable). The image is labelled with a digest of its inputs (the build
// context, the Dockerfile, the base), so a second call with nothing changed reuses it (the
// image test after CI's build step); --force builds anyway.
//   npm run image:build [-- --tag localhost/rollcall:0.1.0] [--base IMAGE] [--force]
import { createHash } from 'node:crypto';
import { readFileSync, statfsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { repoRoot } from '../cluster/paths.ts';
import { ensureBaseImage } from './base.ts';
import { contextDigest } from './docker-context.ts';
import { ensureImageTools, imageExists, podman, podmanStreaming, type Log } from './podman.ts';

/** The tag of the local build. */
export const LOCAL_IMAGE = 'localhost/rollcall:0.1.0';
const INPUTS_LABEL = 'dev.rollcall.build-inputs';

export interface BuiltImage {
  ref: string;
  base: string;
  /** Bytes, as podman reports the image (all layers, uncompressed). */
  size: number;
  /** Seconds spent on the base (0 when cached) and on the Dockerfile build (0 when reused). */
  baseSeconds: number;
  buildSeconds: number;
}

const seconds = (since: number) => (Date.now() - since) / 1000;

export async function ensureImage(
  { tag = LOCAL_IMAGE, base, force = false }: { tag?: string; base?: string; force?: boolean } = {},
  log: Log = (line) => console.error(line),
): Promise<BuiltImage> {
  ensureImageTools(log);
  let started = Date.now();
  const baseRef = base ?? (await ensureBaseImage(log));
  const baseSeconds = seconds(started);
  const inputs = [
    baseRef,
    readFileSync(join(repoRoot, 'Dockerfile'), 'utf8'),
    readFileSync(join(repoRoot, '.dockerignore'), 'utf8'),
    contextDigest(repoRoot),
  ].join('\0');
  const digest = createHash('sha256').update(inputs).digest('hex');
  const labelled = imageExists(tag)
    ? podman(['image', 'inspect', '--format', `{{index .Labels "${INPUTS_LABEL}"}}`, tag])
    : undefined;
  started = Date.now();
  if (labelled === digest && !force) {
    log(`${tag} is up to date with the checkout (label ${INPUTS_LABEL})`);
  } else {
    ensureFreeSpace();
    log(`building ${tag} from the Dockerfile on ${baseRef}`);
    await podmanStreaming(
      [
        'build',
        // RUN steps without an OCI runtime: a chroot with the host's network (npm ci).
        '--isolation',
        'chroot',
        // One layer per stage: with vfs every layer is a full copy of the root filesystem, so
        // per-instruction layers cost more than the npm ci they would cache.
        '--layers=false',
        '--build-arg',
        `BASE=${baseRef}`,
        '--label',
        `${INPUTS_LABEL}=${digest}`,
        '--tag',
        tag,
        '--file',
        join(repoRoot, 'Dockerfile'),
        repoRoot,
      ],
      (line) => {
        if (/STEP|COMMIT|added \d+ packages|rror/.test(line)) log(line);
      },
    );
    // The previous build of the tag, now untagged: with vfs it is a full root filesystem.
    podman(['image', 'prune', '--force']);
  }
  return {
    ref: tag,
    base: baseRef,
    size: Number(podman(['image', 'inspect', '--format', '{{.Size}}', tag])),
    baseSeconds,
    buildSeconds: seconds(started),
  };
}

/**
 * A build needs about 2 GB in podman's store at its peak (vfs copies the whole root filesystem
 * for each stage and commit): refuse early, saying so, rather than fail half-way.
 */
function ensureFreeSpace(neededBytes = 3e9): void {
  const store = podman(['info', '--format', '{{.Store.GraphRoot}}']);
  const { bavail, bsize } = statfsSync(store);
  if (bavail * bsize < neededBytes)
    throw new Error(
      `building the image needs ${megabytes(neededBytes)} free in ${store} (podman's vfs store copies whole root filesystems), only ${megabytes(bavail * bsize)} are: free some (podman --storage-driver vfs image prune --all) and run it again`,
    );
}

export const megabytes = (bytes: number) => `${(bytes / 1e6).toFixed(0)} MB`;

if (import.meta.main) {
  const { values } = parseArgs({
    options: { tag: { type: 'string' }, base: { type: 'string' }, force: { type: 'boolean' } },
  });
  const built = await ensureImage(values).catch((err: unknown) => {
    // A missing system package (not root), too little disk: one line that says what to do.
    console.error(`image:build: ${(err as Error).message}`);
    process.exit(1);
  });
  console.log(
    `${built.ref}: ${megabytes(built.size)} (base ${built.base}: ${built.baseSeconds.toFixed(0)} s, build ${built.buildSeconds.toFixed(0)} s)`,
  );
}
