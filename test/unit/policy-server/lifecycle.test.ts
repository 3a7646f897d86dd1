import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { readReplicaReport } from '../../../api/report.ts';
import {
  allNeeds,
  buildReport,
  clip,
  loadKey,
  MODULE_MESSAGE,
  neededLoads,
  nextRetryAt,
  planLoads,
  readiness,
  targetFor,
  type LoadState,
} from '../../../data-plane/lifecycle.ts';

const validations = [{ expression: 'object.metadata.name != "x"', message: 'no x' }];
const spec = (extra: Record<string, unknown> = {}) => ({
  policyServer: 'default',
  rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
  validations,
  ...extra,
});
const policy = (
  name: string,
  generation: number,
  {
    uid = `uid-${name}`,
    served,
    specOverride,
  }: { uid?: string; served?: number; specOverride?: unknown } = {},
) => ({
  apiVersion: 'rollcall.dev/v1alpha1',
  kind: 'Policy',
  metadata: { name, uid, generation },
  spec: specOverride ?? spec(),
  ...(served === undefined ? {} : { status: { servedGeneration: served } }),
});
const revision = (
  policyName: string,
  generation: number,
  uid = `uid-${policyName}`,
  policySpec: unknown = spec(),
) => ({
  apiVersion: 'rollcall.dev/v1alpha1',
  kind: 'PolicyRevision',
  metadata: { name: `${policyName}-${generation}` },
  spec: { policy: policyName, policyUID: uid, generation, policySpec },
});
const loaded = (s = spec()): LoadState => ({
  state: 'Loaded',
  spec: { ...s, settings: {}, failurePolicy: 'Fail', timeoutSeconds: 10, mode: 'protect' } as never,
  code: { validations },
  loadedAt: 1,
});

describe('needed generations', () => {
  test('a Policy without a served generation needs only its current generation', () => {
    const [entry] = neededLoads([policy('a', 3)], []);
    assert.equal(entry!.current.key, loadKey('uid-a', 3));
    assert.equal(entry!.served, undefined);
    assert.equal(entry!.current.problem, undefined);
    assert.equal(entry!.current.spec?.failurePolicy, 'Fail', 'defaults are filled in');
  });

  test('a served generation equal to the current one is needed once', () => {
    const entries = neededLoads([policy('a', 2, { served: 2 })], [revision('a', 2)]);
    assert.equal(allNeeds(entries).length, 2 - 1);
  });

  test('a different served generation is loaded from its PolicyRevision', () => {
    const old = spec({ validations: [{ expression: 'true' }] });
    const [entry] = neededLoads([policy('a', 3, { served: 2 })], [revision('a', 2, 'uid-a', old)]);
    assert.equal(entry!.served?.key, 'uid-a/2');
    assert.equal(entry!.served?.origin, 'served');
    assert.deepEqual(entry!.served?.spec?.validations, [{ expression: 'true' }]);
  });

  test('a missing revision makes the served generation fail with its name, retryably', () => {
    const [entry] = neededLoads([policy('a', 3, { served: 2 })], []);
    assert.match(
      entry!.served!.problem!.message,
      /served generation 2 cannot load: PolicyRevision a-2 not found/,
    );
    assert.equal(entry!.served!.problem!.retry, true);
  });

  test('a revision of a deleted namesake (another uid) is not loaded', () => {
    const [entry] = neededLoads([policy('a', 3, { served: 2 })], [revision('a', 2, 'old-uid')]);
    assert.match(entry!.served!.problem!.message, /uid old-uid, not this Policy \(uid uid-a\)/);
  });

  test('a spec the schema refuses fails with the zod message and its path', () => {
    const [entry] = neededLoads(
      [policy('a', 1, { specOverride: spec({ timeoutSeconds: 99 }) })],
      [],
    );
    assert.match(entry!.current.problem!.message, /^invalid spec\.timeoutSeconds: /);
    assert.equal(entry!.current.problem!.retry, false);
  });

  test('a module (sim://) policy fails: the simulator runs those, not this server', () => {
    const moduleSpec = { ...spec(), validations: undefined, module: 'sim://ok' };
    const [entry] = neededLoads([policy('a', 1, { specOverride: moduleSpec })], []);
    assert.equal(entry!.current.problem!.message, MODULE_MESSAGE);
  });

  test('lists policies by name, so the report is stable', () => {
    assert.deepEqual(
      neededLoads([policy('b', 1), policy('a', 1)], []).map((e) => e.name),
      ['a', 'b'],
    );
  });
});

