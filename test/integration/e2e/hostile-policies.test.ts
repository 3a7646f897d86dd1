// Hostile policies against REAL policy servers, end to end (issue 34, acceptance item 1): one
// PolicyServer of rollcall's own image with 3 replicas (real `rollcall policy-server`
// processes run by the local cluster's node agent), a well-behaved canary policy on it, then
// the six value-doubling policies of the issue applied one after the other on the same
// server, and one that loads but is expensive at runtime. Each hostile policy is either
// refused at load by the static cost estimate (Stalled, with the estimate and the budget in
// its message) or answered by the policy server per its failurePolicy within its
// timeoutSeconds (never by the apiserver's own timeout). Meanwhile, the canary is asked
// every 150 ms, through the apiserver and straight at each replica, and every answer must be
// right and take under 1 s; the replicas' processes are watched: none may exit, restart or
// turn unready.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { CoreV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import { POLICY_SERVER_LABEL } from '../../../api/constants.ts';
import { testKubeConfig, waitGone } from '../../support/kube.ts';
import { Processes } from '../../support/driver.ts';
import { prepareIdentities, runAsAccounts, type Identities } from '../../support/identities.ts';
import { caseConfigMap, casePolicy } from '../../support/manifests.ts';
import {
  POLICIES_PATH,
  admissionReview,
  apply,
  callReplica,
  condition,
  dryRunCreate,
  readNodeAgent,
  readyMessage,
  readyOnAll,
  replicaProcesses,
  replicaTls,
  serverPods,
  stalledOnAll,
  startPolicyServer,
  untilVerdict,
  waitPolicy,
  webhookOf,
  type Obj,
  type ReplicaProcess,
  type ReplicaTls,
  type Verdict,
} from '../../support/scenario.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-hostile'; // rollcall's own: the policy-server pods run here
const target = 'hostile-target'; // where the test's ConfigMaps are judged
const SERVER = 'hostile';
const configmaps = `/api/v1/namespaces/${target}/configmaps`;

/** The canary's bound on every answer, through the apiserver or from a replica. */
const CANARY_MS = 1000;
const SAMPLE_EVERY_MS = 150;
const HOSTILE_TIMEOUT_S = 5;
/** How long the runtime-expensive policy is asked back to back. */
const SUSTAIN_MS = 6000;

// ---------------------------------------------------------------- manifests

