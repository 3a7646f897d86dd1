// npm run bench:attack [-- --quick] [-- --keep-cluster] [-- --rate=N] [-- --hostile-rate=N]
// [-- --seconds=N] [-- --keys=N] [-- --doublings=N] [-- --replicas=N] [-- --server-env=NAME=VALUE]:
// one hostile Policy under load beside the admission bench's policy (the canary), on the same
// PolicyServer, through the apiserver, on a local cluster of its own (real `rollcall
// policy-server` processes run by the node agent). Three phases back to back: the canary alone
// (the baseline), the canary with the hostile policy's requests beside it (the attack), the
// canary alone again (recovery). For each: the canary's latency, the hostile requests answered
// by the policy server or failed, the replica's event-loop delay (prom-client's
// monitorEventLoopDelay gauges on its /metrics, reset by the scrape at the phase's start), its
// peak RSS and CPU (/proc), readiness and restarts (the node agent's state file), and the
// webhook calls the apiserver saw fail (its /metrics). Prints a table; JSON in bench/out/.
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { createRule, namespaceNamed, policyManifest } from '../test/support/manifests.ts';
import {
  BenchCluster,
  benchArgs,
  machineInfo,
  printColumns,
  writeResults,
} from './admission-cluster.ts';
import { openLoop, summarize, type LoadResult, type RawRun } from './admission-load.ts';
import { cpuMs, histogramDelta, sum, sumBy, type Scrape } from './admission-metrics.ts';
import { benchPod, rollcallPolicy } from './admission-policies.ts';

const usage = `usage: npm run bench:attack [-- --quick] [-- --keep-cluster] [-- --rate=N]
    [-- --hostile-rate=N] [-- --seconds=N] [-- --keys=N] [-- --doublings=N] [-- --replicas=N]
    [-- --server-env=NAME=VALUE]
  --quick                  shorter phases
  --keep-cluster           leave the bench's cluster (.rollcall/bench-attack) running afterwards
  --rate=N                 the canary's requests per second (200)
  --hostile-rate=N         the hostile policy's requests per second (20)
  --seconds=N              the attack phase (quick: 10, full: 20)
  --keys=N                 keys of each hostile ConfigMap (1000)
  --doublings=N            doublings of the list built from them (12)
  --replicas=N             policy-server replicas (1)
  --server-env=NAME=VALUE  environment of the replicas (repeatable)
One hostile Policy under load beside the admission bench's policy (the canary), on the same
PolicyServer, on a local cluster of its own: the canary alone, under attack, and alone again.
Prints a table; JSON in bench/out/.`;
const { args, flag, quick, keepCluster } = benchArgs(usage);
/** The canary's rate: the admission bench's. */
const rate = Number(flag('rate') ?? 200);
const hostileRate = Number(flag('hostile-rate') ?? 20);
/** The attack phase; the canary runs alone for `aloneSeconds` before and after it. */
const attackSeconds = Number(flag('seconds') ?? (quick ? 10 : 20));
const aloneSeconds = quick ? 5 : 10;
const warmupSeconds = 3;
/** Keys of each hostile ConfigMap, and doublings of the list built from them. */
const keys = Number(flag('keys') ?? 1000);
const doublings = Number(flag('doublings') ?? 12);
const replicas = Number(flag('replicas') ?? 1);
/** `--server-env=NAME=VALUE` (repeatable): environment of the policy-server replicas, to try their limits. */
const serverEnv = args
  .filter((a) => a.startsWith('--server-env='))
  .map((a) => a.slice('--server-env='.length))
  .map((kv) => ({ name: kv.slice(0, kv.indexOf('=')), value: kv.slice(kv.indexOf('=') + 1) }));
/** Above both policies' timeoutSeconds (10), so the apiserver's own answer arrives. */
const requestTimeoutMs = 15_000;

const serverName = 'attack';
const canaryName = 'canary';
const hostileName = 'hostile';
const ns = { canary: 'attack-canary', hostile: 'attack-hostile' } as const;
const log = (line: string) =>
  console.error(`[attack ${new Date().toISOString().slice(11, 19)}] ${line}`);

