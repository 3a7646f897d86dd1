/**
 * The pure core of the Policy function: from a Policy, its PolicyServer, that
 * server's Deployment, ReplicaSets and pods, to the Policy's status, what its webhook
 * should be (see webhook-core.ts) and the Events to emit. It never throws on bad
 * replica reports.
 *
 * Trust: a pod counts only if it is labelled `rollcall.dev/policy-server=<server>`,
 * lives in the Deployment's namespace, and is controlled by a ReplicaSet that is
 * controlled by the server's Deployment, which in turn must be controlled by the
 * PolicyServer. (ReplicaSets are an input for that reason: a pod's owner reference
 * names its ReplicaSet, only the ReplicaSet names the Deployment.) Terminating pods
 * are ignored; pods that are not Ready never count as loaded.
 *
 * A report entry counts only if its `uid` is the Policy's: an entry about a deleted Policy
 * of the same name is "pending" whatever its generation and state.
 *
 * Decision table (first match wins; "served" = the webhook's current generation):
 *
 * | situation                                           | readiness               | webhook              |
 * |-----------------------------------------------------|-------------------------|----------------------|
 * | its rules reach GUARDED_RESOURCES (webhook-core.ts) | Stalled  InterceptsClusterCriticalResources | keep if served, else absent |
 * | PolicyServer missing                                | Stalled  PolicyServerNotFound | keep           |
 * | its Deployment missing / not ours                   | Reconciling PolicyServerNotDeployed | keep     |
 * | no live trusted pods, 0 replicas desired            | Stalled  PolicyServerScaledToZero | keep       |
 * | no live trusted pods                                | Reconciling WaitingForPods | keep              |
 * | a live trusted pod failed the current generation    | Stalled  LoadFailed     | keep if served, else absent |
 * | every Ready pod loaded it, ≥ desired of them        | Ready    Loaded         | serve current        |
 * | otherwise                                           | Reconciling Loading     | keep if served, else absent |
 *
 * The first row is a guard for the cluster itself, decided here rather than in webhook-core
 * because only this core writes the Policy's conditions: a Policy whose rules would intercept
 * Nodes, Leases, token or access reviews or rollcall's own kinds (GUARDED_RESOURCES) is never
 * served, whatever its replicas loaded; an earlier generation's webhook goes on as it was.
 */
import {
  MAX_REPORTED_FAILURES,
  POLICY_SERVER_LABEL,
  REPORT_ANNOTATION,
} from '../../api/constants.ts';
import {
  controllerOf,
  isTerminating,
  type Deployment,
  type Pod,
  type ReplicaSet,
} from '../../api/kube.ts';
import type { PolicyReport } from '../../api/report.ts';
import {
  actionsOf,
  type Policy,
  type PolicyServer,
  type PolicyStatus,
  type ReplicaFailure,
} from '../../api/v1alpha1.ts';
import {
  readinessOf,
  setReadiness,
  truncateUtf8,
  type Readiness,
} from '../../lib/kstatus/conditions.ts';
import {
  guardedResourcesInterceptedBy,
  interceptionMessage,
  type WebhookIntent,
} from './webhook-core.ts';

export interface PolicyCoreInput {
  policy: Policy;
  policyServer: PolicyServer | undefined;
  /** The Deployment `policy-server-<server>` in rollcall's namespace, if it exists. */
  deployment: Deployment | undefined;
  /** ReplicaSets in that namespace (those not owned by the Deployment are ignored). */
  replicaSets: readonly ReplicaSet[];
  /** Pods in that namespace labelled for the server (the label is checked again). */
  pods: readonly Pod[];
  /**
   * What each pod's report says about this Policy, by pod name (a pod missing here has not
   * reported): read once per pod event by the watcher, not once per Policy and pod here.
   * `reportsFromPods` reads them from full pods.
   */
  reports: ReadonlyMap<string, PolicyReport>;
  /** The generation the existing webhook serves for this Policy: `servedGenerationOf(webhook, policy)`. */
  servedGeneration: number | undefined;
  now: Date;
}

/** An events.k8s.io/v1 Event about the Policy, minus the bookkeeping the shell adds. */
export interface PolicyEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  action: string;
  /** At most 1 KiB, as events.k8s.io/v1 requires. */
  note: string;
}

export interface PolicyDecision {
  status: PolicyStatus;
  webhook: WebhookIntent;
  events: PolicyEvent[];
}

/** How one trusted, live replica stands with the policy's current generation. */
type ReplicaState =
  { kind: 'loaded' } | { kind: 'pending'; detail: string } | { kind: 'failed'; message: string };

interface Replica {
  pod: string;
  ready: boolean;
  state: ReplicaState;
}

const EVENT_NOTE_MAX_BYTES = 1024;
/** The Stalled reason of a Policy whose rules reach GUARDED_RESOURCES. */
export const INTERCEPTS_GUARDED_RESOURCES = 'InterceptsClusterCriticalResources';
const FAILURE_MESSAGE_MAX_BYTES = 1024;

