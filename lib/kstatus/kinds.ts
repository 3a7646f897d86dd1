/**
 * Per-kind readiness rules, one small function per kind, following kstatus' core.go.
 * They run only when the generic rules (`genericStatus` in compute.ts) reached no decision.
 */
import {
  boolField,
  conditionsOf,
  findCondition,
  intField,
  isObject,
  field,
  MalformedObjectError,
  optionalInt,
  stringField,
} from './fields.ts';
import type { ComputeOptions, KStatusResult } from './types.ts';

export type KindRule = (obj: unknown, options: ComputeOptions) => KStatusResult;

/** How long a pod may be unschedulable before it counts as Failed (kstatus' ScheduleWindow). */
export const SCHEDULE_WINDOW_MS = 15_000;

const INT32_MAX = 2147483647;

export function current(message: string): KStatusResult {
  return { status: 'Current', message, conditions: [] };
}

export function inProgress(reason: string, message: string): KStatusResult {
  return {
    status: 'InProgress',
    message,
    conditions: [{ type: 'Reconciling', status: 'True', reason, message }],
  };
}

export function failed(reason: string, message: string): KStatusResult {
  return {
    status: 'Failed',
    message,
    conditions: [{ type: 'Stalled', status: 'True', reason, message }],
  };
}

const alwaysReady: KindRule = () => current('Resource is always ready');

/** The replica counts the workload controllers publish, with kstatus' defaults. */
function replicaCounts(obj: unknown) {
  return {
    specReplicas: intField(obj, 'spec.replicas', 1),
    statusReplicas: intField(obj, 'status.replicas', 0),
    ready: intField(obj, 'status.readyReplicas', 0),
    available: intField(obj, 'status.availableReplicas', 0),
    updated: intField(obj, 'status.updatedReplicas', 0),
  };
}

/** More pods than desired: the surplus is still terminating. */
const pendingTermination = (extra: number) =>
  inProgress('ExtraPods', `Pending termination: ${extra}`);

const service: KindRule = (obj) => {
  const type = stringField(obj, 'spec.type', 'ClusterIP');
  if (type === 'LoadBalancer' && stringField(obj, 'spec.clusterIP', '') === '') {
    return inProgress('NoIPAssigned', 'ClusterIP not set. Service type: LoadBalancer');
  }
  return current('Service is ready');
};

const pod: KindRule = (obj, { now }) => {
  const conditions = conditionsOf(obj);
  const phase = stringField(obj, 'status.phase', '');
  switch (phase) {
    case 'Succeeded':
      return current('Pod has completed successfully');
    case 'Failed':
      // A finished pod is as done as it will get: kstatus reports it Current.
      return current('Pod has completed, but not successfully');
    case 'Running': {
      if (findCondition(conditions, 'Ready', 'True')) return current('Pod is Ready');
      const crashLooping = crashLoopingContainers(obj);
      if (crashLooping.length > 0) {
        return failed(
          'ContainerCrashLooping',
          `Containers in CrashLoop state: ${crashLooping.join(',')}`,
        );
      }
      return inProgress('PodRunningNotReady', 'Pod is running but is not Ready');
    }
    case 'Pending': {
      const scheduled = findCondition(conditions, 'PodScheduled', 'False');
      if (scheduled?.reason === 'Unschedulable') {
        const created = Date.parse(stringField(obj, 'metadata.creationTimestamp', ''));
        // No creation time means we cannot tell how long it has waited: it is not young.
        if (!Number.isNaN(created) && now.getTime() - SCHEDULE_WINDOW_MS < created) {
          return inProgress('PodNotScheduled', 'Pod has not been scheduled');
        }
        return failed('PodUnschedulable', 'Pod could not be scheduled');
      }
      return inProgress('PodPending', 'Pod is in the Pending phase');
    }
    case '':
      return inProgress('PodNotObserved', 'Pod phase not available');
    default:
      throw new MalformedObjectError(`unknown phase ${phase}`);
  }
};

function crashLoopingContainers(obj: unknown): string[] {
  const statuses = field(obj, 'status.containerStatuses');
  if (!Array.isArray(statuses)) return [];
  return statuses
    .filter((cs) => isObject(cs) && field(cs, 'state.waiting.reason') === 'CrashLoopBackOff')
    .map((cs) => stringField(cs, 'name', ''))
    .filter((name) => name !== '');
}

