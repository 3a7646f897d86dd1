// The audit function: `audit/<namespace>` (`audit/cluster.scoped` for cluster-scoped objects) judges
// the namespace's existing objects that the audited Policies match, with the policy servers'
// own evaluator at each Policy's served generation, and keeps one OpenReports Report per Policy
// there. It reads what exists from the watcher's projections and what it judged before from
// Redis (audit-store.ts), so a run judges only the pairs that changed (audit-core.ts).
import type { AuditVerdict } from '../../api/audit.ts';
import type { Policy } from '../../api/v1alpha1.ts';
import { done, requeueAfter } from '../queue/index.ts';
import { CLUSTER_SCOPE, type NamespaceResults } from '../projections/audit-store.ts';
import { AuditApi } from './audit-api.ts';
import {
  auditBatches,
  planAudit,
  reportName,
  reportOf,
  resultsShown,
  settleAudit,
  splitObjectKey,
  type AuditInput,
  type Judged,
  type KubeObjectJson,
} from './audit-core.ts';
import {
  auditedPolicy,
  resourceId,
  type AuditedPolicy,
  type AuditedResource,
} from './audit-match.ts';
import { excludedNamespaces } from './webhook-core.ts';
import { errorText, statusCodeOf } from '../../lib/kube/errors.ts';
import type { FunctionContext, ReconcileFunction, WatchEvent } from './types.ts';

/** A batch a replica could not judge yet (not loaded there, or busy) is asked again after this. */
const RETRY_DELAY_MS = 2000;
/** A batch no replica took (none ready, 5xx) is asked again after this, without a backoff. */
const UNAVAILABLE_DELAY_MS = 5000;
/** A batch refused (403, 404: a setup to fix) is asked again after this. */
const REFUSED_DELAY_MS = 60_000;

/**
 * A Policy as the audit sees it, from a watch event's projection: read as the apiserver keeps
 * it (its CRD's schema and defaults), not parsed again, as this runs for every Policy event.
 */
const audited = (object: unknown): AuditedPolicy | undefined =>
  typeof object === 'object' && object !== null ? auditedPolicy(object as Policy) : undefined;

/** What of an audited Policy decides its results: a change asks every namespace again. */
const auditShape = (p: AuditedPolicy | undefined) =>
  p === undefined
    ? ''
    : JSON.stringify([
        p.uid,
        p.generation,
        p.actions,
        p.rules,
        p.namespaceSelector,
        p.objectSelector,
      ]);

/** Whether a Policy event changes what its audit judges (its served generation, its deletion). */
export function auditChanged(event: Pick<WatchEvent, 'type' | 'object' | 'old'>): boolean {
  if (event.type === 'resync') return false;
  const now = event.type === 'deleted' ? undefined : audited(event.object);
  const before = event.type === 'added' ? undefined : audited(event.old ?? event.object);
  if (event.type === 'deleted') return before !== undefined;
  return auditShape(now) !== auditShape(before);
}

