// npm run bench:audit [-- --quick] [-- --keep-cluster] [-- --pods=N] [-- --namespaces=N]
// [-- --policies=N] [-- --replicas=N] [-- --workers=N] [-- --changes=N]: rollcall's continuous
// audit at scale, on a local cluster of its own. Pods exist first (kwok runs them), spread over
// namespaces; then twenty [Audit] Policies of common Pod checks (bench/audit-workload.ts) are
// created on one PolicyServer of real `rollcall policy-server` processes (the node agent runs
// them), and rollcall (a watcher and workers, separate processes as deployed) audits what
// exists. Measured from outside: the initial pass (Policies created → every Policy's
// status.audit complete at its generation, cross-checked against the Reports), evaluations/s,
// the apiserver's count of writes, memory (peak RSS) of the watcher, workers, replicas and
// Redis, the Reports' bytes, and, one change at a time, a Pod's label flipped to its result in
// its namespace's Report `rollcall-<policy>` (a Report watch). Prints a table beside the goals;
// JSON in bench/out/.
import { join } from 'node:path';
import { loadavg } from 'node:os';
import { KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { isPodReady } from '../api/kube.ts';
import type { Policy } from '../api/v1alpha1.ts';
import { installCrds } from '../control-plane/install-crds.ts';
import { fakeNodeName, kubectl } from '../tooling/cluster/cluster.ts';
import { repoRoot } from '../tooling/cluster/paths.ts';
import { startRedis, type RunningRedis } from '../tooling/cluster/redis.ts';
import { BenchCluster, benchArgs, rollcallNamespace } from './admission-cluster.ts';
import { cpuSnapshot, sum } from './admission-metrics.ts';
import {
  delta,
  printReport,
  type Change,
  type ChangePhase,
  type Memory,
  type Pass,
  type Scrapes,
} from './audit-figures.ts';
import { ReportRecorder, reportCensus, reportSelector } from './audit-reports.ts';
import {
  BENCH_NAMESPACE_LABEL,
  BENCH_POD_LABEL,
  CHECKS,
  FLIP_POLICY,
  TEAM_LABEL,
  auditPolicy,
  benchPod,
  namespaceName,
  namespaceOf,
  podName,
  violations,
} from './audit-workload.ts';
import {
  httpGet,
  PolicyRecorder,
  pool,
  rssSampler,
  sleep,
  startRollcall,
  waitHttpOk,
  type Proc,
} from './support.ts';

const usage = `usage: npm run bench:audit [-- --quick] [-- --keep-cluster] [-- --pods=N] [-- --namespaces=N]
    [-- --policies=N] [-- --replicas=N] [-- --workers=N] [-- --changes=N]
  --quick          1,000 pods in 10 namespaces, 20 changes (about a minute; full: about 5)
  --keep-cluster   leave the bench's cluster (.rollcall/bench-audit) running afterwards
  --pods=N         existing pods (10000), dealt round the namespaces
  --namespaces=N   namespaces (50); at most 1,000 pods each (a Report lists 1,000 results)
  --policies=N     [Audit] Policies, the first N of bench/audit-workload.ts (${CHECKS.length})
  --replicas=N     policy-server replicas (2)
  --workers=N      rollcall worker processes beside the watcher (1)
  --changes=N      pod changes timed one at a time, half flips and half flips back (100)
rollcall's continuous audit of pods that exist before the Policies, on a local cluster of its own
with real policy-server processes: the initial pass, evaluations/s, API writes, memory, the
Reports' bytes, and one change's time to its result in the Report. Prints a table; JSON in
bench/out/.`;
const { flag, quick, keepCluster } = benchArgs(usage);
const pods = Number(flag('pods') ?? (quick ? 1000 : 10_000));
const namespaces = Number(flag('namespaces') ?? (quick ? 10 : 50));
const policyCount = Math.min(CHECKS.length, Number(flag('policies') ?? CHECKS.length));
const replicas = Number(flag('replicas') ?? 2);
const workerCount = Number(flag('workers') ?? 1);
const changes = Number(flag('changes') ?? (quick ? 20 : 100));
if (Math.ceil(pods / namespaces) > 1000)
  throw new Error('at most 1,000 pods a namespace: a Report lists at most 1,000 results');

/** Goals (issue 38) and the memory goals of the main bench (issue 16). */
const goals = { passS: 60, changeP99Ms: 1000, watcherMiB: 150, workerMiB: 200 };
const passTimeoutMs = quick ? 300_000 : 600_000;
const changeTimeoutMs = 30_000;
const serverName = 'audit';
const policyNames = CHECKS.slice(0, policyCount).map((c) => c.name);
const followed = `rollcall-${FLIP_POLICY}`;
const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const log = (line: string) =>
  console.error(`[audit ${new Date().toISOString().slice(11, 19)}] ${line}`);

const load0 = loadavg();
const bench = await BenchCluster.up('audit', log, keepCluster);
const kc = new KubeConfig();
kc.loadFromFile(bench.state.kubeconfig);
const policies = new PolicyRecorder(kc);
const reports = new ReportRecorder(kc, followed);
let redis: RunningRedis | undefined;
let watcher: Proc | undefined;
const workers: Proc[] = [];
process.once('SIGINT', () => void redis?.stop());

// ---------------------------------------------------------------- set-up

/** The policy servers' account, the CRDs, Redis, and rollcall's watcher and workers, Ready. */
async function startRollcallSide(): Promise<void> {
  await bench.ensureNamespace(rollcallNamespace);
  const identities = ['rbac.yaml', 'guard-identities.yaml'].map((f) => join(repoRoot, 'deploy', f));
  kubectl(bench.state, ['apply', ...identities.flatMap((f) => ['-f', f])]);
  await installCrds(kc, { info: () => {} });
  // A CRD just installed answers 429 ("storage is (re)initializing") for a moment.
  for (let i = 0; ; i++) {
    const served = await bench.custom
      .listClusterCustomObject({ group: 'openreports.io', version: 'v1alpha1', plural: 'reports' })
      .then(
        () => true,
        (err: unknown) => {
          if (i < 60) return false;
          throw new Error(`the OpenReports CRD is not served (deploy/crds): ${String(err)}`);
        },
      );
    if (served) break;
    await sleep(500);
  }
  redis = await startRedis({ dir: join(bench.dir, 'redis'), log });
  const opts = {
    namespace: rollcallNamespace,
    redisUrl: `${redis.url}/0`,
    kubeconfig: bench.state.kubeconfig,
  };
  const started = await startRollcall('audit-watcher', 'watcher', opts);
  watcher = started;
  bench.running.push(started);
  for (let i = 0; i < workerCount; i++) {
    const w = await startRollcall(`audit-worker-${i}`, 'worker', opts);
    bench.running.push(w);
    workers.push(w);
  }
  for (const p of [started, ...workers]) await waitHttpOk(p.port, '/readyz', 120_000);
}

/** Deletes the Policies (and so their Reports) an earlier run on a kept cluster left. */
async function clearPolicies(): Promise<void> {
  const policyApi = { group: 'rollcall.dev', version: 'v1alpha1', plural: 'policies' };
  await bench.custom.deleteCollectionClusterCustomObject(policyApi);
  for (let i = 0; ; i++) {
    const left = (await bench.custom.listClusterCustomObject(policyApi)) as { items: unknown[] };
    const leftReports = (await bench.custom.listClusterCustomObject({
      group: 'openreports.io',
      version: 'v1alpha1',
      plural: 'reports',
      labelSelector: reportSelector,
      limit: 1,
    })) as { items: unknown[] };
    if (left.items.length === 0 && leftReports.items.length === 0) return;
    if (i > 240) throw new Error('Policies or Reports of an earlier run still there after 2 min');
    await sleep(500);
  }
}

/** The namespaces and pods, created and Running on kwok's node before any Policy exists. */
async function createPods(): Promise<number> {
  const t0 = performance.now();
  for (let n = 0; n < namespaces; n++)
    await bench.created(
      bench.core.createNamespace({
        body: {
          metadata: { name: namespaceName(n), labels: { [BENCH_NAMESPACE_LABEL]: 'true' } },
        },
      }),
    );
  let done = 0;
  await pool(
    Array.from({ length: pods }, (_, i) => i),
    16,
    async (i) => {
      const body = benchPod(i, fakeNodeName);
      await bench.created(
        bench.core.createNamespacedPod({ namespace: namespaceOf(i, namespaces), body }),
      );
      if (++done % 2000 === 0) log(`${done} pods created`);
    },
  );
  // kwok makes them Running; wait until none is left Pending (pages of what is not Running).
  for (let i = 0; ; i++) {
    const pending = await bench.core.listPodForAllNamespaces({
      labelSelector: `${BENCH_POD_LABEL}=true`,
      fieldSelector: 'status.phase!=Running',
      limit: 1,
    });
    if (pending.items.length === 0) break;
    if (i > 600) throw new Error('bench pods still not Running after 10 min');
    await sleep(1000);
  }
  const sample = await bench.core.listNamespacedPod({
    namespace: namespaceName(0),
    labelSelector: `${BENCH_POD_LABEL}=true`,
  });
  if (!sample.items.every(isPodReady)) log('warning: some Running bench pods are not Ready');
  return (performance.now() - t0) / 1000;
}

async function startPolicyServer(): Promise<void> {
  await bench.createPolicyServer(serverName, { replicas });
  await bench.patchPolicyServer(serverName, { replicas });
  for (let i = 0; ; i++) {
    const list = bench.policyServers();
    if (list.length === replicas && list.every((p) => p.ready)) return;
    if (i > 360) throw new Error(`${replicas} policy-server replicas not Ready after 3 min`);
    await sleep(500);
  }
}

/**
 * Jobs waiting or running, and Events left to write, from the watcher's and workers' /metrics
 * (the queue's depth from the watcher; Events from every process). Delayed jobs are left out:
 * with real policy servers some are always there (a certificate's renewal, a retry later).
 */
async function busy(): Promise<number> {
  const texts = await Promise.all(
    [watcher!, ...workers].map((p) => httpGet(p.port, '/metrics').then((r) => r.body)),
  );
  let n = texts.reduce((t, text) => t + sum(text, 'rollcall_events_pending'), 0);
  for (const state of ['waiting', 'active', 'prioritized'])
    n += sum(texts[0]!, 'rollcall_queue_depth', { state });
  return n;
}

/** Until rollcall has nothing to do now (at most `timeoutMs`), then `settleMs` more. */
async function quiet(timeoutMs: number, settleMs = 1000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end && (await busy().catch(() => 1)) > 0) await sleep(100);
  await sleep(settleMs);
}

