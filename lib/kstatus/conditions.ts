/**
 * Condition helpers for the status rollcall writes, following kstatus conventions
 * (as Flux's runtime/conditions):
 *
 * - `Ready` is always present; `Reconciling` and `Stalled` only when True, never both;
 *   `Ready=True` excludes both. `setReadiness` is the only way the cores touch them.
 * - `lastTransitionTime` changes only when status, reason or message change.
 * - every condition is stamped with the observedGeneration it describes.
 * - reasons match metav1.Condition's pattern; messages are capped at 32768 bytes,
 *   cut on a UTF-8 character boundary.
 *
 * All functions are pure: they return new arrays and take the clock as an argument.
 */
import type { Condition } from '../../api/v1alpha1.ts';

const REASON_PATTERN = /^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$/;
const REASON_MAX_LENGTH = 1024;
export const MESSAGE_MAX_BYTES = 32768;

export type ConditionStatus = 'True' | 'False' | 'Unknown';

export interface ConditionInput {
  type: string;
  status: ConditionStatus;
  reason: string;
  message: string;
}

export function isValidReason(reason: string): boolean {
  return reason.length <= REASON_MAX_LENGTH && REASON_PATTERN.test(reason);
}

/**
 * A valid reason made from an untrusted one (e.g. another controller's condition):
 * invalid characters become `_`, and an unusable result falls back to `fallback`.
 */
export function toValidReason(reason: string, fallback: string): string {
  const cleaned = reason
    .replace(/[^A-Za-z0-9_,:]/g, '_')
    .replace(/^[^A-Za-z]+/, '')
    .replace(/[,:]+$/, '')
    .slice(0, REASON_MAX_LENGTH)
    .replace(/[,:]+$/, '');
  return isValidReason(cleaned) ? cleaned : fallback;
}

const ELLIPSIS = '…';
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Cuts `message` to at most `maxBytes` UTF-8 bytes without splitting a character. */
export function truncateUtf8(message: string, maxBytes: number = MESSAGE_MAX_BYTES): string {
  const bytes = encoder.encode(message);
  if (bytes.length <= maxBytes) return message;
  let end = Math.max(0, maxBytes - encoder.encode(ELLIPSIS).length);
  // 0b10xxxxxx is a continuation byte: back up to the start of that character.
  while (end > 0 && ((bytes[end] ?? 0) & 0xc0) === 0x80) end--;
  return decoder.decode(bytes.subarray(0, end)) + ELLIPSIS;
}

export function findCondition(
  conditions: readonly Condition[] | undefined,
  type: string,
): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}

/**
 * Sets one condition. The reason must be valid (reasons are the program's own
 * constants, so an invalid one is a bug and throws); the message is truncated.
 */
export function setCondition(
  conditions: readonly Condition[] | undefined,
  input: ConditionInput,
  observedGeneration: number | undefined,
  now: Date,
): Condition[] {
  if (!isValidReason(input.reason)) {
    throw new TypeError(
      `condition reason ${JSON.stringify(input.reason)} does not match ${REASON_PATTERN}`,
    );
  }
  const message = truncateUtf8(input.message);
  const previous = findCondition(conditions, input.type);
  const changed =
    previous === undefined ||
    previous.status !== input.status ||
    previous.reason !== input.reason ||
    previous.message !== message;
  const next: Condition = {
    type: input.type,
    status: input.status,
    reason: input.reason,
    message,
    lastTransitionTime: changed ? now.toISOString() : previous.lastTransitionTime,
    ...(observedGeneration === undefined ? {} : { observedGeneration }),
  };
  const list = [...(conditions ?? [])];
  const index = list.findIndex((c) => c.type === input.type);
  if (index === -1) list.push(next);
  else list[index] = next;
  return list;
}

function removeCondition(conditions: readonly Condition[] | undefined, type: string): Condition[] {
  return (conditions ?? []).filter((c) => c.type !== type);
}

/** The three states kstatus distinguishes, each with why. */
export type Readiness =
  | { state: 'Ready'; reason: string; message: string }
  | { state: 'Reconciling'; reason: string; message: string }
  | { state: 'Stalled'; reason: string; message: string };

/**
 * Sets Ready, Reconciling and Stalled together so they are always consistent:
 * Ready carries the same reason and message as the abnormal condition when not Ready.
 * Other condition types are kept as they are; Ready comes first.
 */
export function setReadiness(
  conditions: readonly Condition[] | undefined,
  readiness: Readiness,
  observedGeneration: number | undefined,
  now: Date,
): Condition[] {
  const { state, reason, message } = readiness;
  let list = setCondition(
    conditions,
    { type: 'Ready', status: state === 'Ready' ? 'True' : 'False', reason, message },
    observedGeneration,
    now,
  );
  for (const abnormal of ['Reconciling', 'Stalled'] as const) {
    list =
      state === abnormal
        ? setCondition(
            list,
            { type: abnormal, status: 'True', reason, message },
            observedGeneration,
            now,
          )
        : removeCondition(list, abnormal);
  }
  const rank = (c: Condition): number => {
    const index = ['Ready', 'Reconciling', 'Stalled'].indexOf(c.type);
    return index === -1 ? 3 : index;
  };
  return list.sort((a, b) => rank(a) - rank(b));
}

/** The readiness the conditions describe, if they follow the rules above. */
export function readinessOf(
  conditions: readonly Condition[] | undefined,
): Readiness['state'] | undefined {
  if (findCondition(conditions, 'Ready')?.status === 'True') return 'Ready';
  if (findCondition(conditions, 'Stalled')?.status === 'True') return 'Stalled';
  if (findCondition(conditions, 'Reconciling')?.status === 'True') return 'Reconciling';
  return undefined;
}