export const audit: ReconcileFunction = {
  name: 'audit',
  watches: [
    {
      kind: 'Policy',
      names: (event, index) => (auditChanged(event) ? (index.auditedNamespaces?.() ?? []) : []),
    },
    // Its labels decide the namespaceSelectors.
    {
      kind: 'Namespace',
      names: (event) =>
        event.type === 'resync' ||
        (event.type === 'modified' &&
          JSON.stringify(event.old?.metadata?.labels ?? {}) ===
            JSON.stringify(event.object.metadata?.labels ?? {}))
          ? []
          : [event.object.metadata?.name],
    },
  ],

  async handle(namespace, ctx) {
    // No Service to reach the policy servers through: out-of-cluster development only.
    if (ctx.config.webhookUrl !== undefined) return done();
    const input = await ctx.timed('read', () => readInput(namespace, ctx));
    if (!input) return requeueAfter(1000); // the watcher has not written the projections yet
    const plan = planAudit(input);
    const api = new AuditApi(ctx.api, ctx.writeGate, ctx.config.namespace);
    const judged = await judgeAll(input, plan.judge, api, ctx);
    const { results, saved, reported } = settleAudit(
      input,
      plan,
      judged,
      Math.floor(ctx.now().getTime() / 1000),
    );
    await ctx.timed('write', () => writeReports(input, results, reported, plan.removed, api));
    await ctx.audit.saveResults(
      namespace,
      new Map([...results].filter(([p]) => saved.has(p))),
      plan.removed,
    );
    // A summary is summed again when what it shows changed, or while the Policy's first pass
    // is not complete (the change count seen decides when it is).
    const summaries = [...saved]
      .filter((p) => reported.has(p) || input.passing.has(p))
      .concat(plan.removed)
      .map((p) => `audit-summary/${p}`);
    if (summaries.length > 0) await ctx.enqueue(summaries);
    const verdicts = [...judged.values()].flatMap((m) => [...m.values()]);
    // A failed batch's pairs carry no resourceVersion (judgePage).
    const failed = verdicts.filter((j) => j.resourceVersion === '');
    if (failed.some((j) => j.verdict.retry)) return requeueAfter(UNAVAILABLE_DELAY_MS);
    if (verdicts.some((j) => j.verdict.retry)) return requeueAfter(RETRY_DELAY_MS);
    return failed.length > 0 ? requeueAfter(REFUSED_DELAY_MS) : done();
  },
};

async function readInput(namespace: string, ctx: FunctionContext): Promise<AuditInput | undefined> {
  if (!(await ctx.store.isSynced())) return undefined;
  const [policies, resources, { objects, seen }, previous, namespaceLabels] = await Promise.all([
    ctx.store.all('policy'),
    ctx.audit.resources(),
    ctx.audit.objects(namespace),
    ctx.audit.results(namespace),
    namespace === CLUSTER_SCOPE ? undefined : ctx.audit.namespaceLabels(namespace),
  ]);
  const auditing: AuditedPolicy[] = [];
  const waiting = new Set<string>();
  const passing = new Set<string>();
  for (const object of policies) {
    const p = object as Policy;
    const a = auditedPolicy(p);
    if (a) auditing.push(a);
    else if (p.metadata?.name) waiting.add(p.metadata.name);
    const done = p.status?.audit;
    if (a && !(done?.generation === a.generation && done.completedAt)) passing.add(a.name);
  }
  return {
    namespace,
    namespaceLabels,
    excluded: new Set(excludedNamespaces(ctx.config)),
    policies: auditing,
    waiting,
    passing,
    resources: new Map(resources.map((r) => [resourceId(r), r])),
    objects,
    seen,
    previous,
  };
}

/**
 * Judges the planned pairs: the objects read as they are now (a page at a time), sent to each
 * Policy's server in batches (judgePage). By object key, then Policy.
 */
async function judgeAll(
  input: AuditInput,
  judge: ReadonlyMap<string, string[]>,
  api: AuditApi,
  ctx: FunctionContext,
): Promise<Map<string, Map<string, Judged>>> {
  const judged = new Map<string, Map<string, Judged>>();
  const failed = new Map<string, AuditVerdict>();
  const serverOf = new Map(input.policies.map((p) => [p.name, p]));
  // By resource: the names to read and, per name, the Policies that judge it.
  const byResource = new Map<string, Map<string, string[]>>();
  for (const [key, policies] of judge) {
    const { resource, name } = splitObjectKey(key);
    const names = byResource.get(resource) ?? new Map<string, string[]>();
    names.set(name, policies);
    byResource.set(resource, names);
  }
  const scope = input.namespace === CLUSTER_SCOPE ? undefined : input.namespace;
  for (const [id, names] of byResource) {
    const resource = input.resources.get(id);
    if (!resource) continue;
    await api.read(resource, scope, new Set(names.keys()), (objects) =>
      judgePage(resource, objects, names, serverOf, api, judged, failed),
    );
    ctx.log.debug({ resource: id, objects: names.size }, 'audit judged');
  }
  return judged;
}