describe('planning loads', () => {
  test('starts what has no state, keeps what is Loading, Loaded or Failed, drops what is gone', () => {
    const needs = allNeeds(neededLoads([policy('a', 1), policy('b', 1), policy('c', 1)], []));
    const states = new Map<string, LoadState>([
      ['uid-b/1', { state: 'Loading', since: 0 }],
      ['uid-c/1', { state: 'Failed', message: 'x' }],
      ['uid-gone/4', loaded()],
    ]);
    const plan = planLoads(needs, states);
    assert.deepEqual(
      plan.start.map((n) => n.key),
      ['uid-a/1'],
    );
    assert.deepEqual(plan.fail, []);
    assert.deepEqual(plan.drop, ['uid-gone/4']);
  });

  test('fails a need with a problem at once, and only once', () => {
    const needs = allNeeds(neededLoads([policy('a', 3, { served: 2 })], []));
    const plan = planLoads(needs, new Map());
    assert.equal(plan.fail.length, 1);
    assert.equal(plan.fail[0]!.key, 'uid-a/2');
    const states = new Map<string, LoadState>([[plan.fail[0]!.key, plan.fail[0]!.state]]);
    assert.deepEqual(planLoads(needs, states).fail, []);
  });

  test('loads a served generation once its missing revision appears', () => {
    const missing = allNeeds(neededLoads([policy('a', 3, { served: 2 })], []));
    const first = planLoads(missing, new Map());
    const states = new Map<string, LoadState>([
      [first.fail[0]!.key, first.fail[0]!.state],
      ['uid-a/3', loaded()],
    ]);
    const found = allNeeds(neededLoads([policy('a', 3, { served: 2 })], [revision('a', 2)]));
    assert.deepEqual(
      planLoads(found, states).start.map((n) => n.key),
      ['uid-a/2'],
    );
  });

  test('tries a failed download again in the background once its retry time has come', () => {
    const needs = allNeeds(neededLoads([policy('a', 1), policy('b', 1)], []));
    const states = new Map<string, LoadState>([
      ['uid-a/1', { state: 'Failed', message: '404', retryAt: 1000, attempts: 1 }],
      ['uid-b/1', { state: 'Failed', message: 'typo' }],
    ]);
    assert.deepEqual(planLoads(needs, states, 999).retry, []);
    const due = planLoads(needs, states, 1000);
    assert.deepEqual(
      due.retry.map((n) => n.key),
      ['uid-a/1'],
    );
    assert.deepEqual(due.start, [], 'a retry is not a new load: the state stays Failed');
    assert.equal(nextRetryAt(states), 1000);
    assert.equal(nextRetryAt(new Map([['uid-b/1', states.get('uid-b/1')!]])), undefined);
  });

  test('never reloads a Policy deleted and created again under the same name from old state', () => {
    const states = new Map<string, LoadState>([['uid-old/1', loaded()]]);
    const plan = planLoads(allNeeds(neededLoads([policy('a', 1, { uid: 'uid-new' })], [])), states);
    assert.deepEqual(
      plan.start.map((n) => n.key),
      ['uid-new/1'],
    );
    assert.deepEqual(plan.drop, ['uid-old/1']);
  });
});

