// npm run bench:admission [-- --quick] [-- --keep-cluster] [-- --rate=N] [-- --seconds=N]
// [-- --subjects=echo,none,native,rollcall,direct,rollcall-3]: what a validating policy adds to a
// request at a fixed rate, open loop, on the local cluster. One policy of six CEL expressions
// on a Pod, as rollcall's webhook (a real `rollcall policy-server` process per replica, reached
// through the node agent's CONNECT proxy) and as a native ValidatingAdmissionPolicy, each
// matching only its own namespace, beside the apiserver with no policy (its floor) and the
// generator against an echo server (the generator's own floor). Requests are server-side
// dry-run Pod creates: nothing is stored. The subjects take turns in short rounds, so a load
// change on the machine hits them alike. Then the curve (`--curve`): native beside rollcall with
// 1 and 3 replicas at rising rates, with that policy and with the library's Pod Security
// restricted set. Prints tables and the goal lines; JSON in bench/out/.
import type { V1ValidatingAdmissionPolicyBinding } from '@kubernetes/client-node';
import type { Agent } from 'node:https';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { readNodeAgentState } from '../tooling/cluster/node-agent-state.ts';
import { ensurePki } from '../tooling/cluster/pki.ts';
import {
  BenchCluster,
  benchArgs,
  machineInfo,
  printColumns,
  rollcallNamespace,
  writeResults,
} from './admission-cluster.ts';
import {
  openLoop,
  pooledAgent,
  summarize,
  type LoadOptions,
  type LoadResult,
  type RawRun,
  type Target,
} from './admission-load.ts';
import { Breakdown, cpuSnapshot } from './admission-metrics.ts';
import {
  admissionReview,
  benchPod,
  denialOf,
  nativePolicy,
  restrictedNative,
  policySets,
  restrictedPolicies,
  rollcallPolicy,
  type PolicySet,
} from './admission-policies.ts';
import { TunnelAgent } from './admission-tunnel.ts';
import { sleep, startProcess } from './support.ts';

const allSubjects = ['echo', 'none', 'native', 'rollcall', 'direct', 'rollcall-3'];
const usage = `usage: npm run bench:admission [-- --quick] [-- --keep-cluster] [-- --rate=N]
    [-- --seconds=N] [-- --subjects=LIST] [-- --curve=RATES]
  --quick         shorter rounds, warm-ups and runs
  --keep-cluster  leave the bench's cluster (.rollcall/bench-admission) running afterwards
  --rate=N        requests per second of every subject (200)
  --seconds=N     measured seconds per subject (quick: 15, full: 60)
  --subjects=LIST of ${allSubjects.join(',')} (all)
  --curve=RATES   then native, rollcall and rollcall-3 at each rate, with the six checks and with
                  the library's Pod Security restricted set (full: 100,200,500,1000; quick: 200,500;
                  none: skip)
What a validating policy adds to a request at a fixed rate, open loop, on a local cluster of its
own: rollcall's webhook (real policy-server processes) beside the same policy as a native
ValidatingAdmissionPolicy. Prints a table; JSON in bench/out/.`;
const { flag, quick, keepCluster } = benchArgs(usage);
const rate = Number(flag('rate') ?? 200);
/** Measured seconds per subject, in rounds of `roundSeconds`. */
const seconds = Number(flag('seconds') ?? (quick ? 15 : 60));
const roundSeconds = quick ? 5 : 10;
/** Once per subject before its first round, not measured (connections, JIT, caches). */
const warmupSeconds = quick ? 3 : 10;
/** Before each round, not measured: the subject's connections are warm again after its pause. */
const leadInSeconds = 1;
const wanted = new Set((flag('subjects') ?? allSubjects.join(',')).split(','));
const goalMarginMs = 5;
/** The curve's rates, its measured seconds per point, and the p99 it reports crossing. */
// 100/s: native's p99 with the restricted set passed 50 ms at 200/s on the slower machines.
const curveFlag = flag('curve') ?? (quick ? '200,500' : '100,200,500,1000');
const curveRates = curveFlag === 'none' ? [] : curveFlag.split(',').map(Number);
const curveSeconds = quick ? 10 : 20;
const curveWarmupSeconds = quick ? 3 : 5;
const curveLimitMs = 50;
const requestTimeoutMs = 10_000;

