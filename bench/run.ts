// npm run bench [-- --quick] [-- --keep-cluster]: rollcall on the local cluster (real
// apiserver), against its peer and baselines in the same run: rollcall without coalescing, a
// controller-runtime controller (bench/peer), a polling reconciler (bench/poller.ts) and the
// floor (the storm's required status writes and Events in a tight loop); then the admission
// bench, the attack and the audit (bench/admission.ts, attack.ts, audit.ts), each on a cluster of
// its own.
// The bench plays the data plane itself (writes replica reports) to control timing.
// Figures come from a counting proxy between each subject and the apiserver, a Policy watch,
// /metrics and /proc. Prints a table; JSON goes to bench/out/.
//
// This file is the driver: it sets up, runs the phases (bench/phases/, one file each) in
// order and saves after each; bench/context.ts is what they share.
import { spawnSync } from 'node:child_process';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { POLICY_SERVER_LABEL } from '../api/constants.ts';
import { down, up } from '../tooling/cluster/cluster.ts';
import { repoRoot } from '../tooling/cluster/paths.ts';
import { startRedis } from '../tooling/cluster/redis.ts';
import { installCrds } from '../control-plane/install-crds.ts';
import {
  Bench,
  concurrency,
  group,
  log,
  namespace,
  policyBody,
  sizesFor,
  version,
} from './context.ts';
import { fanOut } from './phases/fan-out.ts';
import { floor, latencyFloor } from './phases/floor.ts';
import { latency } from './phases/latency.ts';
import { memory } from './phases/memory.ts';
import { scaleOut } from './phases/scale-out.ts';
import { storm, stormDataPlaneAlone } from './phases/storm.ts';
import { ensurePeer } from './peer-build.ts';
import { settle, subjects } from './subjects.ts';
import { benchDir, pool, sleep } from './support.ts';
import { printTable, type PerSubject } from './table.ts';

if (process.argv.includes('--help')) {
  console.log(`usage: npm run bench [-- --quick] [-- --keep-cluster] [-- --no-admission] [-- --no-attack] [-- --no-audit]
  --quick         small sizes, under 5 minutes: ${JSON.stringify(sizesFor(true))}
  --keep-cluster  leave the bench's clusters (.rollcall/bench, -admission, -attack, -audit) running afterwards
  --no-admission  skip the admission figure (bench/admission.ts, also npm run bench:admission)
  --no-attack     skip the attack (bench/attack.ts, also npm run bench:attack)
  --no-audit      skip the last part, the audit (bench/audit.ts, also npm run bench:audit)
  BENCH_FLIPS, BENCH_STORM, BENCH_MEM_PODS, BENCH_MEM_POLICIES override the sizes (full: ${JSON.stringify(sizesFor(false))})
  BENCH_SUBJECTS=rollcall,controller-runtime runs only the subjects named (of rollcall, no-coalesce,
    controller-runtime, polling)
  BENCH_NODE_OPTIONS adds Node options to rollcall's processes (e.g. --cpu-prof --cpu-prof-dir=DIR)
phases, each against rollcall, rollcall --no-coalesce, the controller-runtime peer (bench/peer, built
with Go on first use) and a polling reconciler: latency, storm;
then the storm's data plane alone, the floors (the storm's writes; a single change's two
writes), memory, worker scale-out and fan-out; last, on a cluster of its own, admission latency
of rollcall's webhook beside the same policy as a native ValidatingAdmissionPolicy; then, on
another cluster, an attack: a hostile policy under load beside the admission policy on the same
policy server (the canary's latency, the replica's event-loop delay and peak RSS, failed calls);
last, on a cluster of its own, the audit: 10,000 existing pods × 20 [Audit] Policies on real policy
servers (the initial pass, evaluations/s, API writes, memory, Report bytes, one change's latency).
Figures go to stdout and bench/out/*.json.`);
  process.exit(0);
}

const quick = process.argv.includes('--quick');
const keepCluster = process.argv.includes('--keep-cluster');