export function computePolicy(input: PolicyCoreInput): PolicyDecision {
  const { policy, policyServer, now } = input;
  const generation = policy.metadata.generation ?? 0;
  const desired = policyServer?.spec.replicas ?? 0;
  const replicas =
    policyServer && deploymentIsTrusted(input.deployment, policyServer)
      ? liveReplicas(input, generation)
      : [];

  const readyReplicas = replicas.filter((r) => r.ready && r.state.kind === 'loaded').length;
  const failures = replicas
    .flatMap((r): ReplicaFailure[] =>
      r.state.kind === 'failed' ? [{ pod: r.pod, message: r.state.message }] : [],
    )
    .sort((a, b) => (a.pod < b.pod ? -1 : a.pod > b.pod ? 1 : 0));

  const decided = decide(input, replicas, readyReplicas, failures, generation, desired);
  const { webhook } = decided;
  const servedGeneration =
    webhook.kind === 'serve'
      ? webhook.generation
      : webhook.kind === 'keep'
        ? input.servedGeneration
        : undefined;
  // An operator's first question about a policy that is not Ready: what is enforced now?
  const readiness: Readiness =
    decided.readiness.state === 'Ready'
      ? decided.readiness
      : {
          ...decided.readiness,
          message: `${decided.readiness.message}; ${servedGeneration === undefined ? 'no webhook is registered' : `the webhook still enforces generation ${servedGeneration}`}`,
        };
  const shownFailures = failures
    .slice(0, MAX_REPORTED_FAILURES)
    .map((f) => ({ pod: f.pod, message: truncateUtf8(f.message, FAILURE_MESSAGE_MAX_BYTES) }));

  const status: PolicyStatus = {
    observedGeneration: generation,
    replicas: desired,
    readyReplicas,
    failedReplicas: failures.length,
    failures: shownFailures,
    ...(servedGeneration === undefined ? {} : { servedGeneration }),
    ready: `${readyReplicas}/${desired}`,
    summary: readiness.state,
    actions: actionsOf(policy.spec).join(','),
    conditions: setReadiness(policy.status?.conditions, readiness, generation, now),
    // The audit-summary function's: kept as it was read.
    ...(policy.status?.audit && { audit: policy.status.audit }),
  };
  return { status, webhook, events: eventsFor(policy, status, readiness, generation) };
}

function decide(
  input: PolicyCoreInput,
  replicas: readonly Replica[],
  readyReplicas: number,
  failures: readonly ReplicaFailure[],
  generation: number,
  desired: number,
): { readiness: Readiness; webhook: WebhookIntent } {
  const server = input.policy.spec.policyServer;
  const keep: WebhookIntent = { kind: 'keep' };
  // While not Ready the webhook may only go on serving what it served before.
  const fallback: WebhookIntent = input.servedGeneration === undefined ? { kind: 'absent' } : keep;
  const progress = `generation ${generation} loaded on ${readyReplicas}/${desired} replicas`;

  const { rules } = input.policy.spec;
  const interceptions = guardedResourcesInterceptedBy(rules);
  if (interceptions.length > 0) {
    return stalled(
      INTERCEPTS_GUARDED_RESOURCES,
      interceptionMessage(rules, interceptions),
      fallback,
    );
  }
  if (input.policyServer === undefined) {
    return stalled('PolicyServerNotFound', `policy server "${server}" does not exist`, keep);
  }
  if (!deploymentIsTrusted(input.deployment, input.policyServer)) {
    return reconciling(
      'PolicyServerNotDeployed',
      `policy server "${server}" has no Deployment yet`,
      keep,
    );
  }
  if (replicas.length === 0) {
    if (desired === 0)
      return stalled(
        'PolicyServerScaledToZero',
        `policy server "${server}" is scaled to 0 replicas`,
        keep,
      );
    return reconciling(
      'WaitingForPods',
      `policy server "${server}" has no running pods yet (0/${desired})`,
      keep,
    );
  }
  const [first] = failures;
  if (first !== undefined) {
    const others = failures.length > 1 ? ` (and ${failures.length - 1} more replicas)` : '';
    return stalled(
      'LoadFailed',
      `generation ${generation} failed to load on pod ${first.pod}: ${first.message}${others}`,
      fallback,
    );
  }
  const readyNotLoaded = replicas.filter((r) => r.ready && r.state.kind !== 'loaded');
  if (readyNotLoaded.length === 0 && readyReplicas >= desired && readyReplicas > 0) {
    return {
      readiness: { state: 'Ready', reason: 'Loaded', message: progress },
      webhook: { kind: 'serve', generation },
    };
  }
  const waitingFor =
    readyNotLoaded[0] ?? replicas.find((r) => !r.ready || r.state.kind !== 'loaded');
  const detail =
    waitingFor === undefined
      ? ''
      : `; waiting for pod ${waitingFor.pod} (${waitingFor.state.kind === 'pending' ? waitingFor.state.detail : 'not Ready'})`;
  return reconciling('Loading', progress + detail, fallback);
}