const persistentVolumeClaim: KindRule = (obj) => {
  const phase = stringField(obj, 'status.phase', 'unknown');
  if (phase !== 'Bound') return inProgress('NotBound', `PVC is not Bound. phase: ${phase}`);
  return current('PVC is Bound');
};

const statefulSet: KindRule = (obj) => {
  // OnDelete means the user rolls pods by hand: nothing for us to wait for.
  if (stringField(obj, 'spec.updateStrategy.type', '') === 'OnDelete') {
    return current('StatefulSet is using the ondelete update strategy');
  }
  const { specReplicas, ready, updated, statusReplicas } = replicaCounts(obj);
  const currentReplicas = intField(obj, 'status.currentReplicas', 0);
  const partition = intField(obj, 'spec.updateStrategy.rollingUpdate.partition', -1);

  if (specReplicas > statusReplicas)
    return inProgress('LessReplicas', `Replicas: ${statusReplicas}/${specReplicas}`);
  if (specReplicas > ready) return inProgress('LessReady', `Ready: ${ready}/${specReplicas}`);
  if (statusReplicas > specReplicas) return pendingTermination(statusReplicas - specReplicas);
  if (partition !== -1) {
    if (updated < specReplicas - partition) {
      return inProgress('PartitionRollout', `updated: ${updated}/${specReplicas - partition}`);
    }
    return current(`Partition rollout complete. updated: ${updated}`);
  }
  if (specReplicas > currentReplicas)
    return inProgress('LessCurrent', `current: ${currentReplicas}/${specReplicas}`);
  if (
    stringField(obj, 'status.currentRevision', '') !== stringField(obj, 'status.updateRevision', '')
  ) {
    return inProgress('RevisionMismatch', 'Waiting for updated revision to match current');
  }
  return current(`All replicas scheduled as expected. Replicas: ${statusReplicas}`);
};

const deployment: KindRule = (obj) => {
  // Without progressDeadlineSeconds the controller never sets Progressing, so it cannot gate.
  let progressing = intField(obj, 'spec.progressDeadlineSeconds', INT32_MAX) === INT32_MAX;
  let availableCondition = false;
  for (const c of conditionsOf(obj)) {
    if (c.type === 'Progressing') {
      if (c.reason === 'ProgressDeadlineExceeded') {
        return {
          status: 'Failed',
          message: 'Progress deadline exceeded',
          conditions: [{ type: 'Stalled', status: 'True', reason: c.reason, message: c.message }],
        };
      }
      if (c.status === 'True' && c.reason === 'NewReplicaSetAvailable') progressing = true;
    } else if (c.type === 'Available' && c.status === 'True') {
      availableCondition = true;
    }
  }
  const { specReplicas, statusReplicas, updated, ready, available } = replicaCounts(obj);

  if (specReplicas > statusReplicas)
    return inProgress('LessReplicas', `Replicas: ${statusReplicas}/${specReplicas}`);
  if (specReplicas > updated)
    return inProgress('LessUpdated', `Updated: ${updated}/${specReplicas}`);
  if (statusReplicas > specReplicas) return pendingTermination(statusReplicas - specReplicas);
  if (updated > available) return inProgress('LessAvailable', `Available: ${available}/${updated}`);
  if (specReplicas > ready) return inProgress('LessReady', `Ready: ${ready}/${specReplicas}`);
  if (!progressing) return inProgress('ReplicaSetNotAvailable', 'ReplicaSet not Available');
  if (!availableCondition) return inProgress('DeploymentNotAvailable', 'Deployment not Available');
  return current(`Deployment is available. Replicas: ${statusReplicas}`);
};

const replicaSet: KindRule = (obj) => {
  if (findCondition(conditionsOf(obj), 'ReplicaFailure', 'True')) {
    return inProgress('ReplicaFailure', 'Replica Failure condition. Check Pods');
  }
  const { specReplicas, statusReplicas, ready, available } = replicaCounts(obj);
  const labelled = intField(obj, 'status.fullyLabeledReplicas', 0);

  if (specReplicas > labelled)
    return inProgress('LessLabelled', `Labelled: ${labelled}/${specReplicas}`);
  if (specReplicas > available)
    return inProgress('LessAvailable', `Available: ${available}/${specReplicas}`);
  if (specReplicas > ready) return inProgress('LessReady', `Ready: ${ready}/${specReplicas}`);
  if (statusReplicas > specReplicas) return pendingTermination(statusReplicas - specReplicas);
  return current(`ReplicaSet is available. Replicas: ${statusReplicas}`);
};

