// The audit-summary function: `audit-summary/<policy>` adds up what each namespace's audit run
// filed about the Policy (audit-store.ts summaries) into the Policy's `status.audit`: objects
// checked, failing, errors, a few failing objects, and when the first complete pass of the
// served generation ended. Pure core (summarizeAudit) and shell below.
import { isDeepStrictEqual } from 'node:util';
import { MAX_REPORTED_FAILURES } from '../../api/constants.ts';
import { policySchema, type PolicyAudit } from '../../api/v1alpha1.ts';
import { done, requeueAfter } from '../queue/index.ts';
import type { NamespaceSummary } from '../projections/audit-store.ts';
import { auditChanged } from './audit.ts';
import { auditedPolicy, type AuditedPolicy } from './audit-match.ts';
import { ownName } from './policy-keys.ts';
import type { ReconcileFunction } from './types.ts';

export interface SummaryInput {
  policy: AuditedPolicy;
  previous: PolicyAudit | undefined;
  /** The namespaces that hold audited objects (CLUSTER_SCOPE included when any). */
  namespaces: readonly string[];
  /** Each namespace's change count now: a summary that read an older one is not complete. */
  changes: ReadonlyMap<string, number>;
  summaries: ReadonlyMap<string, NamespaceSummary>;
  /** The watcher lists every resource the Policy's rules name (audit-store coverage). */
  covered: boolean;
  now: Date;
}

/**
 * The Policy's audit status. Only summaries of its served generation count; the pass is
 * complete once every namespace filed one with nothing left to judge (`pending`), at its
 * latest change count, and the watcher covers its resources.
 * `completedAt` is kept for the generation once set, so it says when the first full pass of it
 * ended (later changes are judged one object at a time).
 */
export function summarizeAudit(input: SummaryInput): PolicyAudit {
  const { policy, previous } = input;
  const current = input.namespaces.flatMap((ns) => {
    const s = input.summaries.get(ns);
    return s && s.uid === policy.uid && s.generation === policy.generation ? [{ ns, s }] : [];
  });
  const complete =
    input.covered &&
    current.length === input.namespaces.length &&
    current.every(({ ns, s }) => s.seen >= (input.changes.get(ns) ?? 0) && !s.pending);
  const completedAt =
    previous?.generation === policy.generation && previous.completedAt
      ? previous.completedAt
      : complete
        ? input.now.toISOString()
        : undefined;
  const failures = current
    .flatMap(({ s }) => s.failures)
    .sort((a, b) => (a.object < b.object ? -1 : a.object > b.object ? 1 : 0))
    .slice(0, MAX_REPORTED_FAILURES);
  const sum = (f: (s: NamespaceSummary) => number) => current.reduce((n, { s }) => n + f(s), 0);
  return {
    generation: policy.generation,
    checked: sum((s) => s.checked),
    failing: sum((s) => s.failing),
    errors: sum((s) => s.errors),
    ...(completedAt && { completedAt }),
    ...(failures.length > 0 && { failures }),
  };
}

export const auditSummary: ReconcileFunction = {
  name: 'audit-summary',
  // The audit runs enqueue it when a namespace's summary changes; a Policy without any
  // namespace to audit is summed when its served generation changes.
  watches: [{ kind: 'Policy', names: (event) => (auditChanged(event) ? ownName(event) : []) }],

  async handle(name, ctx) {
    if (!(await ctx.store.isSynced())) return requeueAfter(1000);
    const stored = await ctx.store.one('policy', name);
    const parsed = policySchema.safeParse(stored);
    if (!parsed.success) {
      if (stored === undefined) await ctx.audit.forgetPolicy(name);
      return done();
    }
    const policy = auditedPolicy(parsed.data);
    if (!policy) return done(); // the results of the last audited generation stand
    const [namespaces, changes, summaries, coverage] = await Promise.all([
      ctx.audit.namespaces(),
      ctx.audit.changes(),
      ctx.audit.summaries(name),
      ctx.audit.coverage(name),
    ]);
    const previous = parsed.data.status?.audit;
    const audit = summarizeAudit({
      policy,
      previous,
      namespaces,
      changes,
      summaries,
      covered: coverage === `${policy.uid}/${policy.generation}`,
      now: ctx.now(),
    });
    if (isDeepStrictEqual(audit, previous)) return done();
    // Unconditional, and whole: the Policy read may lag this function's last write, so each
    // optional field is named, with null when absent (a merge patch keeps what it does not name).
    const whole = { errors: null, completedAt: null, failures: null, ...audit };
    await ctx.timed('write', () =>
      ctx.kube.patchStatus('policies', name, { audit: whole }, undefined),
    );
    return done();
  },
};