const ns = {
  none: 'adm-none',
  native: 'adm-native',
  rollcall: 'adm-rollcall',
  nativeRestricted: 'adm-native-pss',
  rollcallRestricted: 'adm-rollcall-pss',
} as const;
const serverName = 'adm';
const policyName = 'adm-six';
const log = (line: string) =>
  console.error(`[admission ${new Date().toISOString().slice(11, 19)}] ${line}`);

const load0 = loadavg();
const bench = await BenchCluster.up('admission', log, keepCluster);
const { dir, apiserver } = bench;
const apiAgent = bench.agent();

// ---------------------------------------------------------------- requests

let seq = 0;
const podPath = (namespace: string) => `/api/v1/namespaces/${namespace}/pods?dryRun=All`;
/** A dry-run create of a conforming Pod in `namespace`: admitted, never stored. */
const podCreate = (namespace: string) => () => ({
  path: podPath(namespace),
  body: JSON.stringify(benchPod(`bench-${++seq}`)),
});

/** Probes until a violating Pod is denied with the message of `set`. */
const untilDenies = (namespace: string, what: string, set: PolicySet = 'six') =>
  bench.untilDenied(
    apiAgent,
    () => ({ path: podPath(namespace), body: JSON.stringify(benchPod(`probe-${++seq}`, true)) }),
    denialOf[set],
    `${what} (a violating Pod in ${namespace})`,
  );

// ---------------------------------------------------------------- subjects and rounds

interface Subject {
  name: string;
  /** Requests per second. */
  rate: number;
  target: Target;
  agent: Agent;
  namespace: string;
  /** Scrape the policy servers' /metrics around each round. */
  policyServers: boolean;
  request: LoadOptions['request'];
  okStatus: number;
  splitWrites?: boolean;
  runs: RawRun[];
  breakdown: Breakdown;
}

const subject = (
  name: string,
  namespace: string,
  target = apiserver,
  agent = apiAgent,
  policyServers = false,
): Subject => ({
  name,
  rate,
  target,
  agent,
  namespace,
  policyServers,
  request: podCreate(namespace),
  okStatus: 201,
  runs: [],
  breakdown: new Breakdown(),
});

let echoPid: number | undefined;
/** The processes whose CPU time a round charges to its requests. */
const cpuNow = () =>
  cpuSnapshot({
    generator: [process.pid],
    echo: [echoPid],
    apiserver: [bench.state.pids['kube-apiserver']],
    etcd: [bench.state.pids.etcd],
    'node agent': [readNodeAgentState(dir)?.pid],
    'policy servers': bench.policyServers().map((p) => p.pid),
  });

const loadOpts = (s: Subject, secs: number) => ({
  rate: s.rate,
  count: Math.round(s.rate * secs),
  timeoutMs: requestTimeoutMs,
  okStatus: s.okStatus,
  request: s.request,
  splitWrites: s.splitWrites === true,
});

/** One measured round of a subject: a lead-in, then the round, with /metrics around it. */
async function round(s: Subject): Promise<void> {
  await openLoop(s.target, s.agent, loadOpts(s, leadInSeconds));
  const apiBefore = await bench.apiserverMetrics();
  const serversBefore = s.policyServers ? await bench.serverScrapes() : undefined;
  const cpuBefore = cpuNow();
  const run = await openLoop(s.target, s.agent, loadOpts(s, roundSeconds));
  const cpuAfter = cpuNow();
  const apiAfter = await bench.apiserverMetrics();
  const serversAfter = s.policyServers ? await bench.serverScrapes() : undefined;
  s.runs.push(run);
  s.breakdown.add(run.sent, cpuBefore, cpuAfter, apiBefore, apiAfter, serversBefore, serversAfter);
}

/** Warms every subject up, then runs rounds in rotating order until each has `secs`. */
async function block(subjects: Subject[], secs = seconds, warmup = warmupSeconds): Promise<void> {
  if (subjects.length === 0) return;
  for (const s of subjects) {
    log(`${s.name}: ${warmup} s warm-up at ${s.rate}/s`);
    await openLoop(s.target, s.agent, loadOpts(s, warmup));
  }
  const rounds = Math.ceil(secs / roundSeconds);
  for (let i = 0; i < rounds; i++) {
    log(`round ${i + 1}/${rounds}: ${subjects.map((s) => s.name).join(', ')}`);
    for (let j = 0; j < subjects.length; j++) await round(subjects[(i + j) % subjects.length]!);
  }
}

