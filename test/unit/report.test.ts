import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { REPORT_MAX_BYTES, REPORT_MESSAGE_MAX_CHARS } from '../../api/constants.ts';
import { encodeReplicaReport, readReplicaReport, type ReplicaReport } from '../../api/report.ts';

const U = '6f1c2b9e-1d2a-4c3b-9e8f-0a1b2c3d4e5f';
const entry = (fields: Record<string, unknown>) =>
  JSON.stringify({ 'require-labels': { uid: U, ...fields } });

describe('readReplicaReport accepts well-formed reports', () => {
  test('the example from DESIGN.md reads whole', () => {
    const example = {
      'require-labels': { uid: U, generation: 4, state: 'Loaded' },
      'deny-latest': {
        uid: U,
        generation: 2,
        state: 'Failed',
        message: 'module download failed: 404',
        serving: 1,
      },
    };
    assert.deepEqual(readReplicaReport(JSON.stringify(example)), {
      kind: 'valid',
      report: example,
    });
  });

  test('an empty object is a valid report of nothing loaded', () => {
    assert.deepEqual(readReplicaReport('{}'), { kind: 'valid', report: {} });
  });

  test('a missing annotation means the pod has not reported', () => {
    assert.deepEqual(readReplicaReport(undefined), { kind: 'absent' });
  });

  test('a message of exactly 1024 characters is accepted', () => {
    assert.equal(
      readReplicaReport(entry({ generation: 1, state: 'Failed', message: 'x'.repeat(1024) })).kind,
      'valid',
    );
  });
});

