/**
 * From an evaluation outcome to the AdmissionReview response, as a pure function:
 * - protect: the engine's verdict as it is (a denial carries the validation's message,
 *   reason and code);
 * - monitor: always allowed, with a warning naming what it would have denied;
 * - an evaluation that errs, runs past its deadline or its cost budget, or a generation this
 *   replica has not loaded: the policy's failurePolicy decides (Fail: denied, Ignore: allowed
 *   with a warning).
 */
import { formatCost } from './cel/budget.ts';

/** The engine's verdict (`Verdict` of data-plane/cel). */
export interface EngineVerdict {
  allowed: boolean;
  message?: string;
  reason?: string;
  code?: number;
  warnings?: string[];
  /** Cost units the evaluation used. */
  cost?: number;
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
  mode: 'protect' | 'monitor';
  failurePolicy: 'Fail' | 'Ignore';
}

/** admission.k8s.io/v1 AdmissionResponse, as this server fills it. */
export interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  status?: { code: number; message: string; reason?: string };
  warnings?: string[];
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
    const message = v.message ?? `denied by ${who}`;
    if (ctx.mode === 'monitor')
      return {
        response: withWarnings({ uid, allowed: true }, [
          ...warnings,
          warning(`${ctx.policy} (monitor) would deny: ${message}`),
        ]),
        verdict: 'allowed',
      };
    const reason = v.reason ?? 'Forbidden';
    const code = v.code ?? REASON_CODES[reason] ?? 403;
    return {
      response: withWarnings({ uid, allowed: false, status: { code, message, reason } }, warnings),
      verdict: 'denied',
    };
  }
  const label: VerdictLabel =
    outcome.kind === 'timeout' || outcome.kind === 'cost' ? outcome.kind : 'error';
  const problem =
    outcome.kind === 'timeout'
      ? `${who} timed out: did not finish within ${outcome.ms} ms`
      : outcome.kind === 'cost'
        ? `${who} exceeded its runtime cost budget ${formatCost(outcome.budget)}`
        : outcome.kind === 'error'
          ? `${who} failed: ${outcome.message}`
          : outcome.message;
  // Monitor mode never denies, whatever happened.
  if (ctx.failurePolicy === 'Ignore' || ctx.mode === 'monitor')
    return {
      response: {
        uid,
        allowed: true,
        warnings: [
          warning(
            `${problem} (failurePolicy ${ctx.failurePolicy}${ctx.mode === 'monitor' ? ', monitor mode' : ''}: allowed)`,
          ),
        ],
      },
      verdict: label,
    };
  return {
    response: {
      uid,
      allowed: false,
      status: { code: 500, message: problem, reason: 'InternalError' },
    },
    verdict: label,
  };
}

function withWarnings(response: AdmissionResponse, warnings: string[]): AdmissionResponse {
  return warnings.length > 0 ? { ...response, warnings } : response;
}