const cluster = await up(benchDir, log);
const redis = await startRedis({ dir: join(benchDir, 'redis'), log });
const kc = new KubeConfig();
kc.loadFromFile(cluster.kubeconfig);
const results: Record<string, unknown> = {
  quick,
  size: sizesFor(quick),
  concurrency,
  machine: {
    cores: cpus().length,
    cpu: cpus()[0]?.model,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
  },
};
const bench = new Bench(kc, redis.url, quick, results);
bench.redisPid = redis.pid;
bench.peerBinary = await ensurePeer(log);
const { size, custom, core, apps, proxy, recorder } = bench;

let stopping: Promise<void> | undefined;
function teardown(): Promise<void> {
  stopping ??= (async () => {
    recorder.stop();
    await Promise.all([...bench.running].map((p) => p.stop()));
    proxy.close();
    await redis.stop();
    if (!keepCluster) await down(benchDir, () => {});
  })();
  return stopping;
}

async function createObjects(): Promise<void> {
  for (const server of ['lat', 'storm']) {
    await custom.createClusterCustomObject({
      group,
      version,
      plural: 'policyservers',
      body: {
        apiVersion: `${group}/${version}`,
        kind: 'PolicyServer',
        metadata: { name: server },
        spec: { image: 'sim://policy-server', replicas: 3 },
      },
    });
  }
  await pool(
    [...bench.latNames.map((n) => [n, 'lat']), ...bench.stormNames.map((n) => [n, 'storm'])],
    16,
    ([n, s]) =>
      custom.createClusterCustomObject({
        group,
        version,
        plural: 'policies',
        body: policyBody(n!, s!),
      }),
  );
  log(
    `created ${bench.latNames.length + bench.stormNames.length} policies on servers lat and storm (3 replicas each)`,
  );
}

/** Deletes what an earlier run left and starts the proxy and the Policy recorder. */
async function prepare(): Promise<void> {
  await core.createNamespace({ body: { metadata: { name: namespace } } }).catch(() => {});
  await installCrds(kc, { info: () => {} });
  for (const plural of ['policies', 'policyservers'])
    await custom.deleteCollectionClusterCustomObject({ group, version, plural });
  await core.deleteCollectionNamespacedPod({
    namespace,
    labelSelector: `${POLICY_SERVER_LABEL}=mem-pods`,
  });
  await proxy.start(kc, join(benchDir, 'proxy.kubeconfig'));
  await recorder.start();
  await recorder.until(() => recorder.latest.size === 0, 60_000, 'leftover policies deleted');
  for (
    let i = 0;
    (await apps.listNamespacedDeployment({ namespace })).items.length > 0 ||
    (await core.listNamespacedPod({ namespace })).items.length > 0;
    i++
  ) {
    if (i > 600) throw new Error('leftover Deployments and pods were not deleted in 60 s');
    await sleep(100);
  }
}

for (const sig of ['SIGINT', 'SIGTERM'] as const)
  process.once(sig, () => void teardown().finally(() => process.exit(130)));

