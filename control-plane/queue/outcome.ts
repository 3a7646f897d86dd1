// What a handler says happened. controller-runtime's four results, plus the two HTTP cases
// the queue treats specially because they are not the object's fault.

export type Outcome =
  /** Converged; forget the key's failures. */
  | { kind: 'done' }
  /** Converged for now; run again after `delayMs` (e.g. a deadline to check). Resets failures. */
  | { kind: 'requeueAfter'; delayMs: number }
  /** Failed, may succeed later: run again after per-key exponential backoff. */
  | { kind: 'retry'; error: Error }
  /** Will not succeed without a change: no retry; the job stays in the failed set with the reason. */
  | { kind: 'terminal'; reason: string }
  /** The API server said 429: run again after `delayMs` (its Retry-After); not a failure. */
  | { kind: 'throttled'; delayMs: number }
  /** The API server said 409: re-read and run again at once; not a failure. */
  | { kind: 'conflict' };

export type OutcomeKind = Outcome['kind'];

export const done = (): Outcome => ({ kind: 'done' });
export const requeueAfter = (delayMs: number): Outcome => ({
  kind: 'requeueAfter',
  delayMs: Math.max(0, delayMs),
});
export const retry = (error: Error): Outcome => ({ kind: 'retry', error });
export const terminal = (reason: string): Outcome => ({ kind: 'terminal', reason });

/** Throw this (or return `terminal(reason)`) for errors that retrying cannot fix. */
export class TerminalError extends Error {
  override name = 'TerminalError';
}

/** What the queue does next, decided purely from an outcome and the key's failure count. */
export type Next =
  | { type: 'finish'; failures: 0 }
  | { type: 'rerun'; delayMs: number; failures: number }
  | { type: 'fail'; reason: string; failures: 0 };

export function nextStep(
  outcome: Outcome,
  failures: number,
  backoff: (failures: number) => number,
): Next {
  switch (outcome.kind) {
    case 'done':
      return { type: 'finish', failures: 0 };
    case 'requeueAfter':
      return { type: 'rerun', delayMs: outcome.delayMs, failures: 0 };
    case 'retry':
      return { type: 'rerun', delayMs: backoff(failures + 1), failures: failures + 1 };
    case 'terminal':
      return { type: 'fail', reason: outcome.reason, failures: 0 };
    case 'throttled':
      return { type: 'rerun', delayMs: outcome.delayMs, failures };
    case 'conflict':
      return { type: 'rerun', delayMs: 0, failures };
  }
}

export function describeOutcome(outcome: Outcome): string {
  switch (outcome.kind) {
    case 'retry':
      return outcome.error.message;
    case 'terminal':
      return outcome.reason;
    case 'requeueAfter':
    case 'throttled':
      return `${outcome.kind} ${outcome.delayMs} ms`;
    default:
      return outcome.kind;
  }
}
