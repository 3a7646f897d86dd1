// validationActions end to end (issue 38, acceptance 1): a PolicyServer of rollcall's own image
// (real `rollcall policy-server` processes run by the local cluster's node agent) judges real
// `kubectl create`s through the apiserver, with webhooks registered by Service. Warn admits and
// kubectl prints the message as a warning; Audit admits and the apiserver's audit log carries
// `<webhook>/validation_failure`; Deny denies; the deprecated `mode: monitor` acts as [Warn];
// and a webhook whose policy cannot deny is registered with failurePolicy Ignore.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { stringify } from 'yaml';
import { CoreV1Api } from '@kubernetes/client-node';
import { Processes } from '../../support/driver.ts';
import { prepareIdentities, runAsAccounts, type Identities } from '../../support/identities.ts';
import { testKubeConfig } from '../../support/kube.ts';
import { CASE_LABEL, caseConfigMap, casePolicy } from '../../support/manifests.ts';
import { kubectlWarnings } from '../../support/reports.ts';
import {
  apply,
  kubectlRun,
  readyOnAll,
  startPolicyServer,
  until,
  untilVerdict,
  waitPolicy,
  webhookOf,
  type Obj,
} from '../../support/scenario.ts';
import { auditEventsOf, type AuditEvent } from '../../support/audit-log.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-act'; // rollcall's own: the policy-server pods run here
const target = 'act-target'; // where the test's ConfigMaps are created
const SERVER = 'act';
const configmaps = `/api/v1/namespaces/${target}/configmaps`;

const OWNER_RULE = "'owner' in object.metadata.labels";
const messageOf = (policy: string) => `${policy}: configmaps need an owner label`;

/**
 * The Policies, each with failurePolicy Fail: what the webhook gets instead says what the
 * actions made of it. `warn-error` errs at run time (no such key), so under Fail its error is
 * a failed validation, which a Warn-only policy turns into a warning, never a denial.
 */
const POLICIES: Record<string, Record<string, unknown>> = {
  warn: { validationActions: ['Warn'] },
  audit: { validationActions: ['Audit'] },
  deny: { validationActions: ['Deny'] },
  'deny-audit': { validationActions: ['Deny', 'Audit'] },
  monitor: { mode: 'monitor' },
  'warn-error': {
    validationActions: ['Warn'],
    validations: [{ expression: "object.data.missing == 'x'", message: 'never said' }],
  },
};
const WEBHOOK_FAILURE_POLICY: Record<string, string> = {
  warn: 'Ignore',
  audit: 'Ignore',
  monitor: 'Ignore',
  'warn-error': 'Ignore',
  deny: 'Fail',
  'deny-audit': 'Fail',
};
const STATUS_ACTIONS: Record<string, string> = {
  warn: 'Warn',
  audit: 'Audit',
  deny: 'Deny',
  'deny-audit': 'Deny,Audit',
  monitor: 'Warn',
  'warn-error': 'Warn',
};

const policy = (name: string) =>
  casePolicy(name, SERVER, target, {
    validations: [{ expression: OWNER_RULE, message: messageOf(name) }],
    failurePolicy: 'Fail',
    ...POLICIES[name],
  }) satisfies Obj;

/** A ConfigMap the case Policy `name` judges; `owner` makes it conform. */
const configMap = (name: string, owner = false): Obj =>
  caseConfigMap(name, { labels: owner ? { owner: 'e2e' } : {} });

const isReady = readyOnAll(1);
const core = kc.makeApiClient(CoreV1Api);

/** `kubectl create` of one object in the target namespace, as a user would. */
const create = (object: Obj) => kubectlRun(['create', '-n', target, '-f', '-'], stringify(object));

const exists = (name: string) =>
  core.readNamespacedConfigMap({ name, namespace: target }).then(
    () => true,
    (err: { code?: number }) => {
      if (err.code === 404) return false;
      throw err;
    },
  );

/** The webhook's annotation in an audit event: `<webhook name>/validation_failure`. */
const annotationKey = (policyName: string) =>
  `${policyName}.policies.rollcall.dev/validation_failure`;

/** The audit log's final event of the create of ConfigMap `name` in the target namespace. */
function createEvent(name: string, timeoutMs = 15_000): Promise<AuditEvent> {
  return until(
    `the audit event of creating ConfigMap ${target}/${name}`,
    () =>
      auditEventsOf(
        (e) =>
          e.verb === 'create' &&
          e.stage === 'ResponseComplete' &&
          e.objectRef?.resource === 'configmaps' &&
          e.objectRef.namespace === target &&
          e.objectRef.name === name,
      ).at(-1),
    { timeoutMs, everyMs: 200 },
  );
}

/** Parses a validation_failure annotation: `[{message, policy, generation, validationActions}]`. */
const failuresIn = (event: AuditEvent, policyName: string): unknown =>
  JSON.parse(event.annotations?.[annotationKey(policyName)] ?? 'null');

