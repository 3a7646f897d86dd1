// The simulator's replica reports follow report contract v2: every entry carries the
// Policy's uid, and what a deleted namesake left in a report is never carried over.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { readReplicaReport } from '../../../api/report.ts';
import { simulatedReport, type SimPolicyObject } from '../../../tooling/sim/sim.ts';

const policy = (
  name: string,
  module: string | undefined,
  uid: string | undefined = `uid-${name}`,
  generation = 1,
): SimPolicyObject => ({
  apiVersion: 'rollcall.dev/v1alpha1',
  kind: 'Policy',
  metadata: { name, generation, ...(uid === undefined ? {} : { uid }) },
  spec: { policyServer: 'default', ...(module === undefined ? {} : { module }) },
});

/** The entry for Policy p (uid-new, generation 2, now failing) after `previous` said Loaded at 1. */
const afterFailedReload = (previous: { uid: string }) =>
  simulatedReport(
    'ps-a',
    [policy('p', 'sim://fail?message=boom', 'uid-new', 2)],
    { p: { uid: previous.uid, generation: 1, state: 'Loaded' } },
    new Map(),
    0,
  ).report['p'];

describe('simulated reports', () => {
  test('every entry carries its Policy uid and the report reads as valid', () => {
    const { report } = simulatedReport(
      'ps-a',
      [policy('good', 'sim://ok'), policy('bad', 'sim://fail?message=boom')],
      {},
      new Map(),
      0,
    );
    assert.deepEqual(report, {
      good: { uid: 'uid-good', generation: 1, state: 'Loaded' },
      bad: { uid: 'uid-bad', generation: 1, state: 'Failed', message: 'boom' },
    });
    assert.equal(readReplicaReport(JSON.stringify(report)).kind, 'valid');
  });

  test('a CEL policy (no module) is left to a real server', () => {
    const { report } = simulatedReport('ps-a', [policy('cel', undefined)], {}, new Map(), 0);
    assert.deepEqual(report, {});
  });

  test('a failed reload keeps serving what the same Policy loaded before', () => {
    assert.equal(afterFailedReload({ uid: 'uid-new' })?.serving, 1);
  });

  test("a deleted namesake's loaded generation is not served by the new Policy", () => {
    assert.deepEqual(afterFailedReload({ uid: 'uid-old' }), {
      uid: 'uid-new',
      generation: 2,
      state: 'Failed',
      message: 'boom',
    });
  });
});