// ---------------------------------------------------------------- set-up of each side

async function startEcho(): Promise<Subject> {
  const pki = ensurePki(join(dir, 'pki'));
  const echo = await startProcess(
    'admission-echo',
    'bench/admission-echo.ts',
    ['$PORT', pki.servingCert, pki.servingKey],
    {},
  );
  bench.running.push(echo);
  echoPid = echo.child.pid;
  const target: Target = { host: '127.0.0.1', port: echo.port, tls: { ca: apiserver.tls.ca } };
  const s = subject('echo', 'echo', target, pooledAgent(target));
  for (let i = 0; ; i++) {
    const r = await openLoop(target, s.agent, { ...loadOpts(s, 0), count: 1, timeoutMs: 2000 });
    if (r.latencies.length) return s;
    if (i > 50) throw new Error('the echo server did not start: see .rollcall/bench/logs');
    await sleep(100);
  }
}

async function startNative(): Promise<Subject> {
  const { policy, binding } = nativePolicy(policyName, ns.native);
  await bench.created(bench.admission.createValidatingAdmissionPolicy({ body: policy }));
  await bench.created(bench.admission.createValidatingAdmissionPolicyBinding({ body: binding }));
  // The apiserver compiles and activates a new policy a little later.
  await untilDenies(ns.native, 'the ValidatingAdmissionPolicy');
  return subject('native', ns.native);
}

async function startRollcallSide(): Promise<void> {
  await bench.startRollcall('admission-rollcall');
  await bench.createPolicyServer(serverName, { replicas: 1 });
  await bench.createPolicy(rollcallPolicy(policyName, serverName, ns.rollcall));
}

/** The PolicyServer at `replicas`, the Policy Ready on all of them and denying through the webhook. */
async function rollcallAt(replicas: number): Promise<Subject> {
  await bench.patchPolicyServer(serverName, { replicas });
  await bench.untilPolicyReady(policyName, replicas);
  await bench.untilPolicyServers(replicas);
  await untilDenies(ns.rollcall, "rollcall's webhook");
  return subject(
    replicas === 1 ? 'rollcall' : `rollcall-${replicas}`,
    ns.rollcall,
    apiserver,
    apiAgent,
    true,
  );
}

/**
 * The policy server without the apiserver: AdmissionReviews on the path the webhook serves,
 * straight to its port, and through the node agent's CONNECT proxy as the apiserver's calls
 * go (both keep-alive), to tell the server's time from the hops before it.
 */
async function directToServer(): Promise<Subject[]> {
  const [server] = bench.policyServers();
  if (!server) throw new Error('no policy-server process in the node agent state');
  const webhook = await bench.admission.readValidatingWebhookConfiguration({
    name: `rollcall-${policyName}`,
  });
  const path = webhook.webhooks?.[0]?.clientConfig.service?.path;
  if (!path) throw new Error(`webhook rollcall-${policyName} has no service path`);
  const target: Target = { host: '127.0.0.1', port: server.port, tls: {}, insecure: true };
  const s = subject('policy server direct', ns.rollcall, target, pooledAgent(target), true);
  const service = await bench.core.readNamespacedService({
    name: `policy-server-${serverName}`,
    namespace: rollcallNamespace,
  });
  const proxySocket = readNodeAgentState(dir)?.proxySocket;
  if (!proxySocket) throw new Error('the node agent has no proxy socket');
  const tunnel = () =>
    new TunnelAgent(proxySocket, `${service.spec?.clusterIP}:${service.spec?.ports?.[0]?.port}`, {
      keepAlive: true,
      maxSockets: 256,
      maxFreeSockets: 256,
      rejectUnauthorized: false,
    });
  const viaProxy = subject('policy server via proxy', ns.rollcall, target, tunnel(), true);
  const review = (violating: boolean) => () => ({
    path,
    body: JSON.stringify(
      admissionReview(`uid-${++seq}`, ns.rollcall, benchPod(`direct-${seq}`, violating)),
    ),
  });
  // Allowed and denied as through the apiserver, so the path and body are right.
  for (const violating of [false, true]) {
    const answers: string[] = [];
    await openLoop(target, s.agent, {
      rate: 1,
      count: 1,
      timeoutMs: 5000,
      okStatus: 0, // every answer is a "failure", so its body is kept
      request: review(violating),
    }).then((r) => answers.push(...r.samples));
    const allowed = /"allowed":\s*true/.test(answers[0] ?? '');
    if (allowed === violating)
      throw new Error(
        `the policy server answered ${answers[0]} to a ${violating ? 'violating' : 'conforming'} Pod`,
      );
  }
  return [
    { ...s, request: review(false), okStatus: 200 },
    { ...viaProxy, request: review(false), okStatus: 200 },
    {
      ...subject('policy server via proxy, 2 writes', ns.rollcall, target, tunnel(), true),
      request: review(false),
      okStatus: 200,
      splitWrites: true,
    },
  ];
}