describe('validationActions with a real policy server', () => {
  const procs = new Processes(namespace);
  let ids: Identities | undefined;

  before(async () => {
    const started = Date.now();
    await procs.prepare(target);
    ids = await prepareIdentities(namespace);
    runAsAccounts(procs, ids);
    await startPolicyServer(kc, SERVER, 1);
    await apply(...Object.keys(POLICIES).map(policy));
    await Promise.all(Object.keys(POLICIES).map((n) => waitPolicy(kc, n, isReady)));
    console.error(
      `[actions] server and ${Object.keys(POLICIES).length} policies Ready in ${Date.now() - started} ms`,
    );
  });

  after(async () => {
    await procs.cleanUp();
    ids?.remove();
    await core
      .deleteCollectionNamespacedConfigMap({ namespace: target, labelSelector: CASE_LABEL })
      .catch(() => {});
  });

  test('each webhook is registered with failurePolicy Ignore unless its policy can deny, and the status names the actions', async () => {
    const got: Record<string, string | undefined> = {};
    const actions: Record<string, string | undefined> = {};
    for (const name of Object.keys(POLICIES)) {
      const hook = await until(`the webhook of ${name}`, () => webhookOf(kc, name));
      got[name] = hook.webhooks?.[0]?.failurePolicy;
      actions[name] = (await waitPolicy(kc, name, isReady)).status?.actions;
    }
    assert.deepEqual(got, WEBHOOK_FAILURE_POLICY);
    assert.deepEqual(actions, STATUS_ACTIONS);
  });

  test('Deny and Warn together are refused by the CRD', async () => {
    const bad = casePolicy('deny-warn', SERVER, target, {
      validations: [{ expression: OWNER_RULE }],
      validationActions: ['Deny', 'Warn'],
    });
    const run = await kubectlRun(['apply', '--dry-run=server', '-f', '-'], stringify(bad));
    assert.notEqual(run.code, 0, `refused: ${run.stdout}`);
    assert.match(run.stderr, /validationActions may not combine Deny and Warn/);
  });

  for (const name of ['warn', 'monitor']) {
    test(`${name}: kubectl create of a violating ConfigMap succeeds and prints the message as a warning; a conforming one prints none`, async () => {
      // The apiserver picks up a new webhook a moment after it is written.
      await untilVerdict(kc, configmaps, configMap(name), (v) =>
        v.warnings.some((w) => w.includes(messageOf(name))),
      );
      const violating = configMap(name);
      const run = await create(violating);
      assert.equal(run.code, 0, `admitted: ${run.stderr}`);
      assert.match(run.stdout, new RegExp(`configmap/${violating.metadata!.name} created`));
      const warnings = kubectlWarnings(run);
      assert.equal(warnings.length, 1, `one warning: ${run.stderr}`);
      assert.ok(warnings[0]!.includes(messageOf(name)), `the message: ${warnings[0]}`);
      assert.ok(warnings[0]!.includes(name), `the policy is named: ${warnings[0]}`);
      assert.ok(await exists(violating.metadata!.name!), 'the ConfigMap was stored');

      const conforming = await create(configMap(name, true));
      assert.equal(conforming.code, 0, conforming.stderr);
      assert.deepEqual(kubectlWarnings(conforming), []);
    });
  }

  test('Warn under failurePolicy Fail: an evaluation error is a warning, never a denial', async () => {
    await untilVerdict(kc, configmaps, configMap('warn-error'), (v) => v.warnings.length > 0);
    const object = configMap('warn-error');
    const run = await create(object);
    assert.equal(run.code, 0, `admitted: ${run.stderr}`);
    const warnings = kubectlWarnings(run);
    assert.equal(warnings.length, 1, run.stderr);
    assert.match(warnings[0]!, /warn-error/);
    assert.match(warnings[0]!, /generation 1 failed/, 'the error, not a validation message');
    assert.doesNotMatch(warnings[0]!, /never said/);
    assert.ok(await exists(object.metadata!.name!));
  });

  test('Audit: the violating ConfigMap is admitted without a warning, and the audit log carries validation_failure', async (t) => {
    // Until the apiserver calls the new webhook: each attempt is a new ConfigMap.
    let attempts = 0;
    await until(
      'an audit event with the audit policy annotation',
      async () => {
        attempts += 1;
        const object = configMap('audit');
        const run = await create(object);
        assert.equal(run.code, 0, run.stderr);
        const event = await createEvent(object.metadata!.name!);
        return event.annotations?.[annotationKey('audit')];
      },
      { timeoutMs: 30_000, everyMs: 100 },
    );
    t.diagnostic(`the webhook was called from attempt ${attempts} on`);

    // Now every violating create is annotated, and only those.
    const violating = configMap('audit');
    const run = await create(violating);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(kubectlWarnings(run), [], 'Audit alone prints no warning');
    assert.ok(await exists(violating.metadata!.name!));
    const event = await createEvent(violating.metadata!.name!);
    assert.equal(event.responseStatus?.code, 201);
    assert.deepEqual(failuresIn(event, 'audit'), [
      { message: messageOf('audit'), policy: 'audit', generation: 1, validationActions: ['Audit'] },
    ]);

    const conforming = configMap('audit', true);
    assert.equal((await create(conforming)).code, 0);
    const clean = await createEvent(conforming.metadata!.name!);
    assert.equal(clean.annotations?.[annotationKey('audit')], undefined);
  });

  test('Deny denies with the message; Deny with Audit denies and annotates', async () => {
    for (const name of ['deny', 'deny-audit']) {
      await untilVerdict(kc, configmaps, configMap(name), (v) => !v.allowed);
      const object = configMap(name);
      const run = await create(object);
      assert.notEqual(run.code, 0, `${name} denied: ${run.stdout}`);
      assert.match(run.stderr, /denied the request/);
      assert.ok(run.stderr.includes(messageOf(name)), run.stderr);
      assert.equal(await exists(object.metadata!.name!), false);
      const conforming = await create(configMap(name, true));
      assert.equal(conforming.code, 0, conforming.stderr);
    }
    const denied = configMap('deny-audit');
    await create(denied);
    const event = await createEvent(denied.metadata!.name!);
    const code = event.responseStatus?.code ?? 0;
    assert.ok(code >= 400 && code < 500, `the audit event records the denial: ${code}`);
    assert.deepEqual(failuresIn(event, 'deny-audit'), [
      {
        message: messageOf('deny-audit'),
        policy: 'deny-audit',
        generation: 1,
        validationActions: ['Deny', 'Audit'],
      },
    ]);
  });
});
