// npm run bench [-- --quick] [-- --keep-cluster]: rollcall on the local cluster (real
// apiserver), against its baselines in the same run: rollcall without coalescing, a polling
// reconciler (bench/poller.ts) and the floor (the storm's required status writes in a tight
// loop). The bench plays the data plane itself (writes replica reports) to control timing.
// Figures come from a counting proxy between each subject and the apiserver, a Policy watch,
// /metrics and /proc. Prints a table; JSON goes to bench/out/.
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import {
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Pod,
} from '@kubernetes/client-node';
import { POLICY_SERVER_LABEL, REPORT_ANNOTATION, REPORT_MAX_BYTES } from '../api/constants.ts';
import type { Policy } from '../api/v1alpha1.ts';
import { down, up } from '../cluster/cluster.ts';
import { repoRoot } from '../cluster/paths.ts';
import { startRedis } from '../cluster/redis.ts';
import { KubeWriter } from '../functions/kube-writer.ts';
import { installCrds } from '../roles/install-crds.ts';
import {
  benchDir,
  CountingProxy,
  diffCounts,
  metric,
  percentile,
  PolicyRecorder,
  pool,
  rssSampler,
  sleep,
  startProcess,
  startRollcall,
  waitHttpOk,
  type Proc,
} from './support.ts';

const quick = process.argv.includes('--quick');
const keepCluster = process.argv.includes('--keep-cluster');
const defaults = quick
  ? { flips: 12, latPolicies: 100, storm: 200, memPods: 500, memPolicies: 300 }
  : { flips: 200, latPolicies: 100, storm: 1000, memPods: 10_000, memPolicies: 5000 };
// BENCH_FLIPS, BENCH_STORM, BENCH_MEM_PODS, BENCH_MEM_POLICIES override a mode's sizes.
const sizeFrom = (env: string, fallback: number) =>
  process.env[env] ? Number(process.env[env]) : fallback;
