// The audit of one namespace, as pure functions: what exists and what was judged before in,
// which object × Policy pairs to judge now out (planAudit); then, with the new verdicts, each
// Policy's results, its OpenReports Report and its summary (settleAudit, reportOf).
// A pair is judged again only when its object changed (resourceVersion), its Policy's served
// generation changed, or it was never judged: a change costs one object's evaluations.
import { isDeepStrictEqual } from 'node:util';
import {
  AUDIT_MAX_BYTES,
  AUDIT_MAX_ITEMS,
  AUDIT_MAX_POLICIES,
  AUDIT_RESULTS,
  type AuditRequest,
  OPENREPORTS_API_VERSION,
  REPORT_SOURCE,
  type AuditVerdict,
  type OpenReport,
  type ReportResult,
  type ReportSummary,
} from '../../api/audit.ts';
import { API_VERSION, MANAGED_BY, MANAGED_BY_LABEL, POLICY_LABEL } from '../../api/constants.ts';
import {
  apiVersionOf,
  isNamespaces,
  judges,
  resourceId,
  type AuditedPolicy,
  type AuditedResource,
} from './audit-match.ts';
import {
  CLUSTER_SCOPE,
  type AuditedObject,
  type NamespaceResults,
  type NamespaceSummary,
  type StoredResult,
} from '../projections/audit-store.ts';

/** At most this many results in one Report: failures first; the summary still counts all. */
export const MAX_REPORT_RESULTS = 1000;
/** How many failing objects a namespace offers the Policy's status. */
export const SUMMARY_FAILURES = 10;
/** Annotation on a Report: how many results it leaves out (MAX_REPORT_RESULTS). */
export const RESULTS_OMITTED_ANNOTATION = 'rollcall.dev/results-omitted';

export interface AuditInput {
  /** The namespace, or CLUSTER_SCOPE for cluster-scoped objects. */
  namespace: string;
  /** The Namespace's labels; undefined for CLUSTER_SCOPE or a namespace not (yet) seen. */
  namespaceLabels: Readonly<Record<string, string>> | undefined;
  /**
   * The namespaces no webhook sees (rollcall's, the protected ones): nothing in them is judged,
   * and neither are the Namespace objects of those names (a webhook's namespaceSelector
   * looks at a Namespace's own labels).
   */
  excluded: ReadonlySet<string>;
  /** Every Policy that audits now (auditedPolicy). */
  policies: readonly AuditedPolicy[];
  /** Names of Policies that exist but audit nothing now (their results stay as they are). */
  waiting: ReadonlySet<string>;
  /** Names of audited Policies whose status shows no complete pass of the served generation. */
  passing: ReadonlySet<string>;
  resources: ReadonlyMap<string, AuditedResource>;
  /** The namespace's audited objects, by object key `<resource id>/<name>`. */
  objects: ReadonlyMap<string, AuditedObject>;
  /** The namespace's change count when `objects` was read (audit-store.ts `changes`). */
  seen: number;
  /** What was judged before, by Policy; undefined: nothing known (a first run, Redis lost it). */
  previous: ReadonlyMap<string, NamespaceResults> | undefined;
}

/** The pairs to judge: by object key, the Policies that must judge it. */
export interface AuditPlan {
  judge: Map<string, string[]>;
  /** The results that stand, by Policy (its pairs not judged again). */
  kept: Map<string, Record<string, StoredResult>>;
  /** Policies whose results here go away (deleted, recreated, or judging nothing here). */
  removed: string[];
}

/** Splits an object key into its resource id and name (the name is after the last `/`). */
export function splitObjectKey(key: string): { resource: string; name: string } {
  const slash = key.lastIndexOf('/');
  return { resource: key.slice(0, slash), name: key.slice(slash + 1) };
}

export function planAudit(input: AuditInput): AuditPlan {
  const judge = new Map<string, string[]>();
  const kept = new Map<string, Record<string, StoredResult>>();
  const audited = new Set(input.policies.map((p) => p.name));
  for (const policy of input.policies) {
    const before = input.previous?.get(policy.name);
    const same = before?.uid === policy.uid && before.generation === policy.generation;
    const stands: Record<string, StoredResult> = {};
    kept.set(policy.name, stands);
    if (input.excluded.has(input.namespace)) continue;
    for (const [key, object] of input.objects) {
      const { resource: id, name } = splitObjectKey(key);
      const resource = input.resources.get(id);
      if (!resource || (isNamespaces(resource) && input.excluded.has(name))) continue;
      if (!judges(policy, resource, object.l, input.namespaceLabels)) continue;
      const result = same ? before.results[key] : undefined;
      if (result && result[0] === object.v) stands[key] = result;
      else judge.set(key, [...(judge.get(key) ?? []), policy.name]);
    }
  }
  const removed = [...(input.previous?.keys() ?? [])].filter(
    (p) => !audited.has(p) && !input.waiting.has(p),
  );
  return { judge, kept, removed };
}

