// Phase 2, the storm: a rolling replacement of every pod of server `storm` (each new pod
// reports Loading, then Loaded), then a new generation of every policy that fails on one
// replica; timed until every policy shows the expected end state, with the API traffic. Played
// once more with no subject running, it gives the data plane's own time.
import {
  concurrency,
  group,
  log,
  mergePatch,
  namespace,
  phaseTimeoutMs,
  version,
  isReady,
  type Bench,
} from '../context.ts';
import type { Started } from '../subjects.ts';
import { cpuSeconds, diffCounts, pool, sleep } from '../support.ts';

export interface Storm {
  /** Policies at the expected end state when convergence was reached or timed out. */
  convergedPolicies: number;
  convergenceS: number;
  afterDataPlaneS: number;
  reconcileRuns: number;
  /** CPU time of the subject's processes from the storm's start to its trailing writes. */
  cpuS: number;
  /** CPU time of the redis-server over the same span; NaN for subjects without Redis. */
  redisCpuS: number;
  statusWrites: number;
  /** Mean time of a status write at the proxy: the apiserver's part. */
  apiStatusWriteMs: number;
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

/** When the storm's data plane started and wrote its last report, and what it left. */
export interface StormPlayed {
  t0: number;
  tData: number;
  gen: number;
  failedPod: string;
}

/**
 * The storm's data plane and user, as the bench plays them: the rolling replacement with its
 * reports, the new generation of every policy, then its reports (the failing one last).
 */
export async function playStorm(bench: Bench): Promise<StormPlayed> {
  const { stormNames } = bench;
  const t0 = performance.now();
  const old = new Set(await bench.readyPods('storm', 3));

  // 1. Rolling replacement of every pod; each new pod reports Loading, then Loaded.
  await bench.apps.patchNamespacedDeployment(
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
    const pods = await bench.podsOf('storm');
    for (const pod of pods.filter(isReady)) {
      const name = pod.metadata!.name!;
      if (old.has(name) || reported.has(name)) continue;
      reported.add(name);
      writes.push(
        bench
          .writeReport(name, bench.report(stormNames, bench.generation.storm, 'Loading'))
          .then(() =>
            bench.writeReport(name, bench.report(stormNames, bench.generation.storm, 'Loaded')),
          ),
      );
    }
    if (reported.size >= 3 && pods.every((p) => !old.has(p.metadata!.name!))) break;
    if (Date.now() > end) throw new Error('rollout did not finish in 180 s');
    await sleep(100);
  }
  await Promise.all(writes);

  // 2. A new generation of every policy, which fails on one replica.
  const gen = ++bench.generation.storm;
  await pool(stormNames, concurrency, (name) =>
    bench.custom.patchClusterCustomObject(
      { group, version, plural: 'policies', name, body: { spec: { settings: { bench: gen } } } },
      mergePatch,
    ),
  );
  bench.dataPlaneWrites += stormNames.length;
  const pods = await bench.readyPods('storm', 3);
  const failedPod = pods[2]!;
  for (const pod of pods) await bench.writeReport(pod, bench.report(stormNames, gen, 'Loading'));
  for (const pod of pods)
    await bench.writeReport(
      pod,
      bench.report(
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
  return { t0, tData: performance.now(), gen, failedPod };
}

/**
 * The storm's data plane with no subject running. The failing report comes last and changes
 * every policy's status, so no controller converges sooner than this plus the floor's status
 * writes alone.
 */
export async function stormDataPlaneAlone(bench: Bench): Promise<number> {
  await bench.recorder.quiet(1000);
  const { t0, tData } = await playStorm(bench);
  return (tData - t0) / 1000;
}

export async function storm(bench: Bench, subject: Started): Promise<Storm> {
  const { proxy, recorder, stormNames } = bench;
  const { runs } = subject;
  const cpu = () => cpuSeconds(subject.procs.map((p) => p.child.pid));
  await recorder.quiet(1000);
  const redisCpu = () => (subject.redisPid ? cpuSeconds([subject.redisPid]) : NaN);
  const cpu0 = cpu();
  const redisCpu0 = redisCpu();
  const c0 = proxy.snapshot();
  const r0 = await runs();
  const w0 = bench.dataPlaneWrites;
  const { t0, tData, gen, failedPod } = await playStorm(bench);

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
  await recorder.quiet(2000); // trailing writes count too, and Events still being written
  const idleBy = performance.now() + phaseTimeoutMs;
  while (!(await subject.idle()) && performance.now() < idleBy) await sleep(200);
  const c = diffCounts(c0, proxy.snapshot());
  const changes = recorder.changesSince(t0, (n) => n.startsWith('s'));
  const dataPlaneEvents = bench.dataPlaneWrites - w0;
  return {
    convergedPolicies,
    convergenceS: (tConverged - t0) / 1000,
    afterDataPlaneS: (tConverged - tData) / 1000,
    reconcileRuns: (await runs()) - r0,
    cpuS: cpu() - cpu0,
    redisCpuS: redisCpu() - redisCpu0,
    statusWrites: c.policyStatusWrites,
    apiStatusWriteMs: c.policyStatusWriteMs / c.policyStatusWrites,
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