const size = {
  ...defaults,
  flips: sizeFrom('BENCH_FLIPS', defaults.flips),
  storm: sizeFrom('BENCH_STORM', defaults.storm),
  memPods: sizeFrom('BENCH_MEM_PODS', defaults.memPods),
  memPolicies: sizeFrom('BENCH_MEM_POLICIES', defaults.memPolicies),
};
const namespace = 'rollcall-bench';
/** rollcall's default --concurrency; the floor and the poller write with it too. */
const concurrency = 8;
const log = (line: string) =>
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}`);
const group = 'rollcall.dev';
const version = 'v1alpha1';
const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

const cluster = await up(benchDir, log);
const redis = await startRedis({ dir: join(benchDir, 'redis'), log });
const kc = new KubeConfig();
kc.loadFromFile(cluster.kubeconfig);
const custom = kc.makeApiClient(CustomObjectsApi);
const core = kc.makeApiClient(CoreV1Api);
const apps = kc.makeApiClient(AppsV1Api);
const proxy = new CountingProxy();
const recorder = new PolicyRecorder(kc);
const running = new Set<Proc>();
const results: Record<string, unknown> = {
  quick,
  size,
  concurrency,
  machine: {
    cores: cpus().length,
    cpu: cpus()[0]?.model,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
  },
};
const resultsFile = join(
  repoRoot,
  'bench',
  'out',
  `bench-${quick ? 'quick' : 'full'}-${new Date().toISOString().replace(/[:.]/g, '-')}.json`,
);
/** Written after every phase, so a long run that is stopped still leaves its figures. */
function save(): void {
  mkdirSync(join(repoRoot, 'bench', 'out'), { recursive: true });
  // A timed-out figure (Infinity) would become null in JSON.
  const timedOut = (_: string, v: unknown) => (v === Infinity ? 'timed out' : v);
  writeFileSync(resultsFile, JSON.stringify(results, timedOut, 2));
}

let stopping: Promise<void> | undefined;
function teardown(): Promise<void> {
  stopping ??= (async () => {
    recorder.stop();
    await Promise.all([...running].map((p) => p.stop()));
    proxy.close();
    await redis.stop();
    if (!keepCluster) await down(benchDir, () => {});
  })();
  return stopping;
}

// ---------------------------------------------------------------- the data plane, played by the bench

let dataPlaneWrites = 0;
const latNames = Array.from(
  { length: size.latPolicies },
  (_, i) => `lat-${String(i).padStart(3, '0')}`,
);
const stormNames = Array.from({ length: size.storm }, (_, i) => `s${String(i).padStart(4, '0')}`);
const memNames = Array.from(
  { length: size.memPolicies },
  (_, i) => `m${String(i).padStart(4, '0')}`,
);
const generation = { lat: 1, storm: 1 };

/** A replica report; short keys and messages keep 1,000 policies under the 64 KiB limit. */
function report(
  names: readonly string[],
  gen: number,
  state: string,
  override: Record<string, object> = {},
): string {
  const entries = Object.fromEntries(
    names.map((n) => [n, override[n] ?? { generation: gen, state }]),
  );
  const json = JSON.stringify(entries);
  if (Buffer.byteLength(json) > REPORT_MAX_BYTES)
    throw new Error(
      `report of ${names.length} policies is ${Buffer.byteLength(json)} bytes, over 64 KiB`,
    );
  return json;
}

async function writeReport(pod: string, json: string): Promise<void> {
  dataPlaneWrites++;
  await core.patchNamespacedPod(
    { name: pod, namespace, body: { metadata: { annotations: { [REPORT_ANNOTATION]: json } } } },
    mergePatch,
  );
}

const isReady = (pod: V1Pod) =>
  !pod.metadata?.deletionTimestamp &&
  (pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false);

async function podsOf(server: string): Promise<V1Pod[]> {
  const list = await core.listNamespacedPod({
    namespace,
    labelSelector: `${POLICY_SERVER_LABEL}=${server}`,
  });
  return list.items.sort((a, b) => (a.metadata!.name! < b.metadata!.name! ? -1 : 1));
}

async function readyPods(server: string, want: number, timeoutMs = 120_000): Promise<string[]> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const pods = await podsOf(server);
    const ready = pods.filter(isReady).map((p) => p.metadata!.name!);
    if (ready.length === want && pods.length === want) return ready;
    if (Date.now() > end)
      throw new Error(`server ${server}: ${ready.length}/${want} ready pods after ${timeoutMs} ms`);
    await sleep(100);
  }
}

/** Every replica of both servers reports every policy Loaded at the current generation. */
async function heal(): Promise<void> {
  for (const [server, names, gen] of [
    ['lat', latNames, generation.lat],
    ['storm', stormNames, generation.storm],
  ] as const) {
    for (const pod of await readyPods(server, 3))
      await writeReport(pod, report(names, gen, 'Loaded'));
  }
}

const policyOk = (p: Policy | undefined, gen: number) =>
  p?.status?.observedGeneration === gen &&
  p.status.summary === 'Ready' &&
  p.status.readyReplicas === 3;
const allHealthy = () =>
  latNames.every((n) => policyOk(recorder.latest.get(n), generation.lat)) &&
  stormNames.every((n) => policyOk(recorder.latest.get(n), generation.storm));

const policyBody = (name: string, server: string) => ({
  apiVersion: `${group}/${version}`,
  kind: 'Policy',
  metadata: { name },
  spec: {
    policyServer: server,
    module: 'sim://ok',
    rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
  },
});

// ---------------------------------------------------------------- subjects

/** No job waiting, delayed or running, per the process's /metrics (a real queue read). */
const queueIdle = async (port: number) => {
  let n = 0;
  for (const state of ['waiting', 'active', 'delayed', 'prioritized'])
    n += await metric(port, 'rollcall_queue_depth', { state });
  return n === 0;
};

interface Started {
  procs: Proc[];
  runs: () => Promise<number>;
  /** Nothing queued or running (from /metrics); the poller is always idle. */
  idle: () => Promise<boolean>;
}
interface Subject {
  name: string;
  start(): Promise<Started>;
}

/** A rollcall process through the counting proxy, stopped at teardown if still running. */
async function startRole(
  name: string,
  role: 'run' | 'watcher' | 'worker',
  redisUrl: string,
  extra: string[] = [],
): Promise<Proc> {
  const p = await startRollcall(name, role, {
    namespace,
    redisUrl,
    kubeconfig: proxy.kubeconfig,
    extra,
  });
  running.add(p);
  return p;
}

/** Workers `<prefix>0…` on one Redis database. */
async function startWorkers(
  prefix: string,
  count: number,
  redisUrl: string,
  extra: string[] = [],
): Promise<Proc[]> {
  const workers: Proc[] = [];
  for (let i = 0; i < count; i++)
    workers.push(await startRole(`${prefix}${i}`, 'worker', redisUrl, extra));
  return workers;
}

let db = 0;
const rollcallSubject = (name: string, extra: string[]): Subject => ({
  name,
  async start() {
    const p = await startRole(name, 'run', `${redis.url}/${++db}`, ['--install-crds', ...extra]);
    await waitHttpOk(p.port, '/readyz');
    return {
      procs: [p],
      runs: () => metric(p.port, 'rollcall_queue_runs_total', { function: 'policy' }),
      idle: () => queueIdle(p.port),
    };
  },
});
// The poller reports nothing about itself: its runs are its list passes (6 reads each, seen
// by the proxy) times the policies each pass recomputes.
const pollerSubject: Subject = {
  name: 'polling',
  async start() {
    const p = await startProcess('poller', 'bench/poller.ts', [namespace], {
      KUBECONFIG: proxy.kubeconfig,
    });
    running.add(p);
    return {
      procs: [p],
      runs: async () => (proxy.snapshot().reads / 6) * recorder.latest.size,
      idle: async () => true,
    };
  },
};
const subjects = [
  rollcallSubject('rollcall', []),
  rollcallSubject('no-coalesce', ['--no-coalesce']),
  pollerSubject,
];

/** A flip not seen in this long counts as timed out; after `maxTimeouts` the subject is saturated. */
const flipTimeoutMs = 60_000;
const maxTimeouts = 3;

interface Latency {
  /** Flips written and flips whose result was never seen within flipTimeoutMs. */
  flips: number;
  timeouts: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  runsPerFlip: number;
  statusWritesPerFlip: number;
  readsPerFlip: number;
}

async function latency(runs: () => Promise<number>): Promise<Latency> {
  const [pod] = await readyPods('lat', 3);
  const target = latNames[0]!;
  const c0 = proxy.snapshot();
  const r0 = await runs();
  const samples: number[] = [];
  let flips = 0;
  let timeouts = 0;
  for (let i = 0; i < size.flips; i++) {
    const failing = i % 2 === 0;
    const message = `flip ${i}`;
    const json = report(
      latNames,
      generation.lat,
      'Loaded',
      failing ? { [target]: { generation: generation.lat, state: 'Failed', message } } : {},
    );
    let seenAt = 0;
    const shown = () => {
      const s = recorder.latest.get(target)?.status;
      const ok = failing
        ? (s?.failures?.some((f) => f.message === message) ?? false)
        : s?.summary === 'Ready' && s.failedReplicas === 0;
      if (ok && seenAt === 0) seenAt = performance.now();
      return ok;
    };
    const t0 = performance.now();
    await writeReport(pod!, json);
    flips++;
    try {
      await recorder.until(shown, flipTimeoutMs, `flip ${i} of ${target}`);
      samples.push(seenAt - t0);
    } catch (err) {
      log(`${(err as Error).message}; counted as > ${flipTimeoutMs / 1000} s`);
      samples.push(Infinity);
      if (++timeouts === maxTimeouts) break;
    }
  }
  const c = diffCounts(c0, proxy.snapshot());
  const runsDone = (await runs()) - r0;
  samples.sort((a, b) => a - b);
  return {
    flips,
    timeouts,
    p50: percentile(samples, 50),
    p90: percentile(samples, 90),
    p99: percentile(samples, 99),
    max: samples.at(-1)!,
    runsPerFlip: runsDone / flips,
    statusWritesPerFlip: c.policyStatusWrites / flips,
    readsPerFlip: c.reads / flips,
  };
}

const phaseTimeoutMs = 600_000;

interface Storm {
  /** Policies at the expected end state when convergence was reached or timed out. */
  convergedPolicies: number;
  convergenceS: number;
  afterDataPlaneS: number;
  reconcileRuns: number;
  statusWrites: number;
  realStatusChanges: number;
  noopWrites: number;
  apiReads: number;
  watchStarts: number;
  events: number;
  dataPlaneEvents: number;
  writesPerRealChange: number;
  readsPerEvent: number;
  failedPod: string;
}

async function storm(runs: () => Promise<number>): Promise<Storm> {
  await recorder.quiet(1000);
  const c0 = proxy.snapshot();
  const r0 = await runs();
  const w0 = dataPlaneWrites;
  const t0 = performance.now();
  const old = new Set(await readyPods('storm', 3));

  // 1. Rolling replacement of every pod; each new pod reports Loading, then Loaded.
  await apps.patchNamespacedDeployment(
    {
      name: 'policy-server-storm',
      namespace,
      body: {
        spec: {
          template: {
            metadata: { annotations: { 'bench.rollcall.dev/rollout': String(Date.now()) } },
          },
        },
      },
    },
    mergePatch,
  );
  const reported = new Set<string>();
  const writes: Promise<void>[] = [];
  const end = Date.now() + 180_000;
  for (;;) {
    const pods = await podsOf('storm');
    for (const pod of pods.filter(isReady)) {
      const name = pod.metadata!.name!;
      if (old.has(name) || reported.has(name)) continue;
      reported.add(name);
      writes.push(
        writeReport(name, report(stormNames, generation.storm, 'Loading')).then(() =>
          writeReport(name, report(stormNames, generation.storm, 'Loaded')),
        ),
      );
    }
    if (reported.size >= 3 && pods.every((p) => !old.has(p.metadata!.name!))) break;
    if (Date.now() > end) throw new Error('rollout did not finish in 180 s');
    await sleep(100);
  }
  await Promise.all(writes);

  // 2. A new generation of every policy, which fails on one replica.
  const gen = ++generation.storm;
  await pool(stormNames, concurrency, (name) =>
    custom.patchClusterCustomObject(
      { group, version, plural: 'policies', name, body: { spec: { settings: { bench: gen } } } },
      mergePatch,
    ),
  );
  dataPlaneWrites += stormNames.length;
  const pods = await readyPods('storm', 3);
  const failedPod = pods[2]!;
  for (const pod of pods) await writeReport(pod, report(stormNames, gen, 'Loading'));
  for (const pod of pods)
    await writeReport(
      pod,
      report(
        stormNames,
        gen,
        pod === failedPod ? 'Failed' : 'Loaded',
        pod === failedPod
          ? Object.fromEntries(
              stormNames.map((n) => [n, { generation: gen, state: 'Failed', message: 'x' }]),
            )
          : {},
      ),
    );
  const tData = performance.now();

  let tConverged = 0;
  const atEnd = (n: string) => {
    const s = recorder.latest.get(n)?.status;
    return (
      s?.observedGeneration === gen &&
      s.summary === 'Stalled' &&
      s.readyReplicas === 2 &&
      s.failures?.[0]?.pod === failedPod
    );
  };
  const converged = () => {
    const ok = stormNames.every(atEnd);
    if (ok && tConverged === 0) tConverged = performance.now();
    return ok;
  };
  try {
    await recorder.until(converged, phaseTimeoutMs, 'storm convergence');
  } catch (err) {
    tConverged = Infinity; // reported as "> phaseTimeoutMs", with how many policies got there
    log(`${(err as Error).message}; counted as > ${phaseTimeoutMs / 1000} s`);
  }
  const convergedPolicies = stormNames.filter(atEnd).length;
  await recorder.quiet(2000); // trailing writes count too
  const c = diffCounts(c0, proxy.snapshot());
  const changes = recorder.changesSince(t0, (n) => n.startsWith('s'));
  const dataPlaneEvents = dataPlaneWrites - w0;
  return {
    convergedPolicies,
    convergenceS: (tConverged - t0) / 1000,
    afterDataPlaneS: (tConverged - tData) / 1000,
    reconcileRuns: (await runs()) - r0,
    statusWrites: c.policyStatusWrites,
    realStatusChanges: changes,
    noopWrites: c.policyStatusWrites - changes,
    apiReads: c.reads,
    watchStarts: c.watches,
    events: c.events,
    dataPlaneEvents,
    writesPerRealChange: c.policyStatusWrites / changes,
    readsPerEvent: c.reads / dataPlaneEvents,
    failedPod,
  };
}

interface PerSubject {
  /** Seconds from the healing report writes until the subject's queue was empty. */
  settleS: number;
  latency: Latency;
  storm: Storm;
}

async function settle(idle: () => Promise<boolean>, since: number): Promise<number> {
  const end = performance.now() + phaseTimeoutMs;
  while (!(await idle())) {
    if (performance.now() > end) {
      log(
        `queue not idle ${phaseTimeoutMs / 1000} s after healing; measuring latency behind the backlog`,
      );
      return Infinity;
    }
    await sleep(250);
  }
  return (performance.now() - since) / 1000;
}

// ---------------------------------------------------------------- run

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
    [...latNames.map((n) => [n, 'lat']), ...stormNames.map((n) => [n, 'storm'])],
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
    `created ${latNames.length + stormNames.length} policies on servers lat and storm (3 replicas each)`,
  );
}

for (const sig of ['SIGINT', 'SIGTERM'] as const)
  process.once(sig, () => void teardown().finally(() => process.exit(130)));

try {
  log(`${quick ? 'quick' : 'full'} run: ${JSON.stringify(size)}`);
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

  const perSubject: Record<string, PerSubject> = {};
  for (const subject of subjects) {
    log(`${subject.name}: starting`);
    const { procs, runs, idle } = await subject.start();
    // Created once the first subject is up, which creates the policy-server Deployments.
    if (subject === subjects[0]) await createObjects();
    const tHeal = performance.now();
    await heal();
    await recorder.until(allHealthy, 300_000, `${subject.name}: every policy Ready`);
    // Latency is measured on an idle subject: without coalescing, the runs queued by startup
    // and healing outlast the statuses they produce, and a flip would wait behind them.
    const settleS = await settle(idle, tHeal);
    await recorder.quiet(1500);
    log(
      `${subject.name}: every policy Ready, queue idle ${settleS.toFixed(1)} s after healing; single-change latency (${size.flips} flips)`,
    );
    const lat = await latency(runs);
    log(
      `${subject.name}: p50 ${lat.p50.toFixed(0)} ms; storm (${size.storm} policies × 3 replicas)`,
    );
    const st = await storm(runs);
    log(`${subject.name}: storm converged in ${st.convergenceS.toFixed(1)} s`);
    perSubject[subject.name] = { settleS, latency: lat, storm: st };
    results.subjects = perSubject;
    save();
    for (const p of procs) {
      await p.stop();
      running.delete(p);
    }
  }
  results.subjects = perSubject;

  // The floor: the storm's required status writes (one per policy: its final status) in a
  // tight loop with rollcall's client and concurrency, through the same proxy, no rate limit.
  const floorKc = new KubeConfig();
  floorKc.loadFromFile(proxy.kubeconfig);
  const writer = new KubeWriter(floorKc, async () => {});
  const tf = performance.now();
  await pool(stormNames, concurrency, (n) => {
    const status = structuredClone(recorder.latest.get(n)!.status!);
    for (const c of status.conditions ?? []) c.message = `${c.message} (floor)`; // a real change, same size
    return writer.patchStatus('policies', n, status, undefined);
  });
  const floorS = (performance.now() - tf) / 1000;
  results.floor = { writes: stormNames.length, seconds: floorS };
  save();
  log(`floor: ${stormNames.length} status writes in ${floorS.toFixed(2)} s`);

  // ------------------------------------------------------------ memory and scale-out
  let mdb = 10;
  const startPair = async (workers: number, extra: string[] = []) => {
    const redisUrl = `${redis.url}/${++mdb}`;
    const watcher = await startRole('watcher', 'watcher', redisUrl);
    return { watcher, workers: await startWorkers('worker-', workers, redisUrl, extra) };
  };
  const stopAll = async (procs: Proc[]) => {
    for (const p of procs) {
      await p.stop();
      running.delete(p);
    }
  };
  const drained = (watcher: Proc) => queueIdle(watcher.port);

  log(
    `memory: watcher and worker idle, then ${size.memPods} bare policy-server pods and ${size.memPolicies} policies`,
  );
  const writeFlags = ['--write-rate', '500', '--write-burst', '500'];
  const pair = await startPair(1, writeFlags);
  await waitHttpOk(pair.watcher.port, '/readyz');
  await waitHttpOk(pair.workers[0]!.port, '/readyz');
  while (!(await drained(pair.watcher))) await sleep(200);
  await sleep(1000);
  const idle = {
    watcherMiB: rssSampler(() => [pair.watcher.child.pid]).stop(),
    workerMiB: rssSampler(() => [pair.workers[0]!.child.pid]).stop(),
  };
  const watcherPeak = rssSampler(() => [pair.watcher.child.pid]);
  const workerPeak = rssSampler(() => [pair.workers[0]!.child.pid]);
  const memReport = report(['lat-000', 'lat-001', 'lat-002'], 1, 'Loaded');
  await pool(
    Array.from({ length: size.memPods }, (_, i) => `mem-pod-${String(i).padStart(5, '0')}`),
    16,
    (name) =>
      core.createNamespacedPod({
        namespace,
        body: {
          metadata: {
            name,
            labels: { [POLICY_SERVER_LABEL]: 'mem-pods' },
            annotations: { [REPORT_ANNOTATION]: memReport },
          },
          // Gated: never scheduled, so kwok and the scheduler stay out of the measurement.
          spec: {
            schedulingGates: [{ name: 'bench.rollcall.dev/gated' }],
            containers: [{ name: 'c', image: 'sim://none' }],
          },
        },
      }),
  );
  await pool(memNames, 16, (n) =>
    custom.createClusterCustomObject({
      group,
      version,
      plural: 'policies',
      body: policyBody(n, 'mem'),
    }),
  );
  await recorder.until(
    () => memNames.every((n) => recorder.latest.get(n)?.status?.summary === 'Stalled'),
    600_000,
    'memory policies reconciled',
  );
  while (!(await drained(pair.watcher))) await sleep(200);
  await sleep(2000);
  const loaded = {
    watcherMiB: rssSampler(() => [pair.watcher.child.pid]).stop(),
    watcherPeakMiB: watcherPeak.stop(),
    workerMiB: rssSampler(() => [pair.workers[0]!.child.pid]).stop(),
    workerPeakMiB: workerPeak.stop(),
  };
  await stopAll([pair.watcher, ...pair.workers]);

  // Baseline: the poller holds every object of a pass in memory.
  const poller = await startProcess('poller-mem', 'bench/poller.ts', [namespace], {
    KUBECONFIG: proxy.kubeconfig,
  });
  running.add(poller);
  const pollerPeak = rssSampler(() => [poller.child.pid]);
  await sleep(quick ? 4000 : 10_000);
  const pollerMiB = pollerPeak.stop();
  await stopAll([poller]);
  results.memory = {
    pods: size.memPods,
    policies: size.memPolicies + latNames.length + stormNames.length,
    idle,
    loaded,
    pollerPeakMiB: pollerMiB,
  };
  save();
  log(
    `memory: watcher ${loaded.watcherMiB.toFixed(0)} MiB, worker peak ${loaded.workerPeakMiB.toFixed(0)} MiB, poller peak ${pollerMiB.toFixed(0)} MiB`,
  );

  // Scale-out: a fresh Redis database makes the watcher enqueue every key; then k workers
  // drain it. Runs are no-ops (statuses are current): this is reconcile throughput.
  const scale: { workers: number; runs: number; seconds: number; runsPerSecond: number }[] = [];
  for (const k of [1, 2, 4]) {
    const redisUrl = `${redis.url}/${++mdb}`;
    const watcher = await startRole('watcher-scale', 'watcher', redisUrl);
    await waitHttpOk(watcher.port, '/readyz', 300_000);
    const queued = await metric(watcher.port, 'rollcall_queue_depth', { state: 'waiting' });
    const ws = await startWorkers('worker-scale-', k, redisUrl);
    const runsOf = async () =>
      (
        await Promise.all(ws.map((w) => metric(w.port, 'rollcall_queue_runs_total').catch(() => 0)))
      ).reduce((a, b) => a + b, 0);
    let tFirst = 0;
    for (;;) {
      const r = await runsOf();
      if (r > 0 && tFirst === 0) tFirst = performance.now();
      if (tFirst > 0 && (await drained(watcher))) break;
      await sleep(50);
    }
    const seconds = (performance.now() - tFirst) / 1000;
    const runs = await runsOf();
    scale.push({ workers: k, runs, seconds, runsPerSecond: runs / seconds });
    log(`scale-out: ${k} workers ran ${runs} (of ${queued} queued) in ${seconds.toFixed(2)} s`);
    await stopAll([watcher, ...ws]);
  }
  results.scaleOut = scale;

  printTable(results, perSubject, floorS, scale);
  save();
  log(`JSON: ${resultsFile}`);
} finally {
  await teardown();
}

function printTable(
  all: Record<string, unknown>,
  s: Record<string, PerSubject>,
  floorS: number,
  scale: { workers: number; runs: number; seconds: number; runsPerSecond: number }[],
): void {
  const names = Object.keys(s);
  const fmt = (v: number, d = 0) => (Number.isFinite(v) ? v.toFixed(d) : '—');
  const rows: [string, ...string[]][] = [['figure', ...names]];
  const row = (label: string, f: (x: PerSubject) => string) =>
    rows.push([label, ...names.map((n) => f(s[n]!))]);
  // A flip or storm that timed out is a figure too: "> limit".
  const ms = (v: number) => (v === Infinity ? `> ${flipTimeoutMs}` : fmt(v));
  const sec = (v: number) => (v === Infinity ? `> ${phaseTimeoutMs / 1000}` : fmt(v, 1));
  row('0 queue idle after healing s', (x) => sec(x.settleS));
  row(`1 latency p50 ms (${size.flips} flips)`, (x) => ms(x.latency.p50));
  row('1 latency p90 ms', (x) => ms(x.latency.p90));
  row('1 latency p99 ms', (x) => ms(x.latency.p99));
  row('1 latency max ms', (x) => ms(x.latency.max));
  row(`1 flips not seen in ${flipTimeoutMs / 1000} s`, (x) =>
    x.latency.timeouts === 0 ? '0' : `${x.latency.timeouts} of ${x.latency.flips}`,
  );
  row('1 reconcile runs per flip', (x) => fmt(x.latency.runsPerFlip, 1));
  row('1 status writes per flip', (x) => fmt(x.latency.statusWritesPerFlip, 2));
  row('1 API reads per flip', (x) => fmt(x.latency.readsPerFlip, 1));
  row(`2 storm convergence s (${size.storm}×3)`, (x) => sec(x.storm.convergenceS));
  row('2 … after the last report s', (x) => sec(x.storm.afterDataPlaneS));
  row('2 policies at the end state', (x) => `${x.storm.convergedPolicies}/${size.storm}`);
  row('3 convergence / floor', (x) =>
    x.storm.convergenceS === Infinity ? '—' : fmt(x.storm.convergenceS / floorS, 1) + '×',
  );
  row('2 reconcile runs', (x) => fmt(x.storm.reconcileRuns));
  row('2 status writes', (x) => fmt(x.storm.statusWrites));
  row('2 real status changes (watch)', (x) => fmt(x.storm.realStatusChanges));
  row('5 no-op status writes', (x) => fmt(x.storm.noopWrites));
  row('5 status writes / real change', (x) => fmt(x.storm.writesPerRealChange, 2));
  row('2 API reads (get/list)', (x) => fmt(x.storm.apiReads));
  row('2 watch starts', (x) => fmt(x.storm.watchStarts));
  row('5 API reads per event', (x) => fmt(x.storm.readsPerEvent, 2));
  row('2 Events written', (x) => fmt(x.storm.events));
  row('2 data-plane events', (x) => fmt(x.storm.dataPlaneEvents));
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  console.log(`\nrollcall bench (${quick ? 'quick' : 'full'}), ${JSON.stringify(all.machine)}`);
  for (const r of rows) console.log(line(r));
  console.log(
    `3 floor: ${size.storm} status writes, tight loop, concurrency ${concurrency}: ${floorS.toFixed(2)} s`,
  );
  const m = all.memory as {
    pods: number;
    policies: number;
    idle: { watcherMiB: number; workerMiB: number };
    loaded: {
      watcherMiB: number;
      watcherPeakMiB: number;
      workerMiB: number;
      workerPeakMiB: number;
    };
    pollerPeakMiB: number;
  };
  console.log(
    `6 memory (${m.pods} pods, ${m.policies} policies), RSS MiB: watcher ${fmt(m.loaded.watcherMiB)} (peak ${fmt(m.loaded.watcherPeakMiB)}, idle ${fmt(m.idle.watcherMiB)}); worker ${fmt(m.loaded.workerMiB)} (peak ${fmt(m.loaded.workerPeakMiB)}, idle ${fmt(m.idle.workerMiB)}); baseline poller peak ${fmt(m.pollerPeakMiB)}`,
  );
  console.log(
    `7 worker scale-out (${cpus().length} cores): ${scale.map((x) => `${x.workers} → ${fmt(x.runsPerSecond)} runs/s`).join(', ')}`,
  );
}