const daemonSet: KindRule = (obj) => {
  // The generic check skips an absent observedGeneration; once the DaemonSet controller
  // has acted both fields exist, so their absence means "not observed yet".
  const kind = stringField(obj, 'kind', 'DaemonSet');
  if (optionalInt(obj, 'metadata.generation') === undefined) {
    const message = `${kind} metadata.generation not found`;
    return inProgress('NoGeneration', message);
  }
  if (optionalInt(obj, 'status.observedGeneration') === undefined) {
    return inProgress('NoObservedGeneration', `${kind} status.observedGeneration not found`);
  }
  const desired = intField(obj, 'status.desiredNumberScheduled', -1);
  const currentScheduled = intField(obj, 'status.currentNumberScheduled', 0);
  const updated = intField(obj, 'status.updatedNumberScheduled', 0);
  const available = intField(obj, 'status.numberAvailable', 0);
  const ready = intField(obj, 'status.numberReady', 0);

  if (desired === -1)
    return inProgress('NoDesiredNumber', 'Missing .status.desiredNumberScheduled');
  if (desired > currentScheduled)
    return inProgress('LessCurrent', `Current: ${currentScheduled}/${desired}`);
  if (desired > updated) return inProgress('LessUpdated', `Updated: ${updated}/${desired}`);
  if (desired > available) return inProgress('LessAvailable', `Available: ${available}/${desired}`);
  if (desired > ready) return inProgress('LessReady', `Ready: ${ready}/${desired}`);
  return current(`All replicas scheduled as expected. Replicas: ${desired}`);
};

/**
 * The generic generation check already ran, and the disruption controller sets no
 * conditions, so an observed PDB is as current as kstatus can tell.
 */
const podDisruptionBudget: KindRule = () => current('AllowedDisruptions has been computed.');

const job: KindRule = (obj) => {
  const parallelism = intField(obj, 'spec.parallelism', 1);
  const completions = intField(obj, 'spec.completions', parallelism);
  const succeeded = intField(obj, 'status.succeeded', 0);
  const active = intField(obj, 'status.active', 0);
  const failedPods = intField(obj, 'status.failed', 0);
  for (const c of conditionsOf(obj)) {
    if (c.status !== 'True') continue;
    if (c.type === 'Complete')
      return current(`Job Completed. succeeded: ${succeeded}/${completions}`);
    if (c.type === 'Failed')
      return failed('JobFailed', `Job Failed. failed: ${failedPods}/${completions}`);
    // A suspended job is not converging, nor is it waiting on anything. The condition alone
    // is not enough: a Job resuming (spec.suspend false) still carries Suspended=True until
    // the controller sees it, and is then InProgress like any Job not started.
    if (c.type === 'Suspended' && boolField(obj, 'spec.suspend', false))
      return current('Job is suspended');
  }
  if (stringField(obj, 'status.startTime', '') === '')
    return inProgress('JobNotStarted', 'Job not started');
  return current(`Job in progress. success:${succeeded}, active: ${active}, failed: ${failedPods}`);
};

const customResourceDefinition: KindRule = (obj) => {
  for (const c of conditionsOf(obj)) {
    if (c.type === 'NamesAccepted' && c.status === 'False') return failed(c.reason, c.message);
    if (c.type === 'Established') {
      if (c.status === 'False' && c.reason !== 'Installing') return failed(c.reason, c.message);
      if (c.status === 'True') return current('CRD is established');
    }
  }
  return inProgress('Installing', 'Install in progress');
};

/** Keyed by `group/Kind`, or just `Kind` for the core group. */
export const KIND_RULES: Readonly<Record<string, KindRule>> = {
  Service: service,
  Pod: pod,
  Secret: alwaysReady,
  ConfigMap: alwaysReady,
  PersistentVolumeClaim: persistentVolumeClaim,
  'apps/StatefulSet': statefulSet,
  'apps/DaemonSet': daemonSet,
  'extensions/DaemonSet': daemonSet,
  'apps/Deployment': deployment,
  'extensions/Deployment': deployment,
  'apps/ReplicaSet': replicaSet,
  'extensions/ReplicaSet': replicaSet,
  'policy/PodDisruptionBudget': podDisruptionBudget,
  'batch/Job': job,
  'batch/CronJob': alwaysReady,
  'apiextensions.k8s.io/CustomResourceDefinition': customResourceDefinition,
};

export function groupKindKey(apiVersion: string, kind: string): string {
  const slash = apiVersion.indexOf('/');
  return slash === -1 ? kind : `${apiVersion.slice(0, slash)}/${kind}`;
}