/** A Policy on the shared server that judges the ConfigMaps of its case in `target`. */
const policy = (name: string, code: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  casePolicy(name, SERVER, target, { ...code, ...extra }) satisfies Obj;
const review = (cm: Obj) => admissionReview(cm, { resource: 'configmaps', namespace: target });

const CANARY_MESSAGE = 'canary: a ConfigMap labelled bad=true is refused';
const canary = policy(
  'canary',
  {
    validations: [
      {
        expression: "!('bad' in object.metadata.labels) || object.metadata.labels['bad'] != 'true'",
        message: CANARY_MESSAGE,
      },
    ],
  },
  { failurePolicy: 'Fail', timeoutSeconds: 5 },
);
const canaryConfigMap = (bad: boolean) =>
  caseConfigMap('canary', { labels: bad ? { bad: 'true' } : {} });

/** v0 = `first`, vN = `step("variables.v(N-1)")`, up to v`last`. */
const chain = (last: number, first: string, step: (previous: string) => string) =>
  Array.from({ length: last + 1 }, (_, i) => ({
    name: `v${i}`,
    expression: i === 0 ? first : step(`variables.v${i - 1}`),
  }));

const DOUBLINGS = 30;
const LAST = `variables.v${DOUBLINGS}`;
const listChain = chain(DOUBLINGS, '[object.metadata.name]', (v) => `${v} + ${v}`);

/** `cel.bind(b0, first, cel.bind(b1, b0 + b0, … size(bN) > 0))`: the chain in one expression. */
function bindChain(doublings: number): string {
  let expression = `size(b${doublings}) > 0`;
  for (let i = doublings; i >= 1; i--)
    expression = `cel.bind(b${i}, b${i - 1} + b${i - 1}, ${expression})`;
  return `cel.bind(b0, [object.metadata.name], ${expression})`;
}

const hostileExtra = { failurePolicy: 'Fail', timeoutSeconds: HOSTILE_TIMEOUT_S };
const finished = (what: string) => `${what} finished`; // a finished evaluation allows anyway

/** The six variants of issue 34 (and one more), in the order they are applied. */
const HOSTILE: { name: string; what: string; manifest: Obj }[] = [
  {
    name: 'list-chain',
    what: '31 variables doubling a list',
    manifest: policy(
      'list-chain',
      {
        variables: listChain,
        validations: [{ expression: `size(${LAST}) > 0`, message: finished('list chain') }],
      },
      hostileExtra,
    ),
  },
  {
    name: 'match-chain',
    what: 'the list chain read by a matchCondition',
    manifest: policy(
      'match-chain',
      {
        variables: listChain,
        matchConditions: [{ name: 'doubled', expression: `size(${LAST}) > 0` }],
        validations: [{ expression: "object.metadata.name != ''", message: finished('match') }],
      },
      hostileExtra,
    ),
  },
  {
    name: 'bind-chain',
    what: `a cel.bind chain of ${DOUBLINGS} doublings in one expression`,
    manifest: policy(
      'bind-chain',
      { validations: [{ expression: bindChain(DOUBLINGS), message: finished('bind chain') }] },
      hostileExtra,
    ),
  },
  {
    name: 'string-chain',
    what: '31 variables doubling a string',
    manifest: policy(
      'string-chain',
      {
        variables: chain(DOUBLINGS, 'object.metadata.name', (v) => `${v} + ${v}`),
        validations: [{ expression: `size(${LAST}) > 0`, message: finished('string chain') }],
      },
      hostileExtra,
    ),
  },
  {
    name: 'replace-chain',
    what: "31 variables doubling the a's of a string with replace",
    manifest: policy(
      'replace-chain',
      {
        variables: chain(DOUBLINGS, "object.metadata.name + 'a'", (v) => `${v}.replace('a', 'aa')`),
        validations: [{ expression: `size(${LAST}) > 0`, message: finished('replace chain') }],
      },
      hostileExtra,
    ),
  },
  {
    name: 'join-chain',
    what: '31 variables doubling a string with join',
    manifest: policy(
      'join-chain',
      {
        variables: chain(DOUBLINGS, 'object.metadata.name', (v) => `[${v}, ${v}].join('')`),
        validations: [{ expression: `size(${LAST}) > 0`, message: finished('join chain') }],
      },
      hostileExtra,
    ),
  },
  // Beyond the six: the chain written in the matchCondition itself, so that the estimate of a
  // matchCondition is what refuses it (above, the variables it reads are refused first).
  {
    name: 'bind-match',
    what: `a cel.bind chain of ${DOUBLINGS} doublings in a matchCondition`,
    manifest: policy(
      'bind-match',
      {
        matchConditions: [{ name: 'doubled', expression: bindChain(DOUBLINGS) }],
        validations: [{ expression: "object.metadata.name != ''", message: finished('match') }],
      },
      hostileExtra,
    ),
  },
];

// Loads (its static cost is small at the smallest request), but three nested loops over a
// ConfigMap's 300 keys are 2.7·10^7 iterations, each building a string: past any budget.
const KEYS = 300;
const RUNTIME = 'nested-loops';
const nestedLoops = policy(
  RUNTIME,
  {
    validations: [
      {
        expression:
          "!object.data.exists(a, object.data.exists(b, object.data.exists(c, a + b + c == '')))",
        message: finished('nested loops'),
      },
    ],
  },
  hostileExtra,
);
const wideData = Object.fromEntries(
  Array.from({ length: KEYS }, (_, i) => [`key-${String(i).padStart(3, '0')}`, 'v']),
);

// ---------------------------------------------------------------- watching the replicas

/**
 * Watches the server's replicas for the whole run: the node agent's pod table every 100 ms
 * (a process that exits disappears from it, and its pod is replaced under another name; an
 * unready one reads `ready: false`), and the pods' Ready condition through the apiserver
 * every second. Records every departure from the starting set.
 */
class ReplicaGuard {
  readonly problems: { at: number; what: string }[] = [];
  readonly #start: Map<string, number>;
  readonly #seen = new Set<string>();
  #timers: NodeJS.Timeout[] = [];
  #listing = false;

  constructor(start: ReplicaProcess[]) {
    this.#start = new Map(start.map((r) => [r.pod, r.pid]));
  }

  start(): void {
    this.#timers = [
      setInterval(() => this.#readAgent(), 100),
      setInterval(() => void this.#listPods(), 1000),
    ];
  }

  stop(): void {
    this.#timers.forEach(clearInterval);
  }

  #record(what: string): void {
    if (this.#seen.has(what)) return;
    this.#seen.add(what);
    this.problems.push({ at: Date.now(), what });
  }

  #readAgent(): void {
    let pods: ReturnType<typeof readNodeAgent>;
    try {
      pods = readNodeAgent();
    } catch {
      return; // read in the middle of a rewrite
    }
    for (const [pod, pid] of this.#start) {
      const now = pods[pod];
      if (!now) this.#record(`node agent: pod ${pod} has no process any more (pid ${pid})`);
      else if (now.pid !== pid) this.#record(`node agent: pod ${pod} pid ${pid} → ${now.pid}`);
      else if (now.ready === false) this.#record(`node agent: pod ${pod} not ready`);
    }
    for (const [pod, p] of Object.entries(pods))
      if (p.namespace === namespace && !this.#start.has(pod))
        this.#record(`node agent: a new pod ${pod} (pid ${p.pid})`);
  }

  async #listPods(): Promise<void> {
    if (this.#listing) return;
    this.#listing = true;
    try {
      const pods = await serverPods(kc, namespace, SERVER);
      for (const p of pods) {
        if (!this.#start.has(p.name)) this.#record(`apiserver: a new pod ${p.name}`);
        else if (p.deleting) this.#record(`apiserver: pod ${p.name} is being deleted`);
        else if (!p.ready) this.#record(`apiserver: pod ${p.name} is not Ready`);
      }
    } catch {
      // the apiserver busy: the next round looks again
    } finally {
      this.#listing = false;
    }
  }
}

// ---------------------------------------------------------------- sampling the canary

interface Sample {
  at: number;
  phase: string;
  via: string;
  bad: boolean;
  ms: number;
  /** Undefined when the answer was right and in time. */
  problem?: string;
}

/**
 * Asks the canary every SAMPLE_EVERY_MS, without waiting for earlier answers (a stuck answer
 * must not hide the ones after it): a dry-run create through the apiserver (bad=true and not,
 * in turn) and one straight at a replica (each replica in turn, bad and good).
 */
class CanarySampler {
  readonly samples: Sample[] = [];
  phase = 'start';
  readonly #replicas: ReplicaProcess[];
  readonly #tls: ReplicaTls;
  readonly #pending = new Set<Promise<void>>();
  #timer: NodeJS.Timeout | undefined;
  #n = 0;

  constructor(replicas: ReplicaProcess[], tls: ReplicaTls) {
    this.#replicas = replicas;
    this.#tls = tls;
  }

  start(): void {
    this.#timer = setInterval(() => this.#tick(), SAMPLE_EVERY_MS);
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await Promise.all(this.#pending);
  }

  /** The samples since `from` (ms since the epoch). */
  since(from: number): Sample[] {
    return this.samples.filter((s) => s.at >= from);
  }

  #tick(): void {
    const n = this.#n++;
    const replica = this.#replicas[n % this.#replicas.length]!;
    this.#track(`apiserver`, n % 2 === 0, (cm) => dryRunCreate(kc, configmaps, cm));
    this.#track(`replica ${replica.pod}`, n % 2 === 1, (cm) =>
      callReplica(replica.port, '/validate/canary/1', review(cm), this.#tls, 10_000),
    );
  }

  #track(via: string, bad: boolean, ask: (cm: Obj) => Promise<Verdict>): void {
    const at = Date.now();
    const phase = this.phase;
    const started = performance.now();
    const p = ask(canaryConfigMap(bad))
      .then(
        (v) => ({ ms: v.ms, problem: canaryProblem(bad, v) }),
        (err: unknown) => ({ ms: performance.now() - started, problem: `error: ${String(err)}` }),
      )
      .then(({ ms, problem }) => {
        const late = ms > CANARY_MS ? `answered in ${ms.toFixed(0)} ms` : undefined;
        const all = [problem, late].filter(Boolean).join('; ');
        this.samples.push({ at, phase, via, bad, ms, ...(all ? { problem: all } : {}) });
      })
      .finally(() => this.#pending.delete(p));
    this.#pending.add(p);
  }
}

/** What is wrong with a canary verdict, if anything. */
function canaryProblem(bad: boolean, v: Verdict): string | undefined {
  if (bad && v.allowed) return 'a bad=true ConfigMap was allowed';
  if (bad && !v.message.includes(CANARY_MESSAGE))
    return `denied, but not with the canary's message: ${v.message.slice(0, 300)}`;
  if (!bad && !v.allowed) return `a good ConfigMap was denied: ${v.message.slice(0, 300)}`;
  return undefined;
}

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
};
function latencySummary(samples: Sample[]): string {
  const groups = new Map<string, number[]>();
  for (const s of samples) {
    const key = s.via.startsWith('replica') ? 'replicas' : s.via;
    groups.set(key, [...(groups.get(key) ?? []), s.ms]);
  }
  return [...groups]
    .map(
      ([via, ms]) =>
        `${via}: ${ms.length} answers, p50 ${percentile(ms, 50).toFixed(0)} ms, p99 ${percentile(ms, 99).toFixed(0)} ms, max ${Math.max(...ms).toFixed(0)} ms`,
    )
    .join('; ');
}
const canarySummary = (samples: Sample[]) =>
  `${latencySummary(samples)}; ${samples.filter((s) => s.problem).length} wrong or slow`;

// ---------------------------------------------------------------- helpers

const isReady = readyOnAll(3);
const isStalledEverywhere = stalledOnAll(3);

/** The answer the policy server gives for a failed evaluation (verdict.ts), not the apiserver's. */
const byPolicyServer = (name: string) =>
  new RegExp(`policy ${name} generation \\d+ (failed|timed out|exceeded)`);
const APISERVER_TIMEOUT = /context deadline exceeded|failed calling webhook/;

/**
 * Sends a ConfigMap `name` judges through the apiserver (once its webhook is live) and
 * straight at every replica, all timed; a policy with failurePolicy Fail must deny each.
 */
async function attack(
  name: string,
  replicas: ReplicaProcess[],
  tls: ReplicaTls,
  data: Record<string, string> = {},
) {
  const budgetMs = HOSTILE_TIMEOUT_S * 1000;
  const viaApiserver = await untilVerdict(
    kc,
    configmaps,
    caseConfigMap(name, { data }),
    (v) => !v.allowed,
    30_000,
  );
  const direct = await Promise.all(replicas.map((r) => askReplica(name, r, tls, data)));
  return { budgetMs, viaApiserver, direct };
}

/** One request `name` judges, straight at replica `r`, timed; an error reads as a wrong answer. */
async function askReplica(
  name: string,
  r: ReplicaProcess,
  tls: ReplicaTls,
  data: Record<string, string>,
): Promise<{ pod: string; allowed: boolean; message: string; ms: number }> {
  const started = performance.now();
  try {
    const v = await callReplica(
      r.port,
      `/validate/${name}/1`,
      review(caseConfigMap(name, { data })),
      tls,
      HOSTILE_TIMEOUT_S * 1000 + 5_000,
    );
    return { pod: r.pod, ...v };
  } catch (err) {
    const ms = performance.now() - started;
    return { pod: r.pod, allowed: true, message: `error: ${String(err)}`, ms };
  }
}

/** Asserts an attack's answers: denied by the policy server, within timeoutSeconds. */
function assertAnsweredByFailurePolicy(
  name: string,
  { budgetMs, viaApiserver, direct }: Awaited<ReturnType<typeof attack>>,
  message: RegExp,
) {
  assert.doesNotMatch(viaApiserver.message, APISERVER_TIMEOUT, `${name}: the apiserver timed out`);
  assert.match(viaApiserver.message, byPolicyServer(name), `${name}: through the apiserver`);
  assert.match(viaApiserver.message, message, `${name}: through the apiserver`);
  // The apiserver's own work on top of the webhook's answer: a little slack.
  assert.ok(
    viaApiserver.ms < budgetMs + 500,
    `${name}: the apiserver answered in ${viaApiserver.ms.toFixed(0)} ms (timeoutSeconds ${HOSTILE_TIMEOUT_S})`,
  );
  for (const d of direct) {
    assert.equal(d.allowed, false, `${name}: replica ${d.pod} denies (${d.message})`);
    assert.match(d.message, byPolicyServer(name), `${name}: replica ${d.pod}`);
    assert.match(d.message, message, `${name}: replica ${d.pod}`);
    assert.ok(d.ms < budgetMs, `${name}: replica ${d.pod} answered in ${d.ms.toFixed(0)} ms`);
  }
}

// ---------------------------------------------------------------- the run

describe('hostile policies beside a canary on one server with 3 real replicas', () => {
  const procs = new Processes(namespace);
  let ids: Identities | undefined;
  let tls: ReplicaTls;
  let replicas: ReplicaProcess[];
  let guard: ReplicaGuard;
  let sampler: CanarySampler;
  let sampledFrom = 0;
  const stalledMessages: string[] = [];
  /** A moment as seconds since the canary's sampling began. */
  const since = (at: number) => `+${((at - sampledFrom) / 1000).toFixed(1)} s`;

  before(async () => {
    const started = Date.now();
    await procs.prepare(target);
    ids = await prepareIdentities(namespace);
    runAsAccounts(procs, ids);
    await startPolicyServer(kc, SERVER, 3);
    await apply(canary);
    await waitPolicy(kc, 'canary', isReady, { timeoutMs: 90_000 });
    // The apiserver picks the webhook up a moment after it is written.
    await untilVerdict(kc, configmaps, canaryConfigMap(true), (v) => !v.allowed);
    replicas = await replicaProcesses(kc, namespace, SERVER, 3);
    tls = await replicaTls(kc, namespace, SERVER);
    guard = new ReplicaGuard(replicas);
    guard.start();
    sampler = new CanarySampler(replicas, tls);
    sampler.start();
    sampledFrom = Date.now();
    console.error(`[hostile] server and canary Ready 3/3 in ${Date.now() - started} ms`);
  });

  after(async () => {
    guard?.stop();
    await sampler?.stop();
    await procs.cleanUp();
    ids?.remove();
  });

  test('the canary is Ready 3/3 and every replica denies a bad=true ConfigMap with its message and allows another', async () => {
    sampler.phase = 'canary';
    for (const r of replicas) {
      const bad = await callReplica(
        r.port,
        '/validate/canary/1',
        review(canaryConfigMap(true)),
        tls,
      );
      assert.equal(canaryProblem(true, bad), undefined, `replica ${r.pod}`);
      const good = await callReplica(
        r.port,
        '/validate/canary/1',
        review(canaryConfigMap(false)),
        tls,
      );
      assert.equal(canaryProblem(false, good), undefined, `replica ${r.pod}`);
    }
    const denied = await dryRunCreate(kc, configmaps, canaryConfigMap(true));
    assert.equal(canaryProblem(true, denied), undefined);
    assert.match(denied.message, /denied the request/);
  });

  for (const { name, what, manifest } of HOSTILE) {
    test(`${what} (${name}) is refused at load with its estimated cost and the budget, or answered by its failurePolicy within its timeout`, async (t) => {
      sampler.phase = name;
      const appliedAt = Date.now();
      // Whatever fails, say how the canary fared meanwhile.
      t.after(() => t.diagnostic(`canary meanwhile: ${canarySummary(sampler.since(appliedAt))}`));
      await apply(manifest);
      const settled = await waitPolicy(kc, name, (p) => isStalledEverywhere(p) || isReady(p), {
        timeoutMs: 45_000,
      });
      const from = Date.now();
      if (isStalledEverywhere(settled)) {
        const message = readyMessage(settled);
        stalledMessages.push(`${name}: ${message}`);
        t.diagnostic(`Stalled ${Date.now() - appliedAt} ms after apply: ${message}`);
        assert.equal(condition(settled, 'Ready')?.status, 'False');
        assert.match(message, /estimated cost/);
        assert.match(message, /exceeds the per-request budget/);
        for (const f of settled.status?.failures ?? []) {
          assert.match(f.message, /estimated cost .* exceeds the per-request budget/, f.pod);
        }
        assert.equal(await webhookOf(kc, name), undefined, 'no webhook is registered');
        // Nothing judges what it would have matched.
        const admitted = await dryRunCreate(kc, configmaps, caseConfigMap(name));
        assert.ok(admitted.allowed, `admitted: ${JSON.stringify(admitted)}`);
      } else {
        t.diagnostic(`it LOADED (Ready 3/3 ${Date.now() - appliedAt} ms after apply)`);
        const answers = await attack(name, replicas, tls);
        t.diagnostic(
          `through the apiserver in ${answers.viaApiserver.ms.toFixed(0)} ms: ${answers.viaApiserver.message}`,
        );
        for (const d of answers.direct)
          t.diagnostic(`replica ${d.pod} in ${d.ms.toFixed(0)} ms: ${d.message}`);
        assertAnsweredByFailurePolicy(name, answers, /./);
      }
      // Let the canary be asked a few more times with this policy in place.
      await sleep(Math.max(0, 1000 - (Date.now() - from)));
    });
  }

  test(`a policy that loads but loops over ${KEYS}³ keys at runtime is denied by the policy server for its cost budget or deadline, within its timeout`, async (t) => {
    sampler.phase = RUNTIME;
    const appliedAt = Date.now();
    t.after(() => t.diagnostic(`canary meanwhile: ${canarySummary(sampler.since(appliedAt))}`));
    await apply(nestedLoops);
    const ready = await waitPolicy(kc, RUNTIME, (p) => isReady(p) || isStalledEverywhere(p), {
      timeoutMs: 45_000,
    });
    assert.ok(isReady(ready), `it loads: ${readyMessage(ready)}`);
    const answers = await attack(RUNTIME, replicas, tls, wideData);
    t.diagnostic(
      `through the apiserver in ${answers.viaApiserver.ms.toFixed(0)} ms: ${answers.viaApiserver.message}`,
    );
    for (const d of answers.direct)
      t.diagnostic(`replica ${d.pod} in ${d.ms.toFixed(0)} ms: ${d.message}`);
    assertAnsweredByFailurePolicy(RUNTIME, answers, /runtime cost budget|deadline|timed out/);

    // Then a sustained attack: back to back, one request in flight at each replica and one
    // through the apiserver, while the canary is asked as before.
    const until = Date.now() + SUSTAIN_MS;
    const answered: { via: string; allowed: boolean; message: string; ms: number }[] = [];
    await Promise.all([
      ...replicas.map(async (r) => {
        while (Date.now() < until) {
          const d = await askReplica(RUNTIME, r, tls, wideData);
          answered.push({ via: `replica ${d.pod}`, ...d });
        }
      }),
      (async () => {
        while (Date.now() < until) {
          const v = await dryRunCreate(kc, configmaps, caseConfigMap(RUNTIME, { data: wideData }));
          answered.push({ via: 'apiserver', ...v });
        }
      })(),
    ]);
    const slowest = Math.max(...answered.map((a) => a.ms));
    t.diagnostic(
      `sustained for ${SUSTAIN_MS} ms: ${answered.length} hostile requests answered, the slowest in ${slowest.toFixed(0)} ms`,
    );
    const budgetMs = HOSTILE_TIMEOUT_S * 1000;
    const wrong = answered.filter(
      (a) =>
        a.allowed ||
        !byPolicyServer(RUNTIME).test(a.message) ||
        a.ms >= budgetMs + (a.via === 'apiserver' ? 500 : 0),
    );
    assert.deepEqual(
      wrong.map((a) => `${a.via} in ${a.ms.toFixed(0)} ms: ${a.allowed ? 'allowed' : a.message}`),
      [],
      'every hostile request was denied by the policy server within its timeout',
    );
  });

  test('with the hostile policies deleted, the canary still answers right within 1 s', async (t) => {
    sampler.phase = 'after';
    const custom = kc.makeApiClient(CustomObjectsApi);
    const names = [...HOSTILE.map((h) => h.name), RUNTIME];
    await Promise.all(
      names.map((name) =>
        custom
          .deleteClusterCustomObject({
            group: 'rollcall.dev',
            version: 'v1alpha1',
            plural: 'policies',
            name,
          })
          .catch(() => {}),
      ),
    );
    await Promise.all(names.map((name) => waitGone(kc, POLICIES_PATH, name)));
    const from = Date.now();
    for (let i = 0; i < 4; i++) {
      for (const bad of [true, false]) {
        const v = await dryRunCreate(kc, configmaps, canaryConfigMap(bad));
        assert.equal(canaryProblem(bad, v), undefined);
        assert.ok(v.ms < CANARY_MS, `through the apiserver in ${v.ms.toFixed(0)} ms`);
        for (const r of replicas) {
          const d = await callReplica(
            r.port,
            '/validate/canary/1',
            review(canaryConfigMap(bad)),
            tls,
          );
          assert.equal(canaryProblem(bad, d), undefined, `replica ${r.pod}`);
          assert.ok(d.ms < CANARY_MS, `replica ${r.pod} in ${d.ms.toFixed(0)} ms`);
        }
      }
    }
    await sleep(1000);
    t.diagnostic(`canary after the deletion: ${canarySummary(sampler.since(from))}`);
  });

  test('throughout: no replica process exited, restarted or turned unready', async (t) => {
    guard.stop();
    for (const m of stalledMessages) t.diagnostic(`Stalled: ${m}`);
    const pods = await kc
      .makeApiClient(CoreV1Api)
      .listNamespacedPod({ namespace, labelSelector: `${POLICY_SERVER_LABEL}=${SERVER}` });
    const restarts = pods.items.map(
      (p) =>
        `${p.metadata?.name}: ${p.status?.containerStatuses?.map((c) => c.restartCount).join(',')}`,
    );
    const byPod = (a: { pod: string }, b: { pod: string }) => a.pod.localeCompare(b.pod);
    const now = (await serverPods(kc, namespace, SERVER))
      .map((p) => ({ pod: p.name, pid: p.process?.pid, ready: p.ready }))
      .sort(byPod);
    assert.deepEqual(
      guard.problems.map((p) => `${since(p.at)} ${p.what}`),
      [],
      'the replicas stayed up and Ready',
    );
    assert.deepEqual(
      now,
      replicas.map((r) => ({ pod: r.pod, pid: r.pid, ready: true })).sort(byPod),
      'the same pods with the same processes, Ready',
    );
    assert.ok(
      pods.items.every((p) => p.status?.containerStatuses?.every((c) => c.restartCount === 0)),
      `no container restarted: ${restarts.join('; ')}`,
    );
  });

  test('throughout: every canary answer, through the apiserver and from each replica, was right and under 1 s', async (t) => {
    await sampler.stop();
    const samples = sampler.samples;
    t.diagnostic(
      `canary over ${((Date.now() - sampledFrom) / 1000).toFixed(0)} s: ${canarySummary(samples)}`,
    );
    assert.ok(samples.length > 100, `the canary was asked ${samples.length} times`);
    for (const via of ['apiserver', ...replicas.map((r) => `replica ${r.pod}`)])
      for (const bad of [true, false])
        assert.ok(
          samples.some((s) => s.via === via && s.bad === bad),
          `sampled ${via} with bad=${bad}`,
        );
    const wrong = samples.filter((s) => s.problem !== undefined);
    assert.deepEqual(
      wrong
        .slice(0, 15)
        .map((s) => `${since(s.at)} [${s.phase}] ${s.via} bad=${s.bad}: ${s.problem}`),
      [],
      `${wrong.length} of ${samples.length} canary answers were wrong or slow`,
    );
  });
});