/**
 * Judges one page of objects: each policy server gets its batches (auditBatches) one after
 * another, as a replica judges one batch at a time; the servers in parallel. A server that
 * failed a batch (`failed`, kept for the run) is sent no more of them.
 */
async function judgePage(
  resource: AuditedResource,
  objects: KubeObjectJson[],
  names: ReadonlyMap<string, string[]>,
  policies: ReadonlyMap<string, AuditedPolicy>,
  api: AuditApi,
  judged: Map<string, Map<string, Judged>>,
  failed: Map<string, AuditVerdict>,
): Promise<void> {
  const batches = auditBatches(resource, objects, names, policies);
  await Promise.all(
    [...batches].map(async ([server, list]) => {
      for (const { request, keys, versions } of list) {
        const answer = failed.has(server)
          ? undefined
          : await api.judge(server, request).catch((err: unknown) => {
              failed.set(server, failure(server, err));
              return undefined;
            });
        request.items.forEach((item, i) => {
          const byPolicy = judged.get(keys[i]!) ?? new Map<string, Judged>();
          item.policies.forEach((p, j) => {
            byPolicy.set(request.policies[p]!.name, {
              // A failure is recorded at no resourceVersion, so the next run judges it again.
              resourceVersion: answer ? versions[i]! : '',
              verdict: answer
                ? (answer.results[i]?.[j] ?? {
                    result: 'error',
                    message: 'no verdict in the answer',
                  })
                : failed.get(server)!,
            });
          });
          judged.set(keys[i]!, byPolicy);
        });
      }
    }),
  );
}

/**
 * A batch that failed, as a verdict on each of its pairs. Unavailable (no ready replica, a
 * 5xx, 429, the network): `retry`, asked again soon without a growing backoff, so that the
 * audit resumes as soon as the replicas are back. Refused (4xx: a setup to fix): an `error`
 * result that says why, asked again every minute.
 */
function failure(server: string, err: unknown): AuditVerdict {
  const code = statusCodeOf(err);
  if (code === undefined || code === 429 || code >= 500)
    return {
      result: 'error',
      message: `policy server ${server} is unavailable: ${errorText(err)}`,
      retry: true,
    };
  const hint =
    code === 403
      ? ' (a policy server started with --client-ca-file refuses the apiserver service proxy, ' +
        'which presents no client certificate: docs/policy-server.md#client-certificates)'
      : '';
  return {
    result: 'error',
    message: `policy server ${server} refused the audit batch: ${errorText(err)}${hint}`,
  };
}

/**
 * Writes the Reports whose results changed, deletes those with nothing left to show and those
 * of Policies gone; with nothing known from before (Redis lost it), also the Reports rollcall
 * wrote here for Policies that no longer have results.
 */
async function writeReports(
  input: AuditInput,
  results: ReadonlyMap<string, NamespaceResults>,
  reported: ReadonlySet<string>,
  removed: readonly string[],
  api: AuditApi,
): Promise<void> {
  const cluster = input.namespace === CLUSTER_SCOPE;
  const kind = cluster ? 'ClusterReport' : 'Report';
  const scope = cluster ? undefined : input.namespace;
  const byName = new Map(input.policies.map((p) => [p.name, p]));
  for (const name of reported) {
    const r = results.get(name)!;
    const before = input.previous?.get(name);
    const shown = before !== undefined && resultsShown(before);
    if (resultsShown(r)) await api.write(reportOf(byName.get(name)!, input, r), !shown);
    else if (shown) await api.remove(kind, scope, reportName(name));
  }
  const gone = new Set(removed.map(reportName));
  if (input.previous === undefined) {
    const wanted = new Set(
      [...results].filter(([, r]) => resultsShown(r)).map(([p]) => reportName(p)),
    );
    const waiting = new Set([...input.waiting].map(reportName));
    for (const name of await api.reportNames(kind, scope))
      if (!wanted.has(name) && !waiting.has(name)) gone.add(name);
  }
  for (const name of gone) await api.remove(kind, scope, name);
}
