/**
 * The replica report: what one policy-server pod says it loaded, published in its
 * own `rollcall.dev/policies` annotation. This is untrusted input. A report is read
 * whole or not at all: any defect (too large, not JSON, wrong shape, inconsistent
 * entry) rejects the entire report, and `readReplicaReport` never throws.
 */
import { z } from 'zod';
import { REPORT_ANNOTATION, REPORT_MAX_BYTES, REPORT_MESSAGE_MAX_CHARS } from './constants.ts';
import type { Pod } from './kube.ts';

export const reportEntrySchema = z
  .strictObject({
    /** The Policy's metadata.uid: entries about a deleted namesake of the Policy never count. */
    uid: z.string().min(1).max(128),
    generation: z.int().min(1),
    state: z.enum(['Loading', 'Loaded', 'Failed']),
    message: z.string().max(REPORT_MESSAGE_MAX_CHARS).optional(),
    serving: z.int().min(1).optional(),
  })
  .superRefine((entry, ctx) => {
    // `serving` only makes sense as "what I still enforce after this reload failed".
    if (entry.serving === undefined) return;
    if (entry.state !== 'Failed') {
      ctx.addIssue({
        code: 'custom',
        path: ['serving'],
        message: 'only allowed when state is Failed',
      });
    } else if (entry.serving >= entry.generation) {
      ctx.addIssue({ code: 'custom', path: ['serving'], message: 'must be older than generation' });
    }
  });
export type ReportEntry = z.output<typeof reportEntrySchema>;

export const replicaReportSchema = z.record(z.string().min(1), reportEntrySchema);
export type ReplicaReport = z.output<typeof replicaReportSchema>;

export type ReportReading =
  | { kind: 'absent' }
  | { kind: 'valid'; report: ReplicaReport }
  | { kind: 'invalid'; reason: string };

/** A report as its annotation value: the one encoding readReplicaReport reads back. */
export function encodeReplicaReport(report: ReplicaReport): string {
  return JSON.stringify(report);
}

/** Reads a report annotation value; `undefined` means the pod has not reported yet. */
export function readReplicaReport(annotation: string | undefined): ReportReading {
  if (annotation === undefined) return { kind: 'absent' };
  const bytes = Buffer.byteLength(annotation, 'utf8');
  if (bytes > REPORT_MAX_BYTES) {
    return {
      kind: 'invalid',
      reason: `report is ${bytes} bytes, over the ${REPORT_MAX_BYTES}-byte limit`,
    };
  }
  let json: unknown;
  try {
    json = JSON.parse(annotation);
  } catch (error) {
    return { kind: 'invalid', reason: `report is not valid JSON (${errorMessage(error)})` };
  }
  // z.record accepts any non-array object; say plainly what the top level must be.
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    return {
      kind: 'invalid',
      reason: `report must be a JSON object keyed by policy name, got ${describe(json)}`,
    };
  }
  const parsed = replicaReportSchema.safeParse(json);
  if (!parsed.success)
    return { kind: 'invalid', reason: `report has wrong types: ${formatIssues(parsed.error)}` };
  return { kind: 'valid', report: parsed.data };
}

/**
 * What one pod's report says about one Policy: the policy core's input per pod. A rejected
 * report rejects every entry (`invalid`); a valid report without this Policy has no `entry`.
 */
export type PolicyReport =
  | { kind: 'absent' }
  | { kind: 'invalid'; reason: string }
  | { kind: 'valid'; entry: ReportEntry | undefined };

/** The part of a reading about `policy`. */
export function policyReport(reading: ReportReading, policy: string): PolicyReport {
  if (reading.kind !== 'valid') return reading;
  // hasOwn: a policy named "constructor" must not find Object.prototype's.
  const entry = Object.hasOwn(reading.report, policy) ? reading.report[policy] : undefined;
  return { kind: 'valid', entry };
}

/**
 * What each pod's annotation says about `policy`, by pod name: the policy core's `reports`
 * from full pods (rollcall's workers read them pre-read from the projections instead).
 */
export function reportsFromPods(pods: readonly Pod[], policy: string): Map<string, PolicyReport> {
  return new Map(
    pods.map((pod) => [
      pod.metadata?.name ?? '',
      policyReport(readReplicaReport(pod.metadata?.annotations?.[REPORT_ANNOTATION]), policy),
    ]),
  );
}

function formatIssues(error: z.ZodError): string {
  const shown = error.issues.slice(0, 3).map((issue) => {
    const path = issue.path.map(String).join('.');
    return path === '' ? issue.message : `${path}: ${issue.message}`;
  });
  const more = error.issues.length - shown.length;
  return shown.join('; ') + (more > 0 ? `; and ${more} more` : '');
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return `a ${typeof value}`;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
