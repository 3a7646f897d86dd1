/**
 * The pure core of PolicyRevisions: which revision the webhook function records before a
 * webhook serves a generation, and which revisions it removes.
 *
 * A revision `<policy>-<generation>` holds the Policy's spec at that generation, so a
 * policy-server replica that starts while the current generation is broken can still load
 * the generation the webhook serves. It is written right before the webhook (create; an
 * existing one of this Policy is fine), so a webhook never serves a generation that has no
 * revision. Revisions are immutable, so one left by a deleted Policy of the same name (other
 * uid) that blocks the name is deleted first. The newest REVISIONS_KEPT of this Policy and
 * the served one are kept; everything else labelled for the Policy name goes (a deleted
 * namesake's revisions too: its owner is gone, the garbage collector would remove them).
 */
import {
  API_VERSION,
  POLICY_SERVER_LABEL,
  REVISION_LABEL_POLICY,
  REVISIONS_KEPT,
  revisionName,
} from '../../api/constants.ts';
import type { Policy, PolicyRevision } from '../../api/v1alpha1.ts';

/** The revision recording the Policy's current spec at its current generation. */
export function desiredRevision(policy: Policy): PolicyRevision {
  const name = policy.metadata.name;
  const generation = policy.metadata.generation ?? 0;
  const uid = policy.metadata.uid ?? '';
  return {
    apiVersion: API_VERSION,
    kind: 'PolicyRevision',
    metadata: {
      name: revisionName(name, generation),
      labels: {
        [REVISION_LABEL_POLICY]: name,
        [POLICY_SERVER_LABEL]: policy.spec.policyServer,
      },
      ownerReferences: [{ apiVersion: API_VERSION, kind: 'Policy', name, uid, controller: true }],
    },
    spec: { policy: name, policyUID: uid, generation, policySpec: { ...policy.spec } },
  };
}

const isOf = (revision: PolicyRevision, policy: Policy) =>
  revision.spec.policy === policy.metadata.name && revision.spec.policyUID === policy.metadata.uid;

export interface RevisionPlan {
  /** Revisions to delete before creating: a deleted namesake's, holding the name. */
  clear: string[];
  /** The revision to create; undefined when this Policy's already exists. */
  create: PolicyRevision | undefined;
  /** Revisions to delete once the webhook serves the current generation. */
  prune: string[];
}

/**
 * What to do about revisions when the webhook is about to serve the Policy's current
 * generation, given the revisions labelled for its name.
 */
export function planRevisions(policy: Policy, existing: readonly PolicyRevision[]): RevisionPlan {
  const wanted = desiredRevision(policy);
  const wantedName = wanted.metadata.name;
  const present = existing.find((r) => r.metadata.name === wantedName);
  const clear = present !== undefined && !isOf(present, policy) ? [wantedName] : [];
  const create = present !== undefined && clear.length === 0 ? undefined : wanted;

  const served = wanted.spec.generation;
  const own = [
    ...existing.filter((r) => isOf(r, policy) && r.metadata.name !== wantedName),
    wanted,
  ].sort((a, b) => b.spec.generation - a.spec.generation);
  const kept = new Set(
    own
      .filter((r, index) => index < REVISIONS_KEPT || r.spec.generation === served)
      .map((r) => r.metadata.name),
  );
  const prune = existing
    .map((r) => r.metadata.name)
    .filter((name) => !kept.has(name) && !clear.includes(name))
    .sort();
  return { clear, create, prune };
}