function stalled(reason: string, message: string, webhook: WebhookIntent) {
  return { readiness: { state: 'Stalled', reason, message } as const, webhook };
}

function reconciling(reason: string, message: string, webhook: WebhookIntent) {
  return { readiness: { state: 'Reconciling', reason, message } as const, webhook };
}

/** The Deployment counts only if its controller is this PolicyServer (same uid). */
function deploymentIsTrusted(
  deployment: Deployment | undefined,
  server: PolicyServer,
): deployment is Deployment {
  const owner = controllerOf(deployment?.metadata);
  return (
    owner !== undefined &&
    owner.kind === 'PolicyServer' &&
    server.metadata.uid !== undefined &&
    owner.uid === server.metadata.uid &&
    deployment?.metadata?.uid !== undefined
  );
}

/** The trusted, non-terminating pods and how each stands with `generation`. */
function liveReplicas(input: PolicyCoreInput, generation: number): Replica[] {
  const deployment = input.deployment;
  const serverName = input.policyServer?.metadata.name;
  const namespace = deployment?.metadata?.namespace;
  const replicaSetUids = new Set(
    input.replicaSets
      .filter((rs) => rs.metadata?.namespace === namespace)
      .filter((rs) => {
        const owner = controllerOf(rs.metadata);
        return owner?.kind === 'Deployment' && owner.uid === deployment?.metadata?.uid;
      })
      .flatMap((rs) => (rs.metadata?.uid === undefined ? [] : [rs.metadata.uid])),
  );
  return input.pods
    .filter((pod) => {
      const owner = controllerOf(pod.metadata);
      return (
        pod.metadata?.labels?.[POLICY_SERVER_LABEL] === serverName &&
        pod.metadata?.namespace === namespace &&
        owner?.kind === 'ReplicaSet' &&
        replicaSetUids.has(owner.uid) &&
        !isTerminating(pod.metadata)
      );
    })
    .map((pod) => {
      const name = pod.metadata?.name ?? '';
      return {
        pod: name,
        ready:
          pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
        state: replicaState(input.reports.get(name), input.policy, generation),
      };
    });
}

function replicaState(
  report: PolicyReport | undefined,
  policy: Policy,
  generation: number,
): ReplicaState {
  if (report === undefined || report.kind === 'absent')
    return { kind: 'pending', detail: 'no report yet' };
  if (report.kind === 'invalid')
    return {
      kind: 'failed',
      message: `invalid ${REPORT_ANNOTATION} annotation: ${report.reason}`,
    };
  const entry = report.entry;
  if (entry === undefined) return { kind: 'pending', detail: 'policy not reported yet' };
  // A Policy deleted and created again restarts at generation 1: only the uid tells the
  // entries about its namesake apart, whatever they say (Failed included).
  if (entry.uid !== policy.metadata.uid) {
    return {
      kind: 'pending',
      detail: `reports an older Policy of the same name (uid ${entry.uid}, this one is ${policy.metadata.uid ?? 'unknown'})`,
    };
  }
  if (entry.generation !== generation) {
    return { kind: 'pending', detail: `reports generation ${entry.generation}, not ${generation}` };
  }
  switch (entry.state) {
    case 'Loaded':
      return { kind: 'loaded' };
    case 'Loading':
      return { kind: 'pending', detail: `loading generation ${generation}` };
    case 'Failed':
      return { kind: 'failed', message: entry.message ?? 'load failed (no message)' };
  }
}

/** Events on transitions only: compared with the status written last time. */
function eventsFor(
  policy: Policy,
  status: PolicyStatus,
  readiness: Readiness,
  generation: number,
): PolicyEvent[] {
  const previous = policy.status;
  const previousState = readinessOf(previous?.conditions);
  const previousReason = previous?.conditions?.find((c) => c.type === 'Ready')?.reason;
  const event = (type: PolicyEvent['type'], reason: string, note: string): PolicyEvent => ({
    type,
    reason,
    action: 'Load',
    note: truncateUtf8(note, EVENT_NOTE_MAX_BYTES),
  });
  const events: PolicyEvent[] = [];

  if (
    readiness.state === 'Ready' &&
    (previousState !== 'Ready' || previous?.servedGeneration !== generation)
  ) {
    events.push(event('Normal', 'Loaded', `${readiness.message}; the webhook enforces it`));
  }
  const known = new Set((previous?.failures ?? []).map((f) => `${f.pod}\n${f.message}`));
  for (const failure of status.failures ?? []) {
    if (!known.has(`${failure.pod}\n${failure.message}`)) {
      events.push(
        event(
          'Warning',
          'LoadFailed',
          `pod ${failure.pod} failed to load generation ${generation}: ${failure.message}`,
        ),
      );
    }
  }
  if (readiness.state === 'Stalled' && readiness.reason !== 'LoadFailed') {
    if (previousState !== 'Stalled' || previousReason !== readiness.reason) {
      events.push(event('Warning', readiness.reason, readiness.message));
    }
  }
  return events;
}