// ---------------------------------------------------------------- the hostile policy

/**
 * A list of the ConfigMap's keys doubled `doublings` times, then a regex over every element.
 * Its cost grows with the request (keys × 2^doublings elements), not with the policy alone:
 * at the smallest request (1 key) it is ~2^doublings, far below any load-time limit, so it
 * loads; at `keys` keys it takes seconds and hundreds of MiB. No comprehension is nested in
 * another, so rollcall's structural gate (costBound) lets it start on the main thread.
 */
function hostilePolicy() {
  const variables = [{ name: 'v0', expression: 'object.data.map(k, k)' }];
  for (let i = 1; i <= doublings; i++)
    variables.push({ name: `v${i}`, expression: `variables.v${i - 1} + variables.v${i - 1}` });
  return policyManifest(hostileName, serverName, {
    variables,
    validations: [
      {
        expression: `variables.v${doublings}.all(x, x.matches('^key-[0-9]+$'))`,
        message: 'configmap keys must look like key-N',
      },
    ],
    rules: [createRule('configmaps')],
    namespaceSelector: namespaceNamed(ns.hostile),
    failurePolicy: 'Fail',
    timeoutSeconds: 10,
  });
}

/** The hostile ConfigMap's data, serialized once: `keys` keys the policy allows. */
const hostileData = JSON.stringify(
  Object.fromEntries(
    Array.from({ length: keys }, (_, i) => [`key-${String(i).padStart(4, '0')}`, 'v']),
  ),
);

// ---------------------------------------------------------------- cluster and clients

const load0 = loadavg();
const bench = await BenchCluster.up('attack', log, keepCluster);
const { apiserver } = bench;
// One pool each, so the hostile requests never wait for a socket the canary holds, or back.
const canaryAgent = bench.agent();
const hostileAgent = bench.agent();

// ---------------------------------------------------------------- requests