describe('readReplicaReport rejects malformed reports whole, with a clear reason', () => {
  const huge = JSON.stringify({
    p: { uid: U, generation: 1, state: 'Failed', message: 'x'.repeat(1000) },
    pad: 'y'.repeat(REPORT_MAX_BYTES),
  });
  const table: { name: string; raw: string; reason: RegExp }[] = [
    {
      name: 'truncated JSON',
      raw: '{"require-labels": {"generation": 4',
      reason: /not valid JSON/,
    },
    { name: 'an empty string', raw: '', reason: /not valid JSON/ },
    {
      name: 'YAML instead of JSON',
      raw: 'require-labels:\n  generation: 4',
      reason: /not valid JSON/,
    },
    { name: 'JSON null', raw: 'null', reason: /must be a JSON object.*null/ },
    {
      name: 'a JSON array',
      raw: '[{"generation": 1, "state": "Loaded"}]',
      reason: /must be a JSON object.*array/,
    },
    { name: 'a JSON string', raw: '"Loaded"', reason: /must be a JSON object.*string/ },
    { name: 'a JSON number', raw: '42', reason: /must be a JSON object.*number/ },
    {
      name: 'an entry that is a string',
      raw: JSON.stringify({ 'require-labels': 'Loaded' }),
      reason: /wrong types: require-labels/,
    },
    {
      name: 'a generation given as a string',
      raw: entry({ generation: '4', state: 'Loaded' }),
      reason: /require-labels\.generation/,
    },
    {
      name: 'a fractional generation',
      raw: entry({ generation: 1.5, state: 'Loaded' }),
      reason: /require-labels\.generation/,
    },
    {
      name: 'a zero generation',
      raw: entry({ generation: 0, state: 'Loaded' }),
      reason: /require-labels\.generation/,
    },
    {
      name: 'an unknown state',
      raw: entry({ generation: 1, state: 'Ready' }),
      reason: /require-labels\.state/,
    },
    { name: 'a missing state', raw: entry({ generation: 1 }), reason: /require-labels\.state/ },
    {
      name: 'a missing uid (a v1 report)',
      raw: JSON.stringify({ 'require-labels': { generation: 1, state: 'Loaded' } }),
      reason: /require-labels\.uid/,
    },
    {
      name: 'an empty uid',
      raw: entry({ uid: '', generation: 1, state: 'Loaded' }),
      reason: /require-labels\.uid/,
    },
    {
      name: 'a uid that is a number',
      raw: entry({ uid: 7, generation: 1, state: 'Loaded' }),
      reason: /require-labels\.uid/,
    },
    {
      name: 'a missing generation',
      raw: entry({ state: 'Loaded' }),
      reason: /require-labels\.generation/,
    },
    {
      name: 'a message that is not a string',
      raw: entry({ generation: 1, state: 'Failed', message: 404 }),
      reason: /require-labels\.message/,
    },
    {
      name: 'a message over 1024 characters',
      raw: entry({ generation: 1, state: 'Failed', message: 'x'.repeat(1025) }),
      reason: /require-labels\.message/,
    },
    {
      name: 'an unknown field',
      raw: entry({ generation: 1, state: 'Loaded', loaded: true }),
      reason: /loaded/,
    },
    {
      name: 'serving on a Loaded entry',
      raw: entry({ generation: 2, state: 'Loaded', serving: 1 }),
      reason: /serving: only allowed when state is Failed/,
    },
    {
      name: 'serving a generation not older than the failed one',
      raw: entry({ generation: 2, state: 'Failed', serving: 2 }),
      reason: /serving: must be older/,
    },
    {
      name: 'an empty policy name',
      raw: JSON.stringify({ '': { uid: U, generation: 1, state: 'Loaded' } }),
      reason: /wrong types/,
    },
    { name: 'a report over 192 KiB', raw: huge, reason: /over the 196608-byte limit/ },
    {
      name: 'one bad entry among good ones',
      raw: JSON.stringify({
        a: { uid: U, generation: 1, state: 'Loaded' },
        b: { uid: U, generation: -1, state: 'Loaded' },
      }),
      reason: /b\.generation/,
    },
  ];
  for (const row of table) {
    test(`${row.name} is rejected`, () => {
      const reading = readReplicaReport(row.raw);
      assert.equal(reading.kind, 'invalid');
      assert.match(reading.kind === 'invalid' ? reading.reason : '', row.reason);
    });
  }

  test('a report of 192 KiB exactly is read, one byte more is not', () => {
    const base = JSON.stringify({ p: { uid: U, generation: 1, state: 'Loaded' } });
    const exact = base + ' '.repeat(REPORT_MAX_BYTES - base.length);
    assert.equal(readReplicaReport(exact).kind, 'valid');
    assert.equal(readReplicaReport(exact + ' ').kind, 'invalid');
  });

  test('the size limit counts UTF-8 bytes, not characters', () => {
    const message = 'é'.repeat(1000); // 1000 characters, 2000 bytes: within the 1024-character message limit
    const entries = Object.fromEntries(
      Array.from({ length: 120 }, (_, i) => [
        `p${i}`,
        { uid: U, generation: 1, state: 'Failed', message },
      ]),
    );
    const raw = JSON.stringify(entries);
    assert.ok(raw.length < REPORT_MAX_BYTES && Buffer.byteLength(raw) > REPORT_MAX_BYTES);
    assert.match((readReplicaReport(raw) as { reason: string }).reason, /bytes/);
  });
});

describe('encodeReplicaReport', () => {
  // What a replica may say: Failed entries may carry a message and an older serving generation.
  const reportEntry = fc
    .record({
      uid: fc.uuid(),
      generation: fc.integer({ min: 2, max: 2 ** 31 }),
      state: fc.constantFrom('Loading' as const, 'Loaded' as const, 'Failed' as const),
      message: fc.option(fc.string({ maxLength: REPORT_MESSAGE_MAX_CHARS }), { nil: undefined }),
      serving: fc.option(fc.integer({ min: 1, max: 2 ** 31 }), { nil: undefined }),
    })
    .map(({ message, serving, ...entry }) => ({
      ...entry,
      ...(message === undefined ? {} : { message }),
      ...(serving === undefined || entry.state !== 'Failed'
        ? {}
        : { serving: Math.min(serving, entry.generation - 1) }),
    }));
  // Keyed by Policy names (object names: never `__proto__`, which the reader drops).
  const policyName = fc.stringMatching(/^[a-z0-9]([-a-z0-9.]{0,38}[a-z0-9])?$/);
  const report = fc.dictionary(policyName, reportEntry, {
    maxKeys: 20,
    noNullPrototype: true,
  });

  test('readReplicaReport reads back every report it encodes', () => {
    fc.assert(
      fc.property(report, (r: ReplicaReport) => {
        assert.deepEqual(readReplicaReport(encodeReplicaReport(r)), { kind: 'valid', report: r });
      }),
    );
  });
});
