// `npm run soak -- --minutes N`: the soak (bench/soak-scenario.ts) for N minutes, minutes
// may be a fraction (0.5). Uses the cluster and Redis in KUBECONFIG / REDIS_URL when set (as in
// `npm test`), otherwise starts its own in .rollcall/soak and stops them afterwards.
// REL_SEED replays a run.
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { down, up } from '../tooling/cluster/cluster.ts';
import { repoRoot } from '../tooling/cluster/paths.ts';
import { startRedis } from '../tooling/cluster/redis.ts';
import {
  ensureSystemPackages,
  localClusterNeeds,
  MissingSystemPackageError,
} from '../tooling/cluster/system-packages.ts';

const log = (line: string) => console.error(`[soak] ${line}`);
const { values } = parseArgs({ options: { minutes: { type: 'string', default: '5' } } });
const minutes = Number(values.minutes);
if (!(minutes > 0)) {
  console.error(`--minutes takes a positive number, got ${JSON.stringify(values.minutes)}`);
  process.exit(2);
}
const own = !process.env.KUBECONFIG;
const dir = join(repoRoot, '.rollcall', 'soak');
let stopRedis = async () => {};
if (own) {
  try {
    ensureSystemPackages(localClusterNeeds, log);
  } catch (err) {
    if (!(err instanceof MissingSystemPackageError)) throw err;
    log(err.message);
    process.exit(1);
  }
  const [cluster, redis] = await Promise.all([
    up(dir, log),
    startRedis({ log, dir: join(dir, 'redis') }),
  ]);
  Object.assign(process.env, {
    KUBECONFIG: cluster.kubeconfig,
    ROLLCALL_LOCAL_DIR: dir,
    REDIS_URL: redis.url,
  });
  stopRedis = redis.stop;
}
let code = 0;
try {
  // Imported only now: the test support it uses reads the environment set above at import.
  const { soak } = await import('./soak-scenario.ts');
  await soak(minutes);
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  code = 1;
}
if (own) await Promise.all([down(dir, log), stopRedis()]);
process.exit(code);
