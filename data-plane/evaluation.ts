// Answering one AdmissionReview with one policy generation: compile the generation once, read
// the review, evaluate, say the verdict. Pure and synchronous; an evaluation thread
// (eval-worker.ts) and the main thread's inline path (inline.ts) both call it, so the two
// paths cannot differ in what they answer.
import { parseReview } from './review.ts';
import type { EngineVerdict } from './verdict.ts';

/** A policy generation as evaluation needs it. */
export interface EvalPolicy {
  code: unknown;
  /** The policy's settings, exposed as `params`. */
  params: unknown;
  /** Ignore: a failing expression is skipped, as the apiserver does for ValidatingAdmissionPolicy. */
  failurePolicy: 'Fail' | 'Ignore';
}

/** The part of data-plane/cel evaluation uses (a test may load another engine). */
export interface Engine {
  compilePolicy(
    code: never,
    fieldPath?: string,
  ): { ok: true; policy: unknown } | { ok: false; errors: string[] };
  evaluatePolicy(
    policy: never,
    input: { request: unknown; params: unknown; namespaceObject: unknown },
    /** `budget`: cost units (the engine's default, REQUEST_COST_BUDGET, when absent). */
    options: { failurePolicy: 'Fail' | 'Ignore'; budget?: number },
  ): EngineVerdict;
}

/** A policy generation as kept: compiled, or why it does not compile. */
export type KeptPolicy = EvalPolicy & ({ compiled: unknown } | { problem: string });

/** What evaluating a review gives: with the request's uid once the review has been read. */
export type Answer =
  | { kind: 'verdict'; uid: string; verdict: EngineVerdict }
  | { kind: 'error'; uid?: string; message: string }
  /** The evaluation ran past its cost budget: never an expression's error to skip. */
  | { kind: 'cost'; uid: string; budget: number; used: number }
  /** The review is not an AdmissionReview v1 (`message` says why). */
  | { kind: 'invalid'; message: string };

/** Compiles `policy` once, to be kept for every request to its generation. */
export function keepPolicy(engine: Engine, policy: EvalPolicy): KeptPolicy {
  let result: ReturnType<Engine['compilePolicy']>;
  try {
    result = engine.compilePolicy(policy.code as never);
  } catch (err) {
    result = { ok: false, errors: [String(err)] }; // an engine bug fails this policy only
  }
  return result.ok
    ? { ...policy, compiled: result.policy }
    : { ...policy, problem: `does not compile: ${result.errors.join('; ')}` };
}

/** The engine's CostLimitExceeded (by its shape: the engine is loaded, not imported, here). */
function costOverrun(err: unknown): { budget: number; used: number } | undefined {
  if (!(err instanceof Error) || err.name !== 'CostLimitExceeded') return undefined;
  const { budget, used } = err as Error & { budget?: unknown; used?: unknown };
  return typeof budget === 'number' && typeof used === 'number' ? { budget, used } : undefined;
}

/**
 * Evaluates the review text `review` with `policy` (undefined: the caller lacks generation
 * `key`). `namespace` is the request's Namespace as JSON, parsed only if an expression reads
 * `namespaceObject`. `budget`: cost units (default: the engine's per-request budget).
 */
export function answerReview(
  engine: Engine,
  key: string,
  policy: KeptPolicy | undefined,
  review: string,
  namespace: string | null,
  budget?: number,
): Answer {
  const parsed = parseReview(review);
  if (!parsed.ok) return { kind: 'invalid', message: parsed.error };
  const { uid } = parsed.request;
  if (!policy) return { kind: 'error', uid, message: `the thread lacks policy ${key}` };
  if ('problem' in policy) return { kind: 'error', uid, message: policy.problem };
  const input = {
    request: parsed.request,
    params: policy.params,
    get namespaceObject(): unknown {
      return namespace === null ? null : JSON.parse(namespace);
    },
  };
  try {
    const verdict = engine.evaluatePolicy(policy.compiled as never, input, {
      failurePolicy: policy.failurePolicy,
      ...(budget !== undefined && { budget }),
    });
    return { kind: 'verdict', uid, verdict };
  } catch (err) {
    const overrun = costOverrun(err);
    if (overrun) return { kind: 'cost', uid, ...overrun };
    return { kind: 'error', uid, message: err instanceof Error ? err.message : String(err) };
  }
}