// ---------------------------------------------------------------- the curve

/** One point of the curve: a subject at a rate, beside the other subject of its pair. */
interface CurvePoint {
  set: PolicySet;
  /** rollcall's replicas in the pair this point was measured in. */
  replicas: number;
  subject: string;
  rate: number;
  figures: LoadResult;
}
const curve: CurvePoint[] = [];
const namespaces = {
  six: { native: ns.native, rollcall: ns.rollcall },
  restricted: { native: ns.nativeRestricted, rollcall: ns.rollcallRestricted },
};
/** The restricted set on rollcall's server, read once from the library. */
const restricted = restrictedPolicies(serverName, ns.rollcallRestricted);
const restrictedNames = restricted.map((p) => p.metadata.name);

/** The restricted set, natively and on rollcall's server, each in a namespace of its own. */
async function startRestricted(): Promise<void> {
  for (const body of restrictedNative(ns.nativeRestricted))
    await bench.created(
      body.kind === 'ValidatingAdmissionPolicy'
        ? bench.admission.createValidatingAdmissionPolicy({ body })
        : bench.admission.createValidatingAdmissionPolicyBinding({
            body: body as unknown as V1ValidatingAdmissionPolicyBinding,
          }),
    );
  await untilDenies(ns.nativeRestricted, 'the restricted set, natively', 'restricted');
  for (const body of restricted) await bench.createPolicy(body);
}

/**
 * Native beside rollcall at `replicas`, for each set at each rate, in rounds. A rate past a
 * subject's saturation leaves a backlog, so the pair's rounds alternate as elsewhere.
 */
async function curveAt(replicas: number): Promise<void> {
  await bench.patchPolicyServer(serverName, { replicas });
  for (const name of [policyName, ...restrictedNames]) await bench.untilPolicyReady(name, replicas);
  await bench.untilPolicyServers(replicas);
  await untilDenies(ns.rollcall, "rollcall's webhook");
  await untilDenies(ns.rollcallRestricted, "rollcall's restricted set", 'restricted');
  for (const set of policySets) {
    /** A subject that lost most requests at a rate is past saturation: higher rates skip it. */
    const saturated = new Set<string>();
    for (const r of curveRates) {
      const pair = [
        { ...subject('native', namespaces[set].native), rate: r },
        {
          ...subject(`rollcall-${replicas}`, namespaces[set].rollcall, apiserver, apiAgent, true),
          rate: r,
        },
      ].filter((s) => !saturated.has(s.name));
      log(`curve: ${set}, ${replicas} replica(s), ${r}/s: ${pair.map((s) => s.name).join(', ')}`);
      await block(pair, curveSeconds, curveWarmupSeconds);
      for (const s of pair) {
        const figures = summarize(r, s.runs);
        curve.push({ set, replicas, subject: s.name, rate: r, figures });
        if (figures.ok < figures.sent / 2) saturated.add(s.name);
      }
    }
  }
}

// ---------------------------------------------------------------- the run

const failures: Record<string, string> = {};
const measured: Subject[] = [];
/** Runs `fn`; a failure is recorded for `name` and the run goes on without it. */
async function attempt<T>(name: string, fn: () => Promise<T>): Promise<T | undefined> {
  try {
    return await fn();
  } catch (err) {
    failures[name] = (err as Error).message;
    log(`${name}: not measured: ${(err as Error).message}`);
    return undefined;
  }
}

