// `npm test`: starts one local cluster and one Redis for the whole run, runs every test file
// with node:test, and tears both down at the end, also when tests fail or the run is
// interrupted. Unit tests alone: `npm run test:unit` (no cluster, no Redis).
//
// Extra arguments go to node --test, e.g. `npm test -- --test-name-pattern=webhook`.
// ROLLCALL_TEST_FILES narrows the files (a glob), e.g. ROLLCALL_TEST_FILES='test/integration/queue/*.test.ts'.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { down, up } from '../cluster/cluster.ts';
import { repoRoot } from '../cluster/paths.ts';
import { startRedis } from '../cluster/redis.ts';

const clusterDir = join(repoRoot, '.rollcall', 'test');
const log = (line: string) => console.error(`[test] ${line}`);
const files = process.env.ROLLCALL_TEST_FILES?.split(' ') ?? [
  'test/unit/**/*.test.ts',
  'test/integration/**/*.test.ts',
];

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
