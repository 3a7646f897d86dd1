// rollcall with REAL policy servers, end to end: a PolicyServer of rollcall's own image runs
// 3 replicas, each a real `rollcall policy-server` process (the local cluster's node agent
// runs them and routes the apiserver's webhook calls to them). rollcall registers webhooks
// by Service, as in a real cluster; every request below goes through the apiserver or
// straight to one replica. Issue 14's acceptance items 1-7.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import {
  CustomObjectsApi,
  type KubernetesObject,
  type V1Pod,
  type V1ValidatingWebhookConfiguration,
} from '@kubernetes/client-node';
import { POLICY_SERVER_LABEL, REPORT_ANNOTATION } from '../../../api/constants.ts';
import { readReplicaReport } from '../../../api/report.ts';
import { testKubeConfig, waitGone, watchUntil } from '../../support/kube.ts';
import { Processes } from '../../support/driver.ts';
import { prepareIdentities, runAsAccounts, type Identities } from '../../support/identities.ts';
import { caseConfigMap, casePolicy } from '../../support/manifests.ts';
import {
  POLICIES_PATH,
  WEBHOOKS_PATH,
  admissionReview,
  apply,
  callReplica,
  condition,
  dryRunCreate,
  isCurrent,
  isTrue,
  kubectlAsync,
  listVersion,
  readNodeAgent,
  readyMessage,
  readyOnAll,
  readyReplicas,
  replicaProcesses,
  replicaTls,
  stalledOnAll,
  startPolicyServer,
  untilVerdict,
  waitPolicy,
  webhookOf,
  type Obj,
  type PolicyObject,
  type ReplicaTls,
} from '../../support/scenario.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-rps'; // rollcall's own: the policy-server pods run here
const target = 'rps-target'; // where the test's ConfigMaps are judged
const SERVER = 'rps';
const configmaps = `/api/v1/namespaces/${target}/configmaps`;
const podsPath = `/api/v1/namespaces/${namespace}/pods`;

// ---------------------------------------------------------------- manifests

const OWNER_RULE = "'owner' in object.metadata.labels";
const goodCode = (message: string) => ({ validations: [{ expression: OWNER_RULE, message }] });
/** A typo: `objekt` is not a variable; the type checker refuses it with its position. */
const typoCode = { validations: [{ expression: "'owner' in objekt.metadata.labels" }] };

/** A Policy on the shared server that judges the ConfigMaps of its case in `target`. */
const policy = (name: string, code: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  casePolicy(name, SERVER, target, { ...code, ...extra }) satisfies Obj;

/** A ConfigMap the policy `caseName` judges; `owner` makes it conform to OWNER_RULE. */
const configMap = (caseName: string, { owner = false, data = {} } = {}): Obj =>
  caseConfigMap(caseName, { labels: owner ? { owner: 'e2e' } : {}, data });
const review = (cm: Obj) => admissionReview(cm, { resource: 'configmaps', namespace: target });

// Expensive on the request it judges: 1000³ concatenations over the ConfigMap's keys, far
// beyond the runtime cost budget; cheap on the smallest request, so it loads (the same loops
// over 1000 settings items would be refused at load). If it ever finished it would allow.
const expensiveData = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`k${i}`, '']));
const expensiveCode = {
  validations: [
    {
      expression:
        "!object.data.exists(a, object.data.exists(b, object.data.exists(c, a + b + c == '')))",
      message: 'expensive policy finished',
    },
  ],
};
// Catastrophic backtracking in a backtracking engine: (a+)+$ against "aaa…a!". It does not
// match, so a finished evaluation allows.
const regexCode = {
  validations: [{ expression: "!object.data.value.matches('^(a+)+$')", message: 'regex matched' }],
};
const EVIL = `${'a'.repeat(32)}!`;
const TIMEOUT_S = 2;

// ---------------------------------------------------------------- source bundles

const BUNDLE = stringify(goodCode('configmaps need an owner label (from a source)'));
const BUNDLE_SHA = createHash('sha256').update(BUNDLE).digest('hex');
const WRONG_SHA = createHash('sha256').update('not the bundle').digest('hex');
const SLOW_MS = 3000;