try {
  for (const name of Object.values(ns)) await bench.ensureNamespace(name);
  log(`machine load average ${load0.map((l) => l.toFixed(2)).join(' ')}`);
  const first: Subject[] = [];
  if (wanted.has('echo'))
    first.push(...[await attempt('echo', startEcho)].filter((s) => s !== undefined));
  if (wanted.has('none')) first.push(subject('none', ns.none));
  const native = wanted.has('native') ? await attempt('native', startNative) : undefined;
  if (native) first.push(native);
  const wantsRollcall = wanted.has('rollcall') || wanted.has('rollcall-3');
  if (wantsRollcall) await attempt('rollcall', startRollcallSide);
  if (wanted.has('rollcall') && !failures.rollcall) {
    const s = await attempt('rollcall', () => rollcallAt(1));
    if (s) first.push(s);
    const direct = s && wanted.has('direct') ? await attempt('direct', directToServer) : undefined;
    if (direct) first.push(...direct);
  }
  await block(first);
  measured.push(...first);

  // Three replicas: the apiserver spreads its connections over them. Native runs again beside
  // it, so that this pair is compared under the same conditions.
  if (wanted.has('rollcall-3') && !failures.rollcall) {
    const s = await attempt('rollcall-3', () => rollcallAt(3));
    if (s) {
      const again = native ? [subject('native-again', ns.native)] : [];
      await block([...again, s]);
      measured.push(...again, s);
    }
  }
  if (curveRates.length && native && !failures.rollcall) {
    await attempt('curve', startRestricted);
    for (const replicas of [1, 3])
      if (!failures.curve) await attempt('curve', () => curveAt(replicas));
  }
  report();
} finally {
  await bench.teardown();
}

function report(): void {
  const machine = machineInfo(load0);
  const figures = Object.fromEntries(measured.map((s) => [s.name, summarize(rate, s.runs)]));
  const fmt = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : '-');
  const rows = [
    ['subject', 'rate/s', 'sent', 'ok', 'errors', 'p50', 'p90', 'p99', 'max', 'lag p99', 'conns'],
    ...Object.entries(figures).map(([name, r]) => [
      name,
      String(r.rate),
      String(r.sent),
      String(r.ok),
      String(errorCount(r)),
      fmt(r.latency.p50),
      fmt(r.latency.p90),
      fmt(r.latency.p99),
      fmt(r.latency.max),
      fmt(r.lag.p99),
      String(r.connections),
    ]),
  ];
  console.log(
    `\nrollcall admission bench (${quick ? 'quick' : 'full'}), ${new Date().toISOString()}: ${seconds} s per subject in ${roundSeconds} s rounds (each after ${leadInSeconds} s lead-in; ${warmupSeconds} s warm-up per subject), open loop, dry-run Pod creates; ms from the scheduled send`,
  );
  console.log(JSON.stringify(machine));
  console.log(
    'echo: the generator against an HTTPS echo server (its own floor); none: the apiserver, no policy matches (its floor); native: the ValidatingAdmissionPolicy; rollcall: the webhook, 1 policy-server replica; policy server direct / via proxy: AdmissionReviews from the generator to the replica, without the apiserver (2 writes: headers and body in separate TLS records); rollcall-3: 3 replicas, beside native-again',
  );
  printColumns(rows);
  for (const [name, r] of Object.entries(figures))
    if (r.samples.length)
      console.log(`${name} errors: ${JSON.stringify(r.errors)}; first: ${r.samples[0]}`);
  for (const [name, message] of Object.entries(failures))
    console.log(`${name}: not measured: ${message}`);

  const goals: string[] = [];
  for (const [mine, theirs] of [
    ['rollcall', 'native'],
    ['rollcall-3', 'native-again'],
  ] as const) {
    const a = figures[mine];
    const b = figures[theirs];
    if (!a || !b) continue;
    const over = a.latency.p99 - (b.latency.p99 + goalMarginMs);
    goals.push(
      `goal: ${mine} p99 ≤ ${theirs} p99 + ${goalMarginMs} ms at ${rate}/s: ${over <= 0 ? 'met' : `missed by ${over.toFixed(1)} ms`} (${fmt(a.latency.p99)} vs ${fmt(b.latency.p99)} ms)`,
    );
  }
  printCurve();
  goals.push(...curveGoals());
  for (const g of goals) console.log(g);

  console.log('\nwhere the time goes (means over the measured rounds, from /metrics):');
  const breakdown: Record<string, unknown> = {};
  for (const s of measured) {
    const r = figures[s.name]!;
    breakdown[s.name] = s.breakdown.summary();
    console.log(`${s.name}: client mean ${r.latency.mean.toFixed(2)} ms; ${s.breakdown.line()}`);
  }

  writeResults('admission', quick, {
    rate,
    seconds,
    roundSeconds,
    leadInSeconds,
    warmupSeconds,
    machine,
    figures,
    goals,
    failures,
    breakdown,
    curve,
  });
}