// ---------------------------------------------------------------- observation

const processes = () => ({
  watcher: [watcher?.child.pid],
  workers: workers.map((w) => w.child.pid),
  'policy servers': bench.policyServers().map((p) => p.pid),
  redis: [redis?.pid],
  apiserver: [bench.state.pids['kube-apiserver']],
  etcd: [bench.state.pids.etcd],
  // The bench itself (its Policy and Report watches parse every Report written): on 2 cores
  // its share is part of the picture.
  bench: [process.pid],
});

async function scrapeAll(): Promise<Scrapes> {
  const [api, servers, workerTexts] = await Promise.all([
    bench.apiserverMetrics(),
    bench.serverScrapes(),
    Promise.all(
      workers.map((w) =>
        httpGet(w.port, '/metrics').then(
          (r) => r.body,
          () => '',
        ),
      ),
    ),
  ]);
  return {
    api,
    servers: [...servers.values()],
    workers: workerTexts,
    cpu: cpuSnapshot(processes()),
  };
}

/** Peak RSS of the watcher, of the largest worker, of the largest replica and of Redis. */
function memoryWatch(): { stop(): Memory } {
  const one = (pid: number | undefined) => rssSampler(() => [pid]);
  const w = one(watcher?.child.pid);
  const ws = workers.map((p) => one(p.child.pid));
  const servers = bench.policyServers().map((p) => one(p.pid));
  const r = one(redis?.pid);
  return {
    stop: () => ({
      watcherMiB: w.stop(),
      workerMiB: Math.max(0, ...ws.map((s) => s.stop())),
      policyServerMiB: Math.max(0, ...servers.map((s) => s.stop())),
      redisMiB: r.stop(),
    }),
  };
}