let seq = 0;
const canaryRequest = () => ({
  path: `/api/v1/namespaces/${ns.canary}/pods?dryRun=All`,
  body: JSON.stringify(benchPod(`canary-${++seq}`)),
});
const hostileRequest = () => ({
  path: `/api/v1/namespaces/${ns.hostile}/configmaps?dryRun=All`,
  body: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"hostile-${++seq}"},"data":${hostileData}}`,
});

/**
 * What an answer says, for the report: `allowed` (201), `denied…` (the policy server answered:
 * a verdict, or its failurePolicy after a timeout, a budget, an overload), or a failure of
 * the apiserver's call to the webhook, or another status.
 */
function answerKind(status: number, body: string): string {
  if (status === 201) return 'allowed';
  if (body.includes('denied the request')) {
    if (body.includes('timed out')) return 'denied: timed out';
    if (/budget/i.test(body)) return 'denied: over budget';
    if (/overload/i.test(body)) return 'denied: overloaded';
    if (/generation \d+ failed/.test(body)) return 'denied: failed';
    return 'denied';
  }
  if (body.includes('failed calling webhook')) {
    if (/deadline exceeded|Timeout/.test(body)) return 'webhook call failed: timeout';
    if (body.includes('no ready pod')) return 'webhook call failed: no ready pod';
    return 'webhook call failed';
  }
  return `status ${status}`;
}
const answeredByServer = (kind: string) => kind === 'allowed' || kind.startsWith('denied');

/** Answers by kind, with their latencies and the first body of each. */
class Answers {
  readonly byKind = new Map<string, { ms: number[]; sample: string }>();
  add = (status: number, body: string, ms: number) => {
    const kind = answerKind(status, body);
    const entry = this.byKind.get(kind) ?? { ms: [], sample: body.slice(0, 400) };
    this.byKind.set(kind, entry);
    entry.ms.push(ms);
  };
  count(which: (kind: string) => boolean): number {
    let n = 0;
    for (const [kind, { ms }] of this.byKind) if (which(kind)) n += ms.length;
    return n;
  }
  summary() {
    return Object.fromEntries(
      [...this.byKind].map(([kind, { ms, sample }]) => {
        const sorted = [...ms].sort((a, b) => a - b);
        return [kind, { count: ms.length, medianMs: sorted[sorted.length >> 1]!, sample }];
      }),
    );
  }
}

// ---------------------------------------------------------------- set-up

async function startRollcallSide(): Promise<void> {
  for (const name of Object.values(ns)) await bench.ensureNamespace(name);
  await bench.startRollcall('attack-rollcall');
  await bench.createPolicyServer(serverName, { replicas, env: serverEnv });
  // A cluster kept from an earlier run may have the server at another size.
  await bench.patchPolicyServer(serverName, { replicas, env: serverEnv });
  for (const body of [rollcallPolicy(canaryName, serverName, ns.canary), hostilePolicy()])
    await bench.createPolicy(body);
  await bench.untilPolicyReady(canaryName, replicas);
  await bench.untilPolicyReady(hostileName, replicas);
  await bench.untilPolicyServers(replicas);
  await bench.untilDenied(
    canaryAgent,
    () => ({
      path: `/api/v1/namespaces/${ns.canary}/pods?dryRun=All`,
      body: JSON.stringify(benchPod(`probe-${++seq}`, true)),
    }),
    ':latest tag',
    'the canary',
  );
  // A ConfigMap of one key the hostile policy refuses: cheap, and proves its webhook is live.
  await bench.untilDenied(
    hostileAgent,
    () => ({
      path: `/api/v1/namespaces/${ns.hostile}/configmaps?dryRun=All`,
      body: JSON.stringify({
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: `probe-${++seq}` },
        data: { bad: 'v' },
      }),
    }),
    'configmap keys must look like key-N',
    'the hostile policy',
  );
}

// ---------------------------------------------------------------- the replicas, from outside

/** VmRSS and VmHWM (peak since the process started) of a process, in MiB; 0 when it is gone. */
function memoryMiB(pid: number): { rss: number; hwm: number } {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (field: string) =>
      Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0);
    return { rss: kb('VmRSS') / 1024, hwm: kb('VmHWM') / 1024 };
  } catch {
    return { rss: 0, hwm: 0 };
  }
}

/** CPU ms (user + system) of one thread of a process, from /proc; 0 when it is gone. */
function threadCpuMs(pid: number, tid: number): number {
  try {
    // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10; // USER_HZ 100
  } catch {
    return 0;
  }
}

interface ReplicaWatch {
  /** The largest VmRSS sampled of any one replica, and the largest VmHWM at the end. */
  peakRssMiB: number;
  hwmMiB: number;
  /** Seconds during which some replica was not Ready, per the node agent's probe. */
  unreadySeconds: number;
  /** Processes started during the phase (a pid not seen at its start). */
  restarts: number;
  /** CPU time of the replicas' processes (every thread) over the phase, in cores. */
  cpuCores: number;
  /** The same, of their main threads only (the event loop that serves probes and inline policies). */
  mainCpuCores: number;
}

/** Samples the replicas every 200 ms until stopped: memory, readiness, new processes. */
function watchReplicas(): { stop(): ReplicaWatch } {
  const intervalMs = 200;
  const seen = new Set(bench.policyServers().map((p) => p.pid));
  let peakRssMiB = 0;
  let unreadySamples = 0;
  let restarts = 0;
  const t0 = performance.now();
  /** CPU ms of each process when first and last seen (a process that died keeps its last). */
  const cpu = new Map<number, { first: number; last: number }>();
  const mainCpu = new Map<number, { first: number; last: number }>();
  const note = (map: typeof cpu, pid: number, ms: number) => {
    if (ms > 0) map.set(pid, { first: map.get(pid)?.first ?? ms, last: ms });
  };
  const used = (map: typeof cpu) => {
    let ms = 0;
    for (const { first, last } of map.values()) ms += last - first;
    return ms;
  };
  const sample = () => {
    const list = bench.policyServers();
    if (list.length < replicas || list.some((p) => !p.ready)) unreadySamples++;
    for (const { pid } of list) {
      if (!seen.has(pid)) (seen.add(pid), restarts++);
      peakRssMiB = Math.max(peakRssMiB, memoryMiB(pid).rss);
      note(cpu, pid, cpuMs(pid));
      note(mainCpu, pid, threadCpuMs(pid, pid));
    }
  };
  sample();
  const timer = setInterval(sample, intervalMs);
  return {
    stop() {
      clearInterval(timer);
      sample();
      const hwmMiB = Math.max(0, ...bench.policyServers().map((p) => memoryMiB(p.pid).hwm));
      const wallMs = performance.now() - t0;
      return {
        peakRssMiB,
        hwmMiB,
        unreadySeconds: (unreadySamples * intervalMs) / 1000,
        restarts,
        cpuCores: used(cpu) / wallMs,
        mainCpuCores: used(mainCpu) / wallMs,
      };
    },
  };
}

/** Differences of `sumBy` between two scrapes, the zero ones left out. */
function deltaBy(before: Scrape, after: Scrape, name: string, keys: readonly string[]) {
  const a = sumBy(before, name, keys);
  return Object.fromEntries(
    [...sumBy(after, name, keys)]
      .map(([k, v]) => [k, v - (a.get(k) ?? 0)] as const)
      .filter(([, v]) => v !== 0),
  );
}

/** Mean ms of the canary's and the hostile policy's webhook calls, apiserver-timed (those called). */
function webhookMeans(before: Scrape, after: Scrape): Record<string, number> {
  const histogram = 'apiserver_admission_webhook_admission_duration_seconds';
  const ours = [...sumBy(after, `${histogram}_count`, ['name']).keys()].filter((webhook) =>
    [canaryName, hostileName].some((policy) => webhook.startsWith(`${policy}.`)),
  );
  return Object.fromEntries(
    ours
      .map(
        (webhook) =>
          [webhook, histogramDelta(before, after, histogram, { name: webhook })] as const,
      )
      .filter(([, d]) => d.count > 0)
      .map(([webhook, d]) => [webhook, d.meanMs]),
  );
}

// ---------------------------------------------------------------- phases

interface Phase {
  name: string;
  seconds: number;
  canary: LoadResult & { answers: ReturnType<Answers['summary']> };
  hostile?: LoadResult & {
    answers: ReturnType<Answers['summary']>;
    answered: number;
    failed: number;
  };
  replica: ReplicaWatch & {
    /** Event-loop delay over the phase, ms, the largest of any replica; NaN: no answer. */
    loopP99Ms: number;
    loopMaxMs: number;
    /** rollcall_admission_requests_total by policy/verdict during the phase. */
    verdicts: Record<string, number>;
  };
  apiserver: {
    /** apiserver_admission_webhook_request_total by webhook/code/rejected. */
    webhookCalls: Record<string, number>;
    /** apiserver_admission_webhook_rejection_count by webhook/error_type/rejection_code. */
    rejections: Record<string, number>;
    /**
     * Webhook calls the apiserver saw fail: those it counted rejected, less the webhooks' own
     * denials (rejections with error_type no_error). The rejection count alone misses calls
     * still running when the client gave up.
     */
    failedCalls: number;
    /** Mean ms of each webhook's calls, as the apiserver timed them. */
    callMeanMs: Record<string, number>;
  };
}

const loadOpts = (secs: number, r: number, request: () => { path: string; body: string }) => ({
  rate: r,
  count: Math.round(r * secs),
  timeoutMs: requestTimeoutMs,
  okStatus: 201,
  request,
});

async function phase(name: string, seconds: number, withHostile: boolean): Promise<Phase> {
  log(
    `${name}: ${seconds} s, canary at ${rate}/s${withHostile ? `, hostile at ${hostileRate}/s` : ''}`,
  );
  const apiBefore = await bench.apiserverMetrics();
  const serversBefore = await bench.serverScrapes(); // also resets the event-loop histograms
  const watch = watchReplicas();
  const canaryAnswers = new Answers();
  const hostileAnswers = new Answers();
  const [canaryRun, hostileRun] = await Promise.all([
    openLoop(apiserver, canaryAgent, {
      ...loadOpts(seconds, rate, canaryRequest),
      onAnswer: canaryAnswers.add,
    }),
    withHostile
      ? openLoop(apiserver, hostileAgent, {
          ...loadOpts(seconds, hostileRate, hostileRequest),
          onAnswer: hostileAnswers.add,
        })
      : undefined,
  ]);
  const watched = watch.stop();
  const serversAfter = await bench.serverScrapes();
  const apiAfter = await bench.apiserverMetrics();

  const loop = (metric: string) => {
    const values = [...serversAfter.values()].map((t) => (t ? sum(t, metric) * 1000 : NaN));
    return values.some((v) => Number.isNaN(v)) ? NaN : Math.max(...values);
  };
  const verdicts: Record<string, number> = {};
  for (const [pod, after] of serversAfter)
    for (const [k, v] of Object.entries(
      deltaBy(serversBefore.get(pod) ?? '', after, 'rollcall_admission_requests_total', [
        'policy',
        'verdict',
      ]),
    ))
      verdicts[k] = (verdicts[k] ?? 0) + v;
  const webhookCalls = deltaBy(apiBefore, apiAfter, 'apiserver_admission_webhook_request_total', [
    'name',
    'code',
    'rejected',
  ]);
  const total = (counts: Record<string, number>, which: (key: string) => boolean) =>
    Object.entries(counts).reduce((n, [k, v]) => (which(k) ? n + v : n), 0);
  const rejections = deltaBy(apiBefore, apiAfter, 'apiserver_admission_webhook_rejection_count', [
    'name',
    'error_type',
    'rejection_code',
  ]);
  const summarized = (r: number, run: RawRun, answers: Answers) => ({
    ...summarize(r, [run]),
    answers: answers.summary(),
  });
  const hostile = hostileRun && {
    ...summarized(hostileRate, hostileRun, hostileAnswers),
    answered: hostileAnswers.count(answeredByServer),
    failed: hostileRun.sent - hostileAnswers.count(answeredByServer),
  };
  return {
    name,
    seconds,
    canary: summarized(rate, canaryRun, canaryAnswers),
    ...(hostile ? { hostile } : {}),
    replica: {
      ...watched,
      loopP99Ms: loop('nodejs_eventloop_lag_p99_seconds'),
      loopMaxMs: loop('nodejs_eventloop_lag_max_seconds'),
      verdicts,
    },
    apiserver: {
      webhookCalls,
      rejections,
      failedCalls:
        total(webhookCalls, (k) => k.endsWith('/true')) -
        total(rejections, (k) => k.includes('/no_error/')),
      callMeanMs: webhookMeans(apiBefore, apiAfter),
    },
  };
}

// ---------------------------------------------------------------- the run

const phases: Phase[] = [];
let failure: string | undefined;
try {
  log(`machine load average ${load0.map((l) => l.toFixed(2)).join(' ')}`);
  await startRollcallSide();
  log(`canary: ${warmupSeconds} s warm-up at ${rate}/s`);
  await openLoop(apiserver, canaryAgent, loadOpts(warmupSeconds, rate, canaryRequest));
  phases.push(await phase('alone', aloneSeconds, false));
  phases.push(await phase('attack', attackSeconds, true));
  phases.push(await phase('after', aloneSeconds, false));
} catch (err) {
  failure = (err as Error).message;
  log(`not measured: ${failure}`);
  process.exitCode = 1;
} finally {
  report();
  await bench.teardown();
}

function report(): void {
  const machine = machineInfo(load0);
  const fmt = (n: number | undefined) =>
    n === undefined ? '-' : Number.isFinite(n) ? n.toFixed(1) : 'n/a';
  const rows = [
    [
      'phase',
      'canary sent',
      'ok',
      'failed',
      'p50',
      'p99',
      'max',
      'hostile sent',
      'answered',
      'failed',
      'loop p99',
      'loop max',
      'peak RSS',
      'HWM',
      'unready s',
      'restarts',
      'CPU cores',
      'main thread',
      'apiserver failed calls',
    ],
    ...phases.map((p) => [
      p.name,
      String(p.canary.sent),
      String(p.canary.ok),
      String(p.canary.sent - p.canary.ok),
      fmt(p.canary.latency.p50),
      fmt(p.canary.latency.p99),
      fmt(p.canary.latency.max),
      p.hostile ? String(p.hostile.sent) : '-',
      p.hostile ? String(p.hostile.answered) : '-',
      p.hostile ? String(p.hostile.failed) : '-',
      fmt(p.replica.loopP99Ms),
      fmt(p.replica.loopMaxMs),
      fmt(p.replica.peakRssMiB),
      fmt(p.replica.hwmMiB),
      fmt(p.replica.unreadySeconds),
      String(p.replica.restarts),
      p.replica.cpuCores.toFixed(2),
      p.replica.mainCpuCores.toFixed(2),
      String(p.apiserver.failedCalls),
    ]),
  ];
  console.log(
    `\nrollcall attack bench (${quick ? 'quick' : 'full'}), ${new Date().toISOString()}: PolicyServer ${serverName}, ${replicas} replica(s)${serverEnv.length ? ` (env ${serverEnv.map((e) => `${e.name}=${e.value}`).join(' ')})` : ''}; canary = the admission bench's policy on dry-run Pod creates at ${rate}/s; hostile = ${doublings} doublings of a ConfigMap's ${keys} keys (${keys * 2 ** doublings} elements per request) at ${hostileRate}/s; phases: canary alone ${aloneSeconds} s, attack ${attackSeconds} s, canary alone ${aloneSeconds} s; open loop, ms from the scheduled send, ${requestTimeoutMs / 1000} s client timeout`,
  );
  console.log(JSON.stringify(machine));
  console.log(
    'answered: the policy server answered (allowed, or denied by a verdict or by failurePolicy); failed: the rest (the apiserver failed calling the webhook, other statuses, client timeouts); loop p99/max: the replica’s event-loop delay over the phase, ms (n/a: /metrics did not answer in 10 s); peak RSS: largest VmRSS sampled every 200 ms, MiB; HWM: VmHWM at the end; unready s: seconds with a replica not Ready (node agent probe); CPU cores / main thread: the replica process’s CPU time (all its threads / its main thread) over the phase’s wall time; apiserver failed calls: webhook calls apiserver_admission_webhook_request_total counts rejected, less the webhooks’ own denials (rejection_count error_type no_error)',
  );
  printColumns(rows);
  for (const p of phases) {
    const kinds = (a: Phase['canary']['answers']) =>
      Object.entries(a)
        .map(([k, v]) => `${k} ${v.count} (median ${v.medianMs.toFixed(0)} ms)`)
        .join(', ');
    console.log(
      `${p.name}: canary ${kinds(p.canary.answers)}; client errors ${JSON.stringify(p.canary.errors)}; generator lag p99 ${fmt(p.canary.lag.p99)} ms`,
    );
    if (p.hostile)
      console.log(
        `${p.name}: hostile ${kinds(p.hostile.answers)}; client errors ${JSON.stringify(p.hostile.errors)}`,
      );
    console.log(`${p.name}: replica verdicts ${JSON.stringify(p.replica.verdicts)}`);
    console.log(
      `${p.name}: apiserver webhook calls (webhook/code/rejected) ${JSON.stringify(p.apiserver.webhookCalls)}, mean ms ${JSON.stringify(Object.fromEntries(Object.entries(p.apiserver.callMeanMs).map(([k, v]) => [k, +v.toFixed(1)])))}; rejections (webhook/error_type/code) ${JSON.stringify(p.apiserver.rejections)}`,
    );
    const samples = [
      ...Object.entries(p.canary.answers).map(([k, v]) => [`canary ${k}`, v.sample] as const),
      ...Object.entries(p.hostile?.answers ?? {}).map(
        ([k, v]) => [`hostile ${k}`, v.sample] as const,
      ),
    ].filter(([k]) => !k.endsWith(' allowed'));
    for (const [k, sample] of samples) console.log(`${p.name}: first ${k}: ${sample}`);
  }
  if (failure) console.log(`not measured: ${failure}`);

  const settings = {
    rate,
    hostileRate,
    attackSeconds,
    aloneSeconds,
    keys,
    doublings,
    replicas,
    serverEnv,
  };
  writeResults('attack', quick, { settings, machine, phases, failure });
}