/** The curve as a table, then the rate at which each subject's p99 passes the limit. */
function printCurve(): void {
  if (!curve.length) return;
  console.log(
    `\nthe curve: native beside rollcall at 1 and 3 replicas; six: the six checks (1 Policy), restricted: the library's Pod Security restricted set (${restrictedNames.length} Policies); ${curveSeconds} s per point in ${roundSeconds} s rounds after ${curveWarmupSeconds} s warm-up`,
  );
  const fmt = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : '-');
  printColumns([
    ['set', 'pair', 'subject', 'rate/s', 'sent', 'ok', 'errors', 'p50', 'p99', 'max', 'lag p99'],
    ...curve.map(({ set, replicas, subject, rate: r, figures: f }) => [
      set,
      `${replicas} replica${replicas === 1 ? '' : 's'}`,
      subject,
      String(r),
      String(f.sent),
      String(f.ok),
      String(errorCount(f)),
      fmt(f.latency.p50),
      fmt(f.latency.p99),
      fmt(f.latency.max),
      fmt(f.lag.p99),
    ]),
  ]);
  for (const set of policySets)
    for (const replicas of [1, 3])
      for (const name of ['native', `rollcall-${replicas}`]) {
        const points = curve.filter(
          (p) => p.set === set && p.replicas === replicas && p.subject === name,
        );
        if (!points.length) continue;
        const over = points.find((p) => !holds(p.figures));
        const where = over
          ? `at ${over.rate}/s (p99 ${fmt(over.figures.latency.p99)} ms, ${errorCount(over.figures)} errors)`
          : `not up to ${points.at(-1)!.rate}/s`;
        console.log(
          `${set}, ${name}${name === 'native' ? ` (beside ${replicas} replica${replicas === 1 ? '' : 's'})` : ''}: p99 passes ${curveLimitMs} ms or errors begin ${where}`,
        );
      }
}

function errorCount(f: LoadResult): number {
  return Object.values(f.errors).reduce((a, b) => a + b, 0);
}

/** Below saturation: p99 within the limit and every request answered. */
function holds(f: LoadResult): boolean {
  return f.latency.p99 <= curveLimitMs && errorCount(f) === 0;
}

/** Issue 39's goal: wherever native holds, rollcall-3 within native p99 + 5 ms and no errors. */
function curveGoals(): string[] {
  const goals: string[] = [];
  for (const set of policySets)
    for (const r of curveRates) {
      const at = (name: string) =>
        curve.find((p) => p.set === set && p.replicas === 3 && p.rate === r && p.subject === name);
      const [mine, theirs] = [at('rollcall-3'), at('native')];
      if (!theirs || !holds(theirs.figures)) continue;
      if (!mine) {
        goals.push(`goal: ${set}, rollcall-3 at ${r}/s: missed (saturated at a lower rate)`);
        continue;
      }
      const over = mine.figures.latency.p99 - (theirs.figures.latency.p99 + goalMarginMs);
      const errors = errorCount(mine.figures);
      goals.push(
        `goal: ${set}, rollcall-3 p99 ≤ native p99 + ${goalMarginMs} ms and no errors at ${r}/s: ${over <= 0 && errors === 0 ? 'met' : `missed${over > 0 ? ` by ${over.toFixed(1)} ms` : ''}${errors ? `, ${errors} errors` : ''}`} (${mine.figures.latency.p99.toFixed(1)} vs ${theirs.figures.latency.p99.toFixed(1)} ms)`,
      );
    }
  return goals;
}