// ---------------------------------------------------------------- the initial pass

const audited = (p: Policy | undefined) =>
  p?.status?.audit?.completedAt !== undefined &&
  p.status.audit.generation === p.metadata.generation;

/** Seconds from `t0` until `check` holds over the Policies (Infinity: not within the timeout). */
const policiesUntil = (t0: number, check: (p: Policy | undefined) => boolean, what: string) =>
  policies
    .until(() => policyNames.every((n) => check(policies.latest.get(n))), passTimeoutMs, what)
    .then(
      () => (performance.now() - t0) / 1000,
      () => Infinity,
    );

async function initialPass(expectedResults: number): Promise<Pass> {
  const before = await scrapeAll();
  const memory = memoryWatch();
  const t0 = performance.now();
  const waits = Promise.all([
    policiesUntil(
      t0,
      (p) => p?.status?.summary === 'Ready' && p.status.readyReplicas === replicas,
      'Policies Ready',
    ),
    policiesUntil(
      t0,
      (p) => p !== undefined && p.status?.servedGeneration === p.metadata.generation,
      'Policies served',
    ),
    policiesUntil(t0, audited, 'every Policy audited'),
    reports
      .until(() => reports.total() >= expectedResults, passTimeoutMs)
      .then((t) => (t - t0) / 1000),
  ]);
  await pool(policyNames, 20, (name) =>
    bench.createPolicy(
      auditPolicy(
        CHECKS.find((c) => c.name === name)!,
        serverName,
      ),
    ),
  );
  const createdS = (performance.now() - t0) / 1000;
  const [readyS, servedS, auditedS, reportsS] = await waits;
  const after = await scrapeAll();
  const statuses = policyNames.map((n) => policies.latest.get(n)?.status?.audit);
  return {
    createdS,
    readyS,
    servedS,
    auditedS,
    reportsS,
    checked: statuses.reduce((n, a) => n + (a?.checked ?? 0), 0),
    failing: statuses.reduce((n, a) => n + (a?.failing ?? 0), 0),
    delta: delta(before, after, { 'POST/rollcall.dev/policies/': policyNames.length }),
    memory: memory.stop(),
  };
}

