/**
 * computeStatus: an object's kstatus, as sigs.k8s.io/cli-utils' status.Compute.
 *
 * Order of decisions:
 *  1. no object → NotFound; not an object → Unknown;
 *  2. generic rules: deletionTimestamp → Terminating; metadata.generation ≠
 *     status.observedGeneration → InProgress (LatestGenerationNotObserved); a
 *     Reconciling=True or Stalled=True condition (first in list order) → InProgress
 *     or Failed with that condition;
 *  3. the kind's own rule (kinds.ts);
 *  4. otherwise Current — except that a Ready condition which is not True makes an
 *     unknown kind InProgress (cli-utils' table case `crdNotReady`): controllers that
 *     only set Ready, like Flux's, are then not reported Current too early.
 *
 * It never throws: a malformed status yields Unknown with the reason as message.
 */
import {
  conditionsOf,
  field,
  findCondition,
  isObject,
  MalformedObjectError,
  optionalInt,
  stringField,
} from './fields.ts';
import { groupKindKey, inProgress, KIND_RULES } from './kinds.ts';
import type { ComputeOptions, KStatus, KStatusResult } from './types.ts';

export function computeStatus(obj: unknown, options: ComputeOptions): KStatusResult {
  if (obj === undefined || obj === null)
    return { status: 'NotFound', message: 'Resource not found', conditions: [] };
  if (!isObject(obj)) return unknown('resource is not an object');
  try {
    return genericStatus(obj) ?? kindStatus(obj, options);
  } catch (error) {
    if (error instanceof MalformedObjectError) return unknown(error.message);
    throw error;
  }
}

function unknown(message: string): KStatusResult {
  return { status: 'Unknown', message, conditions: [] };
}

function genericStatus(obj: Record<string, unknown>): KStatusResult | undefined {
  const deletion = field(obj, 'metadata.deletionTimestamp');
  if (deletion !== undefined && deletion !== null && deletion !== '') {
    return { status: 'Terminating', message: 'Resource scheduled for deletion', conditions: [] };
  }

  const generation = optionalInt(obj, 'metadata.generation');
  const observed = optionalInt(obj, 'status.observedGeneration');
  // Objects without either field (many CRs, core objects) simply skip this check.
  if (generation !== undefined && observed !== undefined && generation !== observed) {
    const kind = stringField(obj, 'kind', 'Resource');
    return inProgress(
      'LatestGenerationNotObserved',
      `${kind} generation is ${generation}, but latest observed generation is ${observed}`,
    );
  }

  for (const c of conditionsOf(obj)) {
    if (c.status !== 'True') continue;
    if (c.type === 'Reconciling' || c.type === 'Stalled') {
      return {
        status: c.type === 'Reconciling' ? 'InProgress' : 'Failed',
        message: c.message,
        conditions: [{ type: c.type, status: 'True', reason: c.reason, message: c.message }],
      };
    }
  }
  return undefined;
}

function kindStatus(obj: Record<string, unknown>, options: ComputeOptions): KStatusResult {
  const rule =
    KIND_RULES[groupKindKey(stringField(obj, 'apiVersion', ''), stringField(obj, 'kind', ''))];
  if (rule) return rule(obj, options);

  const ready = findCondition(conditionsOf(obj), 'Ready');
  if (ready && ready.status !== 'True') {
    return inProgress(ready.reason || 'NotReady', ready.message || 'Resource is not Ready');
  }
  return { status: 'Current', message: 'Resource is current', conditions: [] };
}

/**
 * The status of a set of objects, as cli-utils' aggregator: any Failed → Failed;
 * else any Unknown → Unknown; all `desired` → `desired`; else InProgress.
 * An empty set has reached `desired`.
 */
export function aggregateStatus(
  statuses: readonly KStatus[],
  desired: KStatus = 'Current',
): KStatus {
  if (statuses.includes('Failed')) return 'Failed';
  if (statuses.includes('Unknown')) return 'Unknown';
  if (statuses.every((s) => s === desired)) return desired;
  return 'InProgress';
}
