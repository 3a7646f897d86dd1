// The local apiserver's audit log: what the end-to-end tests read to see an Audit policy's
// annotation (`<webhook name>/validation_failure`, issue 38). Small on purpose: only ConfigMaps
// and Pods of the core group, at level Metadata (which carries the annotations, the objectRef,
// the user and the response code, never a body), without the RequestReceived stage; nothing
// else is logged. Rotated by size, so a long run keeps a bounded amount of it.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';

/** The core-group resources whose requests are logged. */
export const AUDITED_RESOURCES = ['configmaps', 'pods'] as const;
/** The log rotates at this many megabytes, keeping this many rotated files. */
export const AUDIT_LOG_MAX_MB = 50;
export const AUDIT_LOG_MAX_BACKUPS = 2;

/** The audit.k8s.io/v1 Policy the apiserver runs with. */
export function auditPolicy() {
  return {
    apiVersion: 'audit.k8s.io/v1',
    kind: 'Policy',
    omitStages: ['RequestReceived'],
    rules: [
      { level: 'Metadata', resources: [{ group: '', resources: [...AUDITED_RESOURCES] }] },
      { level: 'None' },
    ],
  };
}

/** Where a cluster in `dir` keeps its audit policy and its log. */
export function auditFiles(dir: string): { policyFile: string; logFile: string } {
  return { policyFile: join(dir, 'audit-policy.yaml'), logFile: join(dir, 'audit', 'audit.log') };
}

/**
 * Writes the audit policy and empties the log's folder (a new cluster, a new log; `down` leaves
 * the last one to read); returns the apiserver's flags.
 */
export function prepareAuditLog(dir: string): { args: string[]; logFile: string } {
  const { policyFile, logFile } = auditFiles(dir);
  writeFileSync(policyFile, toYaml(auditPolicy()));
  rmSync(join(dir, 'audit'), { recursive: true, force: true });
  mkdirSync(join(dir, 'audit'), { recursive: true });
  return {
    logFile,
    args: [
      `--audit-policy-file=${policyFile}`,
      `--audit-log-path=${logFile}`,
      '--audit-log-format=json',
      // Blocking (the default, said because the tests rely on it): each event is written as its
      // request is handled, not batched; a reader still polls for a moment after the response.
      '--audit-log-mode=blocking',
      `--audit-log-maxsize=${AUDIT_LOG_MAX_MB}`,
      `--audit-log-maxbackup=${AUDIT_LOG_MAX_BACKUPS}`,
    ],
  };
}