function startBundleServer(): Promise<Server> {
  const server = createServer((req, res) => {
    const send = () => res.writeHead(200, { 'content-type': 'application/yaml' }).end(BUNDLE);
    if (req.url === '/bundle.yaml') send();
    else if (req.url === '/slow.yaml') setTimeout(send, SLOW_MS);
    else res.writeHead(404, { 'content-type': 'text/plain' }).end('no such bundle\n');
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

// ---------------------------------------------------------------- helpers

/** The Policy's webhook once it exists (rollcall writes it right after the status says Ready). */
const webhookWhen = (
  name: string,
  done: (w: V1ValidatingWebhookConfiguration) => boolean = () => true,
) =>
  watchUntil<V1ValidatingWebhookConfiguration>(kc, WEBHOOKS_PATH, done, {
    fieldSelector: `metadata.name=rollcall-${name}`,
    timeoutMs: 30_000,
  });

const isReady = readyOnAll(3);
const isStalledEverywhere = stalledOnAll(3);

/** Every live replica of the server: its pod name and loopback port. */
const replicas = () => replicaProcesses(kc, namespace, SERVER, 3);

/** The report entries for `policy` of every pod, as they change, until `done` holds on all pods. */
function watchReports(
  policyName: string,
  resourceVersion: string,
  done: (states: Map<string, string[]>) => boolean,
): Promise<Map<string, string[]>> {
  const states = new Map<string, string[]>();
  return watchUntil<V1Pod & KubernetesObject>(
    kc,
    podsPath,
    (pod) => {
      const name = pod.metadata?.name ?? '';
      const reading = readReplicaReport(pod.metadata?.annotations?.[REPORT_ANNOTATION]);
      const entry = reading.kind === 'valid' ? reading.report[policyName] : undefined;
      if (entry) {
        const seen = states.get(name) ?? [];
        const state = `${entry.state}${entry.message ? `: ${entry.message}` : ''}`;
        if (seen.at(-1) !== state) seen.push(state);
        states.set(name, seen);
      }
      return done(states);
    },
    { labelSelector: `${POLICY_SERVER_LABEL}=${SERVER}`, resourceVersion, timeoutMs: 90_000 },
  ).then(() => states);
}

/** A promise the test awaits later; a rejection before then is not unhandled. */
function later<T>(p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return p;
}

describe('rollcall with real policy servers (3 replicas of the default image)', () => {
  const procs = new Processes(namespace);
  let ids: Identities | undefined;
  let bundles: Server;
  let tls: ReplicaTls;
  let pidsAtStart: Record<string, number>;
  let slowReports: Promise<Map<string, string[]>>;
  let slowPolicySeen: string[] = [];
  let slowPolicy: Promise<{ policy: PolicyObject; at: number }>;
  let goodReadyAt: Promise<number>;
  let appliedAt = 0;

  before(async () => {
    const started = Date.now();
    await procs.prepare(target);
    bundles = await startBundleServer();
    // No --webhook-url: webhooks reference the policy server's Service, as in a real cluster.
    ids = await prepareIdentities(namespace);
    runAsAccounts(procs, ids);
    // The bundle server is plain HTTP on loopback: the PolicyServer has to allow it.
    await startPolicyServer(kc, SERVER, 3, {
      sources: { allowInsecureHTTP: true, allowPrivateDestinations: true },
    });
    const live = await replicas();
    pidsAtStart = Object.fromEntries(live.map((r) => [r.pod, r.pid]));
    tls = await replicaTls(kc, namespace, SERVER);

    // Every policy at once: they load in parallel, and each test then checks its own.
    const base = `http://127.0.0.1:${(bundles.address() as AddressInfo).port}`;
    const [podsVersion, policiesVersion] = await Promise.all([
      listVersion(kc, podsPath),
      listVersion(kc, POLICIES_PATH),
    ]);
    slowReports = later(
      watchReports('src-slow', podsVersion, (states) => {
        const finals = [...states.values()].map((s) => s.at(-1));
        return finals.length === 3 && finals.every((s) => s === 'Loaded');
      }),
    );
    slowPolicy = later(
      waitPolicy(kc, 'src-slow', isReady, {
        resourceVersion: policiesVersion,
        timeoutMs: 90_000,
        seen: (p) => slowPolicySeen.push(`${p.status?.summary}/${condition(p, 'Ready')?.reason}`),
      }).then((policy) => ({ policy, at: Date.now() })),
    );
    goodReadyAt = later(
      waitPolicy(kc, 'good', isReady, {
        resourceVersion: policiesVersion,
        timeoutMs: 90_000,
      }).then(() => Date.now()),
    );
    appliedAt = Date.now();
    await apply(
      policy('good', goodCode('configmaps need an owner label')),
      policy('typo', typoCode),
      policy('pinned', goodCode('pinned generation 1: configmaps need an owner label')),
      policy('again', goodCode('the first again: configmaps need an owner label')),
      policy('src-404', { source: { url: `${base}/missing.yaml`, sha256: BUNDLE_SHA } }),
      policy('src-digest', { source: { url: `${base}/bundle.yaml`, sha256: WRONG_SHA } }),
      policy('src-slow', { source: { url: `${base}/slow.yaml`, sha256: BUNDLE_SHA } }),
      policy('slow-fail', expensiveCode, {
        timeoutSeconds: TIMEOUT_S,
        failurePolicy: 'Fail',
      }),
      policy('slow-ignore', expensiveCode, {
        timeoutSeconds: TIMEOUT_S,
        failurePolicy: 'Ignore',
      }),
      policy('regex-fail', regexCode, { timeoutSeconds: TIMEOUT_S, failurePolicy: 'Fail' }),
      policy('monitor', goodCode('monitor: configmaps should have an owner label'), {
        mode: 'monitor',
      }),
    );
    console.error(`[rps] server Ready 3/3 and policies applied in ${Date.now() - started} ms`);
  });

  after(async () => {
    await procs.cleanUp();
    ids?.remove();
    await new Promise((r) => bundles?.close(r));
  });

  test('1. a good policy is READY 3/3; a violating request is denied with its message through the apiserver and by each replica; a conforming one is allowed', async (t) => {
    const ready = await waitPolicy(kc, 'good', isReady, { timeoutMs: 90_000 });
    assert.equal(ready.status?.readyReplicas, 3);
    assert.equal(condition(ready, 'Stalled'), undefined);
    assert.equal(ready.status?.servedGeneration, 1);
    const hook = await webhookWhen('good');
    assert.equal(hook?.webhooks?.[0]?.clientConfig.service?.path, '/validate/good/1');
    assert.equal(hook?.webhooks?.[0]?.clientConfig.url, undefined, 'webhooks go to the Service');
    t.diagnostic(`Ready 3/3 ${(await goodReadyAt) - appliedAt} ms after apply`);

    const denied = await untilVerdict(kc, configmaps, configMap('good'), (v) => !v.allowed);
    assert.match(denied.message, /configmaps need an owner label/);
    assert.match(denied.message, /denied the request/);
    const allowed = await dryRunCreate(kc, configmaps, configMap('good', { owner: true }));
    assert.ok(allowed.allowed, `a conforming ConfigMap is allowed: ${JSON.stringify(allowed)}`);

    const live = await replicas();
    for (const r of live) {
      const no = await callReplica(r.port, '/validate/good/1', review(configMap('good')), tls);
      assert.equal(no.allowed, false, `replica ${r.pod} denies`);
      assert.match(no.message, /configmaps need an owner label/, `replica ${r.pod}`);
      const yes = await callReplica(
        r.port,
        '/validate/good/1',
        review(configMap('good', { owner: true })),
        tls,
      );
      assert.equal(yes.allowed, true, `replica ${r.pod} allows a conforming one`);
    }
    t.diagnostic(
      `through the apiserver: denied in ${denied.ms.toFixed(0)} ms, allowed in ${allowed.ms.toFixed(0)} ms`,
    );
  });

  test('2. a policy with a CEL typo is Stalled with the position, no process restarted, and what it would match is admitted', async () => {
    const stalled = await waitPolicy(kc, 'typo', isStalledEverywhere, { timeoutMs: 60_000 });
    assert.equal(condition(stalled, 'Ready')?.status, 'False');
    assert.equal(condition(stalled, 'Stalled')?.reason, 'LoadFailed');
    const message = readyMessage(stalled);
    assert.match(message, /spec\.validations\[0\]\.expression/);
    assert.match(message, /objekt/);
    assert.match(message, /at \d+:\d+/, 'the error carries its position');
    assert.match(message, /no webhook is registered/);
    for (const f of stalled.status?.failures ?? []) assert.match(f.message, /objekt.*at \d+:\d+/);
    assert.equal(await webhookOf(kc, 'typo'), undefined);

    const now = Object.fromEntries((await replicas()).map((r) => [r.pod, r.pid]));
    assert.deepEqual(now, pidsAtStart, 'the same pods with the same processes');

    const verdict = await dryRunCreate(kc, configmaps, configMap('typo'));
    assert.ok(verdict.allowed, `admitted: ${JSON.stringify(verdict)}`);
  });

  test('4. a policy deleted and created again under the same name never reads Ready from the old reports', async (t) => {
    const custom = kc.makeApiClient(CustomObjectsApi);
    const policies = { group: 'rollcall.dev', version: 'v1alpha1', plural: 'policies' };
    const old = (await waitPolicy(kc, 'again', isReady, { timeoutMs: 60_000 })).metadata.uid;
    // Every state of the new Policy, from its creation on.
    const seen: PolicyObject[] = [];
    const isNew = (p: PolicyObject) => p.metadata.uid !== old;
    const watching = later(
      waitPolicy(kc, 'again', (p) => isNew(p) && isStalledEverywhere(p), {
        resourceVersion: await listVersion(kc, POLICIES_PATH),
        timeoutMs: 60_000,
        seen: (p) => void (isNew(p) && seen.push(structuredClone(p))),
      }),
    );
    // Freeze every replica, so that their reports still say "again: generation 1 Loaded"
    // (about the old uid) when the new Policy appears: rollcall must not count them. Short
    // enough that the node agent's readiness probe (3 failures) still calls them Ready.
    const frozen = (await replicas()).map((r) => r.pid);
    const frozenAt = Date.now();
    frozen.forEach((pid) => process.kill(pid, 'SIGSTOP'));
    try {
      await custom.deleteClusterCustomObject({ ...policies, name: 'again' });
      await waitGone(kc, POLICIES_PATH, 'again');
      await custom.createClusterCustomObject({ ...policies, body: policy('again', typoCode) });
      const pending = await waitPolicy(kc, 'again', (p) => isNew(p) && isCurrent(p), {
        timeoutMs: 2_500,
      });
      t.diagnostic(
        `${Date.now() - frozenAt} ms after freezing the replicas, the new Policy says: ${readyMessage(pending)}`,
      );
      assert.equal(condition(pending, 'Ready')?.status, 'False');
      assert.equal(pending.status?.readyReplicas ?? 0, 0);
      assert.match(readyMessage(pending), /older Policy of the same name/);
    } finally {
      frozen.forEach((pid) => process.kill(pid, 'SIGCONT'));
    }
    const stalled = await watching;
    assert.notEqual(stalled.metadata.uid, old, 'a new Policy');
    assert.equal(stalled.metadata.generation, 1);
    const readyOnce = seen.filter((p) => isTrue(p, 'Ready') || p.status?.summary === 'Ready');
    assert.deepEqual(
      readyOnce.map((p) => p.status),
      [],
      'the new Policy never passed through Ready',
    );
    assert.ok(
      seen.every((p) => (p.status?.readyReplicas ?? 0) === 0),
      `no replica counted as loaded: ${JSON.stringify(seen.map((p) => p.status?.ready))}`,
    );
    assert.match(readyMessage(stalled), /objekt/);
    // The old Policy's webhook goes with it (garbage collection of its owner may lag a little).
    await waitGone(kc, WEBHOOKS_PATH, 'rollcall-again', 30_000);
  });

  test('5. a source that answers 404, one whose digest does not match, and a slow one: Failed, Failed, Loading then Loaded', async (t) => {
    const [notFound, mismatch] = await Promise.all([
      waitPolicy(kc, 'src-404', isStalledEverywhere),
      waitPolicy(kc, 'src-digest', isStalledEverywhere),
    ]);
    assert.match(readyMessage(notFound), /404/);
    assert.match(readyMessage(mismatch), new RegExp(WRONG_SHA));
    assert.doesNotMatch(
      readyMessage(mismatch),
      new RegExp(BUNDLE_SHA),
      'what was served stays unsaid',
    );

    const { policy: ready, at } = await slowPolicy;
    const reports = await slowReports;
    t.diagnostic(`slow source (${SLOW_MS} ms download) Ready ${at - appliedAt} ms after apply`);
    for (const [pod, states] of reports) {
      assert.ok(
        states[0]?.startsWith('Loading'),
        `pod ${pod} reported Loading first: ${states.join(' → ')}`,
      );
      assert.equal(states.at(-1), 'Loaded', `pod ${pod}: ${states.join(' → ')}`);
    }
    assert.ok(
      slowPolicySeen.some((s) => s.startsWith('Reconciling')),
      `the Policy was Reconciling before Ready: ${slowPolicySeen.join(', ')}`,
    );
    assert.equal(ready.status?.ready, '3/3');
    const denied = await untilVerdict(kc, configmaps, configMap('src-slow'), (v) => !v.allowed);
    assert.match(denied.message, /from a source/);
  });

  test('6. an expensive expression and a catastrophic regex are answered within the timeout by failurePolicy; another policy keeps answering fast', async (t) => {
    await Promise.all(
      ['slow-fail', 'slow-ignore', 'regex-fail', 'good'].map((n) =>
        waitPolicy(kc, n, isReady, { timeoutMs: 60_000 }),
      ),
    );
    const budget = TIMEOUT_S * 1000 + 1000;
    const [one] = await replicas();
    const expensive = review(configMap('slow-fail', { data: expensiveData }));

    // On one replica: the expensive request, and meanwhile the good policy, timed.
    const pending = callReplica(one!.port, '/validate/slow-fail/1', expensive, tls);
    await sleep(200);
    const fast = await callReplica(one!.port, '/validate/good/1', review(configMap('good')), tls);
    const slow = await pending;
    t.diagnostic(
      `replica: expensive (Fail) answered in ${slow.ms.toFixed(0)} ms; good answered in ${fast.ms.toFixed(0)} ms meanwhile`,
    );
    assert.equal(fast.allowed, false);
    assert.ok(fast.ms < 750, `the good policy answered in ${fast.ms.toFixed(0)} ms`);
    assert.equal(slow.allowed, false, 'failurePolicy Fail: denied');
    assert.match(slow.message, /runtime cost budget|deadline|timed? ?out|timeout/i);
    assert.ok(slow.ms < budget, `answered in ${slow.ms.toFixed(0)} ms`);

    const ignored = await callReplica(
      one!.port,
      '/validate/slow-ignore/1',
      review(configMap('slow-ignore', { data: expensiveData })),
      tls,
    );
    assert.equal(ignored.allowed, true, 'failurePolicy Ignore: allowed');
    assert.ok(ignored.ms < budget, `answered in ${ignored.ms.toFixed(0)} ms`);

    // Through the apiserver: the same verdicts, in time.
    const [viaFail, viaIgnore] = await Promise.all([
      untilVerdict(
        kc,
        configmaps,
        configMap('slow-fail', { data: expensiveData }),
        (v) => !v.allowed,
      ),
      dryRunCreate(kc, configmaps, configMap('slow-ignore', { data: expensiveData })),
    ]);
    assert.match(viaFail.message, /runtime cost budget|deadline|timed? ?out|timeout/i);
    assert.ok(viaFail.ms < budget + 500, `apiserver answered in ${viaFail.ms.toFixed(0)} ms`);
    t.diagnostic(
      `through the apiserver: Fail denied in ${viaFail.ms.toFixed(0)} ms, Ignore allowed in ${viaIgnore.ms.toFixed(0)} ms`,
    );
    assert.ok(viaIgnore.allowed);
    assert.ok(viaIgnore.ms < budget + 500, `apiserver answered in ${viaIgnore.ms.toFixed(0)} ms`);

    // The regex: either a non-backtracking engine finishes it (allowed: it does not match),
    // or the deadline answers by failurePolicy (denied); never a stall.
    const evil = configMap('regex-fail', { data: { value: EVIL } });
    const regex = await callReplica(one!.port, '/validate/regex-fail/1', review(evil), tls);
    t.diagnostic(
      `regex answered in ${regex.ms.toFixed(0)} ms: ${regex.allowed ? 'allowed' : regex.message}`,
    );
    assert.ok(regex.ms < budget, `answered in ${regex.ms.toFixed(0)} ms`);
    if (!regex.allowed) assert.match(regex.message, /deadline|timed? ?out|timeout/i);
    const afterRegex = await callReplica(
      one!.port,
      '/validate/good/1',
      review(configMap('good')),
      tls,
    );
    assert.ok(afterRegex.ms < 750, `good policy after the regex: ${afterRegex.ms.toFixed(0)} ms`);
  });

  test('7. mode monitor answers allowed with warnings', async () => {
    await waitPolicy(kc, 'monitor', isReady);
    const hook = await webhookWhen('monitor');
    assert.equal(hook?.webhooks?.[0]?.failurePolicy, 'Ignore');
    const verdict = await untilVerdict(kc, configmaps, configMap('monitor'), (v) =>
      v.warnings.some((w) => /monitor: configmaps should have an owner label/.test(w)),
    );
    assert.ok(verdict.allowed, 'the apiserver admitted it');
    const [one] = await replicas();
    const direct = await callReplica(
      one!.port,
      '/validate/monitor/1',
      review(configMap('monitor')),
      tls,
    );
    assert.equal(direct.allowed, true);
    assert.ok(
      direct.warnings.some((w) => /monitor: configmaps should have an owner label/.test(w)),
      `warnings: ${JSON.stringify(direct.warnings)}`,
    );
    const conforming = await dryRunCreate(kc, configmaps, configMap('monitor', { owner: true }));
    assert.deepEqual(conforming.warnings, []);
  });

  // Last: it deletes every policy-server pod.
  test('3. a good policy edited into a broken generation 2 keeps serving generation 1, also from replacement pods', async (t) => {
    await waitPolicy(kc, 'pinned', isReady);
    await untilVerdict(kc, configmaps, configMap('pinned'), (v) => !v.allowed);
    await apply(
      policy('pinned', {
        validations: [
          { expression: "'owner' in objekt.metadata.labels", message: 'pinned generation 2' },
        ],
      }),
    );
    const stalled = await waitPolicy(
      kc,
      'pinned',
      (p) => p.metadata.generation === 2 && isStalledEverywhere(p),
    );
    assert.equal(stalled.status?.servedGeneration, 1);
    assert.match(readyMessage(stalled), /the webhook still enforces generation 1/);
    const hook = await webhookWhen(
      'pinned',
      (w) => w.metadata?.annotations?.['rollcall.dev/served-generation'] !== undefined,
    );
    assert.equal(hook?.webhooks?.[0]?.clientConfig.service?.path, '/validate/pinned/1');
    assert.equal(hook?.metadata?.annotations?.['rollcall.dev/served-generation'], '1');

    const servesGeneration1 = async (label: string) => {
      const live = await replicas();
      for (const r of live) {
        const v = await callReplica(r.port, '/validate/pinned/1', review(configMap('pinned')), tls);
        assert.equal(v.allowed, false, `${label} replica ${r.pod} denies with generation 1`);
        assert.match(v.message, /pinned generation 1/, `${label} replica ${r.pod}`);
      }
      const pods = (
        await kubectlAsync([
          'get',
          'pods',
          '-n',
          namespace,
          '-l',
          `${POLICY_SERVER_LABEL}=${SERVER}`,
          '-o',
          `jsonpath={range .items[*]}{.metadata.annotations.rollcall\\.dev/policies}{"\\n"}{end}`,
        ])
      )
        .trim()
        .split('\n');
      for (const annotation of pods) {
        const reading = readReplicaReport(annotation);
        assert.equal(reading.kind, 'valid', annotation);
        if (reading.kind !== 'valid') continue;
        assert.equal(reading.report.pinned?.generation, 2);
        assert.equal(reading.report.pinned?.state, 'Failed');
        assert.equal(reading.report.pinned?.serving, 1, `${label}: ${annotation}`);
      }
      return live;
    };
    const before = await servesGeneration1('original');

    // Every pod at once: the replacements can only learn generation 1 from its PolicyRevision.
    const deleted = Date.now();
    await kubectlAsync([
      'delete',
      'pods',
      '-n',
      namespace,
      '-l',
      `${POLICY_SERVER_LABEL}=${SERVER}`,
      '--wait=false',
    ]);
    const fresh = await readyReplicas(kc, namespace, SERVER, 3, 90_000);
    const oldNames = new Set(before.map((r) => r.pod));
    assert.ok(
      fresh.every((p) => !oldNames.has(p.name)),
      'all replicas are replacements',
    );
    t.diagnostic(`3 replacement replicas Ready ${Date.now() - deleted} ms after the deletion`);
    await servesGeneration1('replacement');
    const again = await waitPolicy(
      kc,
      'pinned',
      (p) =>
        isStalledEverywhere(p) && (p.status?.failures ?? []).every((f) => !oldNames.has(f.pod)),
    );
    assert.equal(again.status?.servedGeneration, 1);
    const denied = await untilVerdict(kc, configmaps, configMap('pinned'), (v) => !v.allowed);
    assert.match(denied.message, /pinned generation 1/);
    assert.equal(Object.keys(readNodeAgent()).filter((p) => oldNames.has(p)).length, 0);
  });
});
