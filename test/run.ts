// `npm test`: starts one local cluster and one Redis for the whole run, runs every test file
// with node:test, and tears both down at the end, also when tests fail or the run is
// interrupted. Unit tests alone: `npm run test:unit` (no cluster, no Redis). Before any test it
// makes sure the machine has what the chosen files need (openssl, chromium, ps, podman,
// mmdebstrap): installed with apt-get when running as root, otherwise one line says what to
// install and the run stops.
//
// Extra arguments go to node --test, e.g. `npm test -- --test-name-pattern=webhook`.
// ROLLCALL_TEST_FILES narrows the files (a glob), e.g. ROLLCALL_TEST_FILES='test/integration/queue/*.test.ts'.
import { spawn } from 'node:child_process';
import { globSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { down, up } from '../tooling/cluster/cluster.ts';
import { repoRoot } from '../tooling/cluster/paths.ts';
import { processAlive } from '../tooling/cluster/process.ts';
import { startRedis } from '../tooling/cluster/redis.ts';
import { imageToolNeeds } from '../tooling/image/podman.ts';
import {
  ensureSystemPackages,
  localClusterNeeds,
  MissingSystemPackageError,
  type SystemNeed,
} from '../tooling/cluster/system-packages.ts';

/** `base`, or `base-<pid>` when a live run already holds `base` (its pid is in run.pid). */
function claimTestDir(base: string): string {
  let holder: number | undefined;
  try {
    holder = Number(readFileSync(join(base, 'run.pid'), 'utf8'));
  } catch {
    holder = undefined; // no run yet
  }
  const busy = holder !== undefined && holder !== process.pid && processAlive(holder);
  const dir = busy ? `${base}-${process.pid}` : base;
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'run.pid'), String(process.pid));
  return dir;
}

const log = (line: string) => console.error(`[test] ${line}`);
const files = process.env.ROLLCALL_TEST_FILES?.split(' ') ?? [
  'test/unit/**/*.test.ts',
  'test/integration/**/*.test.ts',
];

// Redis is installed by startRedis; Go is checked by the cluster build. The rest, before any test:
const needs: SystemNeed[] = [...localClusterNeeds];
const fileNeeds: Record<string, readonly Omit<SystemNeed, 'neededBy'>[]> = {
  'test/integration/ops/surface.test.ts': [{ command: 'chromium', debianPackage: 'chromium' }],
  'test/integration/ops/ui-attacks.test.ts': [{ command: 'chromium', debianPackage: 'chromium' }],
  'test/integration/cluster/lifecycle.test.ts': [{ command: 'ps', debianPackage: 'procps' }],
  'test/integration/deploy/image.test.ts': imageToolNeeds,
};
for (const file of globSync(files, { cwd: repoRoot })) {
  for (const need of fileNeeds[relative(repoRoot, resolve(repoRoot, file))] ?? [])
    needs.push({ ...need, neededBy: file });
}
let commands: Map<string, string>;
try {
  commands = ensureSystemPackages(needs, log);
} catch (err) {
  if (!(err instanceof MissingSystemPackageError)) throw err;
  log(err.message);
  process.exit(1);
}

// A second `npm test` while one runs (another checkout's helper, a second terminal) gets its
// own cluster directory instead of tearing down the first one's cluster.
const clusterDir = claimTestDir(join(repoRoot, '.rollcall', 'test'));

log('starting the local cluster and Redis for this test run');
const [cluster, redis] = await Promise.all([
  up(clusterDir, log),
  startRedis({ log, dir: join(clusterDir, 'redis') }),
]);

let stopping: Promise<void> | undefined;
const teardown = () =>
  (stopping ??= Promise.allSettled([down(clusterDir, () => {}), redis.stop()]).then((results) => {
    for (const r of results)
      if (r.status === 'rejected') log(`teardown failed: ${String(r.reason)}`);
  }));

// One file at a time: integration tests share the cluster's cluster-scoped objects.
const child = spawn(
  process.execPath,
  ['--test', '--test-concurrency=1', ...process.argv.slice(2), ...files],
  {
    cwd: repoRoot,
    stdio: 'inherit',
    env: {
      ...process.env,
      KUBECONFIG: cluster.kubeconfig,
      ROLLCALL_LOCAL_DIR: clusterDir,
      REDIS_URL: redis.url,
      ...(commands.has('chromium') ? { ROLLCALL_CHROMIUM: commands.get('chromium') } : {}),
    },
  },
);

for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    child.kill(sig);
  });
}

const code = await new Promise<number>((resolveExit) =>
  child.on('exit', (c, sig) => resolveExit(c ?? (sig ? 1 : 0))),
);
// Bounded: a teardown that hangs must not hold CI; whatever is left is logged.
const bounded = new Promise<void>((resolve) =>
  setTimeout(() => (log('teardown took over 60 s; exiting anyway'), resolve()), 60_000).unref(),
);
await Promise.race([teardown(), bounded]);
process.exit(code);