/** An object as the audit reads it from the apiserver. */
export interface KubeObjectJson {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; namespace?: string; uid?: string; resourceVersion?: string };
  [field: string]: unknown;
}

/** A batch for one policy server, with each item's object key and resourceVersion. */
export interface AuditBatch {
  request: AuditRequest;
  bytes: number;
  keys: string[];
  versions: string[];
}

/**
 * The batches that judge `objects`, by policy server: each object with the Policies that
 * `names` lists for it, within what a policy server accepts (AUDIT_MAX_ITEMS objects,
 * AUDIT_MAX_POLICIES Policies, AUDIT_MAX_BYTES of objects; one larger object goes alone).
 */
export function auditBatches(
  resource: AuditedResource,
  objects: readonly KubeObjectJson[],
  names: ReadonlyMap<string, readonly string[]>,
  policies: ReadonlyMap<string, AuditedPolicy>,
): Map<string, AuditBatch[]> {
  const batches = new Map<string, AuditBatch[]>();
  const fresh = (): AuditBatch => ({
    request: {
      resource: { group: resource.group, version: resource.version, resource: resource.resource },
      kind: { group: resource.group, version: resource.version, kind: resource.kind },
      policies: [],
      items: [],
    },
    bytes: 0,
    keys: [],
    versions: [],
  });
  for (const object of objects) {
    const bytes = JSON.stringify(object).length;
    const byServer = new Map<string, AuditedPolicy[]>();
    for (const p of (names.get(object.metadata.name) ?? []).flatMap((n) => policies.get(n) ?? []))
      byServer.set(p.policyServer, [...(byServer.get(p.policyServer) ?? []), p]);
    for (const [server, all] of byServer) {
      const list = batches.get(server) ?? [];
      batches.set(server, list);
      for (let at = 0; at < all.length; at += AUDIT_MAX_POLICIES) {
        const ps = all.slice(at, at + AUDIT_MAX_POLICIES);
        let batch = list.at(-1);
        const added = batch
          ? ps.filter((p) => !batch!.request.policies.some((q) => q.name === p.name))
          : ps;
        if (
          !batch ||
          (batch.request.items.length > 0 &&
            (batch.request.items.length >= AUDIT_MAX_ITEMS ||
              batch.request.policies.length + added.length > AUDIT_MAX_POLICIES ||
              batch.bytes + bytes > AUDIT_MAX_BYTES))
        ) {
          batch = fresh();
          list.push(batch);
        }
        const { request } = batch;
        const indexes = ps.map((p) => {
          const found = request.policies.findIndex((q) => q.name === p.name);
          if (found >= 0) return found;
          request.policies.push({ name: p.name, generation: p.generation });
          return request.policies.length - 1;
        });
        request.items.push({ object, policies: indexes });
        batch.bytes += bytes;
        batch.keys.push(`${resourceId(resource)}/${object.metadata.name}`);
        batch.versions.push(object.metadata.resourceVersion ?? '');
      }
    }
  }
  return batches;
}

/** A verdict on a pair, with the resourceVersion of the object as it was judged. */
export interface Judged {
  resourceVersion: string;
  verdict: AuditVerdict;
}

/**
 * The Policies' results after this run: what stood, plus the new verdicts (a `retry` verdict
 * is left out: the pair is judged at the next run). `saved`: the Policies whose record differs
 * from `previous` in any way (it is stored); `reported`: those whose Report would differ (it is
 * written). A change that leaves every verdict as it was (a new resourceVersion, a change
 * elsewhere in the namespace) is saved but writes no Report.
 */
export function settleAudit(
  input: AuditInput,
  plan: AuditPlan,
  judged: ReadonlyMap<string, ReadonlyMap<string, Judged>>,
  nowSeconds: number,
): { results: Map<string, NamespaceResults>; saved: Set<string>; reported: Set<string> } {
  const results = new Map<string, NamespaceResults>();
  const saved = new Set<string>();
  const reported = new Set<string>();
  for (const policy of input.policies) {
    const all: Record<string, StoredResult> = { ...plan.kept.get(policy.name) };
    const before = input.previous?.get(policy.name);
    let pending = 0;
    for (const [key, byPolicy] of judged) {
      const j = byPolicy.get(policy.name);
      if (j?.verdict.retry) pending += 1;
      if (!j || j.verdict.retry) continue;
      const old = before?.results[key];
      const { result, message = '' } = j.verdict;
      // An unchanged verdict keeps its time: a Report is rewritten only when a result changes.
      const at = old && old[1] === result && old[2] === message ? old[3] : nowSeconds;
      all[key] = [j.resourceVersion, result, message, at];
    }
    const next: NamespaceResults = {
      uid: policy.uid,
      generation: policy.generation,
      results: sortedRecord(all),
      summary: summaryOf(policy, input, all, pending),
    };
    results.set(policy.name, next);
    if (!isDeepStrictEqual(before, next)) saved.add(policy.name);
    if (!sameReport(before, next)) reported.add(policy.name);
  }
  return { results, saved, reported };
}

