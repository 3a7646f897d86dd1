/**
 * From an evaluation outcome to the AdmissionReview response, as a pure function:
 * - allowed: allowed, with the engine's warnings;
 * - a failed validation: the policy's validationActions decide (Deny: denied with the
 *   validation's message, reason and code; Warn: allowed with the message as a warning; Audit:
 *   an audit annotation);
 * - an evaluation that errs, runs past its deadline or its cost budget, or a generation this
 *   replica has not loaded: failurePolicy Ignore allows it with a warning; Fail makes it a
 *   failed validation (an InternalError), through the actions as above.
 */
import type { ValidationAction } from '../api/v1alpha1.ts';
import { formatCost } from './cel/budget.ts';
import { clip } from './lifecycle.ts';

/** The engine's verdict (`Verdict` of data-plane/cel). */
export interface EngineVerdict {
  allowed: boolean;
  message?: string;
  reason?: string;
  code?: number;
  warnings?: string[];
  /** Cost units the evaluation used. */
  cost?: number;
  /** A matchCondition excluded the request: allowed without validating. */
  skipped?: boolean;
}

export type Outcome =
  | { kind: 'verdict'; verdict: EngineVerdict }
  /** The expression failed at run time (no such key, a type error, ...). */
  | { kind: 'error'; message: string }
  | { kind: 'timeout'; ms: number }
  /** The evaluation ran past its cost budget (units); `used`: when it stopped. */
  | { kind: 'cost'; budget: number; used?: number }
  /** This replica cannot evaluate the generation the webhook asked for. */
  | { kind: 'unavailable'; message: string };

export interface PolicyAnswerContext {
  policy: string;
  generation: number;
  /** What a failed validation does (actionsOf the spec). */
  actions: readonly ValidationAction[];
  failurePolicy: 'Fail' | 'Ignore';
}

/** admission.k8s.io/v1 AdmissionResponse, as this server fills it. */
export interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  status?: { code: number; message: string; reason?: string };
  warnings?: string[];
  /** Added to the request's audit event, each key prefixed with the webhook's name. */
  auditAnnotations?: Record<string, string>;
}

/** The metrics label of an answer (`cost`: past the runtime cost budget). */
export type VerdictLabel = 'allowed' | 'denied' | 'error' | 'timeout' | 'cost';

const REASON_CODES: Record<string, number> = {
  Unauthorized: 401,
  Forbidden: 403,
  Invalid: 422,
  RequestEntityTooLarge: 413,
};

/** The apiserver shows warnings to clients; keep them short, as it truncates long ones. */
const MAX_WARNING_CHARS = 512;
const warning = (text: string) =>
  text.length <= MAX_WARNING_CHARS ? text : `${text.slice(0, MAX_WARNING_CHARS - 1)}…`;

export function admissionResponse(
  uid: string,
  ctx: PolicyAnswerContext,
  outcome: Outcome,
): { response: AdmissionResponse; verdict: VerdictLabel } {
  const who = `policy ${ctx.policy} generation ${ctx.generation}`;
  if (outcome.kind === 'verdict') {
    const v = outcome.verdict;
    const warnings = (v.warnings ?? []).map(warning);
    if (v.allowed)
      return { response: withWarnings({ uid, allowed: true }, warnings), verdict: 'allowed' };
    const reason = v.reason ?? 'Forbidden';
    const failure = {
      message: v.message ?? `denied by ${who}`,
      reason,
      code: v.code ?? REASON_CODES[reason] ?? 403,
    };
    return failed(uid, ctx, failure, warnings, 'denied');
  }
  const label: VerdictLabel =
    outcome.kind === 'timeout' || outcome.kind === 'cost' ? outcome.kind : 'error';
  const problem = problemOf(ctx, outcome);
  if (ctx.failurePolicy === 'Ignore')
    return {
      response: {
        uid,
        allowed: true,
        warnings: [warning(`${problem} (failurePolicy Ignore: allowed)`)],
      },
      verdict: label,
    };
  // failurePolicy Fail: the failure goes through the validation actions, as the apiserver's
  // ValidatingAdmissionPolicy does (a Warn-only or Audit-only policy never denies).
  const failure = { message: problem, reason: 'InternalError', code: 500 };
  return failed(uid, ctx, failure, [], label);
}

/** What went wrong with an evaluation that gave no verdict, naming the policy and generation. */
export function problemOf(
  ctx: Pick<PolicyAnswerContext, 'policy' | 'generation'>,
  outcome: Exclude<Outcome, { kind: 'verdict' }>,
): string {
  const who = `policy ${ctx.policy} generation ${ctx.generation}`;
  switch (outcome.kind) {
    case 'timeout':
      return `${who} timed out: did not finish within ${outcome.ms} ms`;
    case 'cost':
      return `${who} exceeded its runtime cost budget ${formatCost(outcome.budget)}`;
    case 'error':
      return `${who} failed: ${outcome.message}`;
    case 'unavailable':
      return outcome.message;
  }
}

/**
 * A failed validation (or a failure under failurePolicy Fail) through the policy's actions:
 * Deny denies with the message, Warn admits with it as a warning, Audit adds it to the
 * request's audit event (`<webhook name>/validation_failure`, as the apiserver prefixes it).
 */
function failed(
  uid: string,
  ctx: PolicyAnswerContext,
  failure: { message: string; reason: string; code: number },
  warnings: string[],
  label: VerdictLabel,
): { response: AdmissionResponse; verdict: VerdictLabel } {
  const deny = ctx.actions.includes('Deny');
  const response: AdmissionResponse = deny
    ? { uid, allowed: false, status: failure }
    : { uid, allowed: true };
  const shown = ctx.actions.includes('Warn')
    ? [...warnings, warning(`${ctx.policy} would deny: ${failure.message}`)]
    : warnings;
  if (ctx.actions.includes('Audit'))
    response.auditAnnotations = {
      [AUDIT_ANNOTATION_KEY]: auditValue(ctx, failure.message),
    };
  return {
    response: withWarnings(response, shown),
    verdict: deny || label !== 'denied' ? label : 'allowed',
  };
}

/** The key of the audit annotation an Audit action adds (the apiserver prefixes the webhook's name). */
export const AUDIT_ANNOTATION_KEY = 'validation_failure';
/** An audit annotation's value stays well under the audit event's limits. */
const MAX_AUDIT_MESSAGE_CHARS = 4096;

/** As ValidatingAdmissionPolicy's `validation_failure`: a JSON list of what failed. */
function auditValue(ctx: PolicyAnswerContext, message: string): string {
  return JSON.stringify([
    {
      message: clip(message, MAX_AUDIT_MESSAGE_CHARS),
      policy: ctx.policy,
      generation: ctx.generation,
      validationActions: ctx.actions,
    },
  ]);
}

function withWarnings(response: AdmissionResponse, warnings: string[]): AdmissionResponse {
  return warnings.length > 0 ? { ...response, warnings } : response;
}