try {
  log(`${quick ? 'quick' : 'full'} run: ${JSON.stringify(size)}`);
  await prepare();

  const perSubject: Record<string, PerSubject> = {};
  // BENCH_SUBJECTS (names, comma-separated) runs only those: for quick comparisons, not figures.
  const only = process.env['BENCH_SUBJECTS']?.split(',');
  const all = subjects(bench).filter((s) => !only || only.includes(s.name));
  for (const subject of all) {
    log(`${subject.name}: starting`);
    const started = await subject.start();
    const { procs, idle } = started;
    // Created once the first subject is up, which creates the policy-server Deployments.
    if (subject === all[0]) await createObjects();
    const tHeal = performance.now();
    await bench.heal();
    await recorder.until(() => bench.allHealthy(), 300_000, `${subject.name}: every policy Ready`);
    // Latency is measured on an idle subject: without coalescing, the runs queued by startup
    // and healing outlast the statuses they produce, and a flip would wait behind them.
    const settleS = await settle(idle, tHeal);
    await recorder.quiet(1500);
    log(
      `${subject.name}: every policy Ready, queue idle ${settleS.toFixed(1)} s after healing; single-change latency`,
    );
    const lat = await latency(bench, started);
    log(
      `${subject.name}: p50 ${lat.p50.toFixed(0)} ms; storm (${size.storm} policies × 3 replicas)`,
    );
    const st = await storm(bench, started);
    log(`${subject.name}: storm converged in ${st.convergenceS.toFixed(1)} s`);
    perSubject[subject.name] = { settleS, latency: lat, storm: st };
    results.subjects = perSubject;
    bench.save();
    await bench.stopAll(procs);
  }
  results.subjects = perSubject;

  log('storm data plane alone: the same report and spec writes, no subject running');
  const stormDataPlaneS = await stormDataPlaneAlone(bench);
  results.stormDataPlaneS = stormDataPlaneS;
  log(`storm data plane alone: ${stormDataPlaneS.toFixed(1)} s`);

  const floorFigures = await floor(bench);
  results.floor = floorFigures;
  bench.save();
  log(`floor: ${floorFigures.writes} status writes in ${floorFigures.seconds.toFixed(2)} s`);
  const latencyFloorFigures = await latencyFloor(bench);
  results.latencyFloor = latencyFloorFigures;
  bench.save();
  log(`latency floor: p50 ${latencyFloorFigures.p50.toFixed(0)} ms`);

  log(
    `memory: watcher and worker idle, then ${size.memPods} bare policy-server pods and ${size.memPolicies} policies`,
  );
  const memoryFigures = await memory(bench);
  results.memory = memoryFigures;
  bench.save();
  log(
    `memory: watcher ${memoryFigures.loaded.watcherMiB.toFixed(0)} MiB, worker peak ${memoryFigures.loaded.workerPeakMiB.toFixed(0)} MiB, poller peak ${memoryFigures.pollerPeakMiB.toFixed(0)} MiB`,
  );

  const scale = await scaleOut(bench);
  results.scaleOut = scale;
  bench.save();

  log('fan-out: Redis commands per pod event, 10 policies on the server and many');
  const fanOutRows = await fanOut(bench);
  results.fanOut = fanOutRows;

  printTable({
    quick,
    size,
    machine: results.machine,
    subjects: perSubject,
    floor: floorFigures,
    stormDataPlaneS,
    latencyFloor: latencyFloorFigures,
    memory: memoryFigures,
    scaleOut: scale,
    fanOut: fanOutRows,
  });
  bench.save();
  log(`JSON: ${bench.resultsFile}`);
} finally {
  await teardown();
}

// The admission figure: rollcall's webhook against a native ValidatingAdmissionPolicy, on a
// cluster of its own (its policy servers are real processes), once this one is down.
if (!process.argv.includes('--no-admission')) {
  const flags = ['--quick', '--keep-cluster'].filter((f) => process.argv.includes(f));
  log(`admission: node bench/admission.ts ${flags.join(' ')}`);
  const admission = spawnSync(
    process.execPath,
    [join(repoRoot, 'bench', 'admission.ts'), ...flags],
    {
      stdio: 'inherit',
    },
  );
  if (admission.status !== 0) process.exitCode = admission.status ?? 1;
}

// The attack: a hostile policy beside the admission bench's policy, on a cluster of its own.
if (!process.argv.includes('--no-attack')) {
  const flags = ['--quick', '--keep-cluster'].filter((f) => process.argv.includes(f));
  log(`attack: node bench/attack.ts ${flags.join(' ')}`);
  const attack = spawnSync(process.execPath, [join(repoRoot, 'bench', 'attack.ts'), ...flags], {
    stdio: 'inherit',
  });
  if (attack.status !== 0) process.exitCode = attack.status ?? 1;
}

// The audit: existing pods × [Audit] Policies on real policy servers, on a cluster of its own.
if (!process.argv.includes('--no-audit')) {
  const flags = ['--quick', '--keep-cluster'].filter((f) => process.argv.includes(f));
  log(`audit: node bench/audit.ts ${flags.join(' ')}`);
  const audit = spawnSync(process.execPath, [join(repoRoot, 'bench', 'audit.ts'), ...flags], {
    stdio: 'inherit',
  });
  if (audit.status !== 0) process.exitCode = audit.status ?? 1;
}