// ---------------------------------------------------------------- one change at a time

const failingOf = (name: string) => policies.latest.get(name)?.status?.audit?.failing;

/** One label flip of pod `i`, timed to its result in the Report and in the Policy's status. */
async function change(i: number): Promise<Change> {
  const namespace = namespaceOf(i, namespaces);
  const pod = podName(i);
  const had = (await bench.core.readNamespacedPod({ name: pod, namespace })).metadata?.labels?.[
    TEAM_LABEL
  ];
  const to = had === undefined ? 'pass' : 'fail';
  const failing = failingOf(FLIP_POLICY);
  const wantFailing = failing === undefined ? undefined : failing + (to === 'fail' ? 1 : -1);
  const t0 = performance.now();
  const seen = Promise.all([
    reports.until(() => reports.resultOf(namespace, pod) === to, changeTimeoutMs),
    wantFailing === undefined
      ? Promise.resolve(NaN)
      : policies
          .until(() => failingOf(FLIP_POLICY) === wantFailing, changeTimeoutMs, 'status')
          .then(
            () => performance.now(),
            () => Infinity,
          ),
  ]);
  await bench.core.patchNamespacedPod(
    {
      name: pod,
      namespace,
      body: { metadata: { labels: { [TEAM_LABEL]: to === 'pass' ? 'team-flip' : null } } },
    },
    mergePatch,
  );
  const patchMs = performance.now() - t0;
  const [report, status] = await seen;
  return { pod, namespace, to, patchMs, reportMs: report - t0, statusMs: status - t0 };
}

/** `changes` flips, one at a time: each pod flipped, then flipped back. */
async function changePhase(): Promise<ChangePhase> {
  const before = await scrapeAll();
  const memory = memoryWatch();
  const samples: Change[] = [];
  for (let k = 0; samples.length < changes; k++) {
    // A prime stride spreads the pods over the namespaces and never repeats one.
    const i = (k * 7919 + 13) % pods;
    for (let twice = 0; twice < 2 && samples.length < changes; twice++) {
      const c = await change(i);
      samples.push(c);
      if (!Number.isFinite(c.reportMs)) log(`change of ${c.namespace}/${c.pod} not seen`);
      await quiet(5000, 100);
    }
  }
  const after = await scrapeAll();
  return {
    samples,
    delta: delta(before, after, { 'PATCH//pods/': samples.length }),
    memory: memory.stop(),
  };
}

// ---------------------------------------------------------------- the run

const expectedFail = Object.fromEntries(policyNames.map((n) => [n, 0]));
for (let i = 0; i < pods; i++) for (const p of violations(i, policyCount)) expectedFail[p]! += 1;
const expected = {
  reports: Math.min(namespaces, pods) * policyCount,
  results: pods * policyCount,
  fail: Object.values(expectedFail).reduce((a, b) => a + b, 0),
};

const results: Record<string, unknown> = {};
let failure: string | undefined;
try {
  log(`machine load average ${load0.map((l) => l.toFixed(2)).join(' ')}`);
  await startRollcallSide();
  await clearPolicies();
  await startPolicyServer();
  log(`${pods} pods in ${namespaces} namespaces`);
  results.podsS = await createPods();
  log(
    `pods Running after ${(results.podsS as number).toFixed(0)} s; waiting for rollcall to be idle`,
  );
  await policies.start();
  await reports.start();
  await quiet(60_000, 2000);
  log(`initial pass: ${policyCount} Policies on ${serverName} (${replicas} replicas)`);
  const pass = await initialPass(expected.results);
  results.pass = pass;
  log(
    `audited in ${pass.auditedS.toFixed(1)} s; Reports complete in ${pass.reportsS.toFixed(1)} s`,
  );
  await quiet(60_000, 2000);
  const census = await reportCensus(kc);
  results.census = census;
  log(`${changes} changes, one at a time`);
  const phase = await changePhase();
  results.changes = phase;
  await quiet(30_000, 2000);
  results.steady = {
    watcherMiB: rssSampler(() => [watcher?.child.pid]).stop(),
    workerMiB: Math.max(0, ...workers.map((w) => rssSampler(() => [w.child.pid]).stop())),
  };
} catch (err) {
  failure = (err as Error).stack ?? String(err);
  log(`not measured: ${failure}`);
  process.exitCode = 1;
} finally {
  policies.stop();
  reports.stop();
  printReport({
    quick,
    settings: { pods, namespaces, policies: policyCount, replicas, workers: workerCount, changes },
    serverName,
    goals,
    expected,
    load0,
    results,
    failure,
  });
  await bench.teardown();
  await redis?.stop();
}
