// The local cluster's audit log: the policy and flags the apiserver gets
// (tooling/cluster/audit-log.ts), and the tests' incremental reader (test/support/audit-log.ts),
// which must see every event once, in order, however the writes are cut and the file rotated.
import assert from 'node:assert/strict';
import { appendFileSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { parse } from 'yaml';
import {
  AUDIT_LOG_MAX_BACKUPS,
  AUDIT_LOG_MAX_MB,
  auditPolicy,
  prepareAuditLog,
} from '../../../tooling/cluster/audit-log.ts';
import { AuditLogReader, type AuditEvent } from '../../support/audit-log.ts';

describe('the audit policy and flags', () => {
  test('logs ConfigMaps and Pods of the core group at Metadata, nothing else, without RequestReceived', () => {
    assert.deepEqual(auditPolicy(), {
      apiVersion: 'audit.k8s.io/v1',
      kind: 'Policy',
      omitStages: ['RequestReceived'],
      rules: [
        { level: 'Metadata', resources: [{ group: '', resources: ['configmaps', 'pods'] }] },
        { level: 'None' },
      ],
    });
  });

  test('writes the policy in the cluster dir and gives the apiserver a bounded, rotated log there', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rollcall-audit-'));
    try {
      const { args, logFile } = prepareAuditLog(dir);
      assert.equal(logFile, join(dir, 'audit', 'audit.log'));
      const policyFile = join(dir, 'audit-policy.yaml');
      assert.deepEqual(parse(readFileSync(policyFile, 'utf8')), auditPolicy());
      assert.deepEqual(args, [
        `--audit-policy-file=${policyFile}`,
        `--audit-log-path=${logFile}`,
        '--audit-log-format=json',
        '--audit-log-mode=blocking',
        `--audit-log-maxsize=${AUDIT_LOG_MAX_MB}`,
        `--audit-log-maxbackup=${AUDIT_LOG_MAX_BACKUPS}`,
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

const event = (i: number): AuditEvent => ({
  auditID: `id-${i}`,
  stage: 'ResponseComplete',
  verb: 'create',
  requestURI: '/api/v1/namespaces/default/configmaps',
  objectRef: { resource: 'configmaps', namespace: 'default', name: `cm-ü-${i}` },
  annotations: { 'p.policies.rollcall.dev/validation_failure': `[{"message":"é ${i}"}]` },
});

describe('AuditLogReader', () => {
  test('sees nothing before the file exists, and a line only once it is complete', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rollcall-audit-'));
    try {
      const file = join(dir, 'audit.log');
      const reader = new AuditLogReader(file);
      assert.deepEqual(reader.events(), []);
      const line = `${JSON.stringify(event(1))}\n`;
      appendFileSync(file, line.slice(0, 20));
      assert.deepEqual(reader.events(), []);
      appendFileSync(file, line.slice(20));
      assert.deepEqual(reader.events(), [event(1)]);
      assert.deepEqual(reader.events(), [event(1)], 'read once');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('whatever the cuts, reads and rotations: every event once, in order', () => {
    // A step: append the next `bytes` bytes of the log, then read, rotate, or both.
    const step = fc.record({
      bytes: fc.integer({ min: 1, max: 400 }),
      read: fc.boolean(),
      rotate: fc.boolean(),
    });
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 20 }),
        fc.array(step, { maxLength: 40 }),
        (n, steps) => {
          const dir = mkdtempSync(join(tmpdir(), 'rollcall-audit-'));
          try {
            const file = join(dir, 'audit.log');
            const events = Array.from({ length: n }, (_, i) => event(i));
            const bytes = Buffer.from(events.map((e) => `${JSON.stringify(e)}\n`).join(''));
            const reader = new AuditLogReader(file);
            let written = 0;
            let rotations = 0;
            for (const s of steps) {
              if (written >= bytes.length) break;
              const end = Math.min(bytes.length, written + s.bytes);
              appendFileSync(file, bytes.subarray(written, end));
              written = end;
              if (s.read) reader.events();
              // A rotation between lines, as the apiserver's logger rotates: a read must have
              // followed the old file since its last read, or it is only ever one rotation behind.
              if (s.rotate && bytes[written - 1] === 0x0a) {
                rotations += 1;
                renameSync(
                  file,
                  join(dir, `audit-2026-01-01T00-00-${String(rotations).padStart(2, '0')}.000.log`),
                );
                reader.events();
              }
            }
            appendFileSync(file, bytes.subarray(written));
            assert.deepEqual(reader.events(), events);
          } finally {
            rmSync(dir, { recursive: true, force: true });
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});