/** Equal but for what no Report shows: the resourceVersions judged, the change count seen. */
function sameReport(a: NamespaceResults | undefined, b: NamespaceResults): boolean {
  if (!a || a.uid !== b.uid || a.generation !== b.generation) return false;
  const keys = Object.keys(b.results);
  if (Object.keys(a.results).length !== keys.length) return false;
  return keys.every((k) => {
    const x = a.results[k];
    const y = b.results[k]!;
    return x !== undefined && x[1] === y[1] && x[2] === y[2] && x[3] === y[3];
  });
}

/** Whether the results hold anything a Report shows (the run records them either way). */
export const resultsShown = (r: NamespaceResults): boolean => Object.keys(r.results).length > 0;

/** Keys in order, so that equal results serialize alike. */
function sortedRecord<T>(record: Record<string, T>): Record<string, T> {
  return Object.fromEntries(
    Object.entries(record).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
  );
}

const failing = (r: StoredResult) => r[1] === 'fail' || r[1] === 'warn';

function summaryOf(
  policy: AuditedPolicy,
  input: AuditInput,
  results: Record<string, StoredResult>,
  pending: number,
): NamespaceSummary {
  const all = Object.entries(results);
  return {
    uid: policy.uid,
    generation: policy.generation,
    seen: input.seen,
    ...(pending > 0 && { pending }),
    checked: all.length,
    failing: all.filter(([, r]) => failing(r)).length,
    errors: all.filter(([, r]) => r[1] === 'error').length,
    failures: all
      .filter(([, r]) => failing(r))
      .slice(0, SUMMARY_FAILURES)
      .map(([key, r]) => ({ object: objectLabel(key, input), message: r[2] })),
  };
}

/** `ConfigMap team-a/settings`, `Namespace dev`: how an operator names an object. */
export function objectLabel(
  key: string,
  input: Pick<AuditInput, 'namespace' | 'resources'>,
): string {
  const { resource, name } = splitObjectKey(key);
  const kind = input.resources.get(resource)?.kind ?? resource;
  return input.namespace === CLUSTER_SCOPE
    ? `${kind} ${name}`
    : `${kind} ${input.namespace}/${name}`;
}

/** The name of a Policy's Report (at most 253 characters, as every object name). */
export function reportName(policy: string): string {
  const name = `rollcall-${policy}`;
  return name.length <= 253 ? name : name.slice(0, 253).replace(/[-.]+$/, '');
}

const RESULT_ORDER: Record<string, number> = { fail: 0, error: 1, warn: 2, pass: 3, skip: 4 };

/** The OpenReports Report (ClusterReport for CLUSTER_SCOPE) of one Policy's results here. */
export function reportOf(
  policy: AuditedPolicy,
  input: Pick<AuditInput, 'namespace' | 'resources' | 'objects'>,
  results: NamespaceResults,
): OpenReport {
  const cluster = input.namespace === CLUSTER_SCOPE;
  const summary = Object.fromEntries(AUDIT_RESULTS.map((r) => [r, 0])) as ReportSummary;
  const entries = Object.entries(results.results);
  for (const [, r] of entries) summary[r[1]] += 1;
  const shown = entries
    .sort(([ka, a], [kb, b]) => RESULT_ORDER[a[1]]! - RESULT_ORDER[b[1]]! || (ka < kb ? -1 : 1))
    .slice(0, MAX_REPORT_RESULTS);
  const omitted = entries.length - shown.length;
  return {
    apiVersion: OPENREPORTS_API_VERSION,
    kind: cluster ? 'ClusterReport' : 'Report',
    metadata: {
      name: reportName(policy.name),
      ...(cluster ? {} : { namespace: input.namespace }),
      labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [POLICY_LABEL]: policy.name },
      ...(omitted > 0 && { annotations: { [RESULTS_OMITTED_ANNOTATION]: String(omitted) } }),
      ownerReferences: [
        { apiVersion: API_VERSION, kind: 'Policy', name: policy.name, uid: policy.uid },
      ],
    },
    summary,
    results: shown.map(([key, r]) => resultOf(policy, input, key, r)),
  };
}

function resultOf(
  policy: AuditedPolicy,
  input: Pick<AuditInput, 'namespace' | 'resources' | 'objects'>,
  key: string,
  [, result, message, at]: StoredResult,
): ReportResult {
  const { resource, name } = splitObjectKey(key);
  const r = input.resources.get(resource);
  return {
    source: REPORT_SOURCE,
    policy: policy.name,
    result,
    ...(message && { message }),
    scored: true,
    timestamp: { seconds: at, nanos: 0 },
    resources: [
      {
        ...(r && { apiVersion: apiVersionOf(r), kind: r.kind }),
        ...(input.namespace === CLUSTER_SCOPE ? {} : { namespace: input.namespace }),
        name,
        ...(input.objects.get(key) && { uid: input.objects.get(key)!.u }),
      },
    ],
    properties: { generation: String(policy.generation) },
  };
}

/** The object key of an object of `r` named `name`. */
export const objectKey = (r: AuditedResource, name: string): string => `${resourceId(r)}/${name}`;