describe('the report', () => {
  test('has one entry per policy with uid, current generation and state', () => {
    const entries = neededLoads([policy('a', 2), policy('b', 1)], []);
    const states = new Map<string, LoadState>([['uid-a/2', loaded()]]);
    assert.deepEqual(buildReport(entries, states), {
      a: { uid: 'uid-a', generation: 2, state: 'Loaded' },
      b: { uid: 'uid-b', generation: 1, state: 'Loading' },
    });
  });

  test('a failed current generation says which older generation it still serves', () => {
    const entries = neededLoads([policy('a', 3, { served: 2 })], [revision('a', 2)]);
    const states = new Map<string, LoadState>([
      ['uid-a/3', { state: 'Failed', message: 'spec.validations[0].expression: boom at 1:5' }],
      ['uid-a/2', loaded()],
    ]);
    assert.deepEqual(buildReport(entries, states).a, {
      uid: 'uid-a',
      generation: 3,
      state: 'Failed',
      message: 'spec.validations[0].expression: boom at 1:5',
      serving: 2,
    });
  });

  test('serving is left out while the served generation is not loaded here', () => {
    const entries = neededLoads([policy('a', 3, { served: 2 })], []);
    const states = new Map<string, LoadState>([
      ['uid-a/3', { state: 'Failed', message: 'x' }],
      ['uid-a/2', { state: 'Failed', message: 'revision missing' }],
    ]);
    assert.equal(buildReport(entries, states).a!.serving, undefined);
  });

  test('is what rollcall’s report reader accepts (contract v2)', () => {
    const entries = neededLoads(
      [policy('a', 3, { served: 2 }), policy('b', 1), policy('c', 1)],
      [revision('a', 2)],
    );
    const states = new Map<string, LoadState>([
      ['uid-a/3', { state: 'Failed', message: 'x'.repeat(5000) }],
      ['uid-a/2', loaded()],
      ['uid-b/1', loaded()],
    ]);
    const reading = readReplicaReport(JSON.stringify(buildReport(entries, states)));
    assert.equal(reading.kind, 'valid', JSON.stringify(reading));
  });

  test('messages are cut to 1024 characters', () => {
    const entries = neededLoads([policy('a', 1)], []);
    const states = new Map<string, LoadState>([
      ['uid-a/1', { state: 'Failed', message: 'x'.repeat(5000) }],
    ]);
    const message = buildReport(entries, states).a!.message!;
    assert.equal(message.length, 1024);
    assert.ok(message.endsWith('…'));
    assert.equal(clip('short'), 'short');
  });
});

describe('readiness', () => {
  test('waits for both watches to list first', () => {
    const r = readiness({ policies: true, revisions: false }, [], new Map());
    assert.deepEqual(r, { ready: false, detail: 'waiting for the first list of PolicyRevisions' });
  });

  test('waits for every needed generation, naming them', () => {
    const entries = neededLoads([policy('a', 3, { served: 2 })], [revision('a', 2)]);
    const r = readiness(
      { policies: true, revisions: true },
      entries,
      new Map([['uid-a/3', loaded()]]),
    );
    assert.deepEqual(r, { ready: false, detail: 'loading a generation 2' });
  });

  test('is ready when every needed generation is Loaded or Failed: a failed policy never keeps it unready', () => {
    const entries = neededLoads([policy('a', 1), policy('b', 1)], []);
    const states = new Map<string, LoadState>([
      ['uid-a/1', loaded()],
      ['uid-b/1', { state: 'Failed', message: 'typo' }],
    ]);
    const r = readiness({ policies: true, revisions: true }, entries, states);
    assert.equal(r.ready, true);
    assert.match(r.detail, /1 generations loaded, 1 failed/);
  });
});

describe('the target of an admission request', () => {
  const entries = neededLoads([policy('a', 3, { served: 2 })], [revision('a', 2)]);
  const states = new Map<string, LoadState>([
    ['uid-a/3', { state: 'Failed', message: 'typo at 1:5' }],
    ['uid-a/2', loaded()],
  ]);

  test('is the loaded generation the path names', () => {
    const t = targetFor(entries, states, 'a', 2);
    assert.equal(t.kind, 'loaded');
    assert.equal(t.kind === 'loaded' && t.key, 'uid-a/2');
  });

  test('a generation that failed here is unavailable, saying why, with its failurePolicy', () => {
    const t = targetFor(entries, states, 'a', 3);
    assert.deepEqual(t, {
      kind: 'unavailable',
      message: 'policy a: this replica has not loaded generation 3 (it failed: typo at 1:5)',
      failurePolicy: 'Fail',
      actions: ['Deny'],
    });
  });

  test('a generation this replica does not need is unavailable, naming the ones it loads', () => {
    const t = targetFor(entries, states, 'a', 1);
    assert.equal(
      t.kind === 'unavailable' && t.message,
      'policy a: this replica has not loaded generation 1 (it loads generation 3 and 2)',
    );
  });

  test('a policy of another server is unknown', () => {
    assert.deepEqual(targetFor(entries, states, 'zzz', 1), { kind: 'unknown' });
  });
});
