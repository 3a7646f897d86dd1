/**
 * The continuous audit's contract between the planes. The audit function (control plane)
 * sends a policy server a batch of existing objects of one resource, each with the Policies
 * (and their pinned generations) whose rules, namespaceSelector and objectSelector match it;
 * the policy server judges each as a dry-run CREATE with the same evaluator and the same
 * loaded generation its webhooks use, and answers one OpenReports result per pair.
 * The batch reaches a replica through the apiserver's service proxy (auditProxyPath), so it
 * takes the apiserver's route to the pods, as the webhooks do.
 */
import { z } from 'zod';

/** The policy server's audit endpoint: `POST` an AuditRequest, get an AuditResponse. */
export const AUDIT_PATH = '/audit';

/** OpenReports' result values, in the order a summary lists them. */
export const AUDIT_RESULTS = ['pass', 'fail', 'warn', 'error', 'skip'] as const;
export type AuditResult = (typeof AUDIT_RESULTS)[number];

/** At most this many objects in one batch (the worker sends at most this many). */
export const AUDIT_MAX_ITEMS = 500;
/** At most this many Policies in one batch. */
export const AUDIT_MAX_POLICIES = 256;
/**
 * The worker keeps a batch's objects under this many bytes of JSON (one larger object goes
 * alone): half of a policy server's default --max-review-bytes, room for the rest of the body.
 */
export const AUDIT_MAX_BYTES = 4 * 1024 * 1024;

const groupVersion = { group: z.string(), version: z.string().min(1) };

export const auditRequestSchema = z.strictObject({
  /** The audited objects' resource and kind, as an AdmissionReview's request names them. */
  resource: z.strictObject({ ...groupVersion, resource: z.string().min(1) }),
  kind: z.strictObject({ ...groupVersion, kind: z.string().min(1) }),
  /** The Policies of this batch at the generation each is judged by (its served one). */
  policies: z
    .array(z.strictObject({ name: z.string().min(1).max(253), generation: z.int().min(1) }))
    .min(1)
    .max(AUDIT_MAX_POLICIES),
  /** Each object, with the indexes (into `policies`) of the Policies that judge it. */
  items: z
    .array(
      z.strictObject({
        object: z.looseObject({
          metadata: z.looseObject({ name: z.string().min(1), namespace: z.string().optional() }),
        }),
        policies: z.array(z.int().min(0)).min(1),
      }),
    )
    .max(AUDIT_MAX_ITEMS),
});
export type AuditRequest = z.output<typeof auditRequestSchema>;

/** One object × Policy: the result, and the validation's message when it is not `pass`. */
export interface AuditVerdict {
  result: AuditResult;
  message?: string;
  /**
   * This replica could not judge it now (it has not loaded that generation, or it has no room):
   * the worker asks again later and records nothing.
   */
  retry?: true;
}

/**
 * `results[i][j]`: item i judged by its j-th Policy (`items[i].policies[j]`). `fail` is a
 * failed validation of a Policy with Deny or Audit, `warn` of a Warn-only one; `skip`: a
 * matchCondition excluded the object; `error`: the evaluation failed, ran past its budget or
 * deadline, or this replica has not loaded that generation (the message says which).
 */
export interface AuditResponse {
  results: AuditVerdict[][];
}

/**
 * The apiserver path that proxies `path` to a policy server's Service (port 443, HTTPS):
 * `/api/v1/namespaces/<ns>/services/https:<service>:443/proxy<path>`.
 */
export function auditProxyPath(namespace: string, service: string, path = AUDIT_PATH): string {
  return `/api/v1/namespaces/${namespace}/services/https:${service}:443/proxy${path}`;
}

// ---------------------------------------------------------------- OpenReports

export const OPENREPORTS_GROUP = 'openreports.io';
export const OPENREPORTS_API_VERSION = `${OPENREPORTS_GROUP}/v1alpha1`;
/** The `source` of every result rollcall writes. */
export const REPORT_SOURCE = 'rollcall';

/** core/v1 ObjectReference, as a result names its object. */
export interface ObjectReference {
  apiVersion?: string;
  kind?: string;
  namespace?: string;
  name?: string;
  uid?: string;
  resourceVersion?: string;
}

/** openreports.io/v1alpha1 ReportResult, the fields rollcall writes. */
export interface ReportResult {
  source: string;
  policy: string;
  result: AuditResult;
  message?: string;
  scored?: boolean;
  timestamp: { seconds: number; nanos: number };
  resources: ObjectReference[];
  properties?: Record<string, string>;
}

export type ReportSummary = Record<AuditResult, number>;

/** A Report (namespaced) or ClusterReport, the fields rollcall writes. */
export interface OpenReport {
  apiVersion: typeof OPENREPORTS_API_VERSION;
  kind: 'Report' | 'ClusterReport';
  metadata: {
    name: string;
    namespace?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: object[];
  };
  source?: string;
  summary: ReportSummary;
  results: ReportResult[];
}
