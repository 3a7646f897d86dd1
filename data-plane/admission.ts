/**
 * `POST /validate/<policy>/<generation>`: one AdmissionReview v1 in, one out. The webhook's
 * path pins the generation it serves, so a replica answers with exactly that generation, or
 * (when it has not loaded it) by that generation's failurePolicy, saying so.
 */
import type { Target } from './lifecycle.ts';
import type { PoolJob, PoolOutcome } from './pool.ts';
import { parseReview, type ParsedReview } from './review.ts';
import { actionsOf, type ValidationAction } from '../api/v1alpha1.ts';
import {
  admissionResponse,
  type Outcome,
  type PolicyAnswerContext,
  type VerdictLabel,
} from './verdict.ts';

/**
 * The largest AdmissionReview accepted by default (`--max-review-bytes`): the apiserver takes
 * a request body of up to 3 MiB, so an UPDATE's `object` and `oldObject` are up to 6 MiB as
 * JSON, with the request around them; 8 MiB fits that.
 */
export const DEFAULT_MAX_REVIEW_BYTES = 8 * 1024 * 1024;

/**
 * The evaluation deadline of a policy: its `timeoutSeconds` (the apiserver's limit for the
 * whole webhook call) less 500 ms for the network and the answer, and at least 200 ms.
 */
export function deadlineMs(timeoutSeconds: number): number {
  return Math.max(200, timeoutSeconds * 1000 - 500);
}

export interface AdmissionDeps {
  target(policy: string, generation: number): Target;
  /** The request's Namespace object for `namespaceObject` (null when unknown). */
  namespace?(name: string | undefined): unknown;
  evaluate(job: PoolJob, deadlineMs: number): Promise<PoolOutcome>;
  /**
   * Evaluates `job` on this thread when its generation's cost is bounded and the review is
   * small (inline.ts); undefined: `evaluate` (the pool) answers it.
   */
  inline?(job: PoolJob): PoolOutcome | undefined;
}

/** Which path evaluated a request: this thread, or the pool's threads. */
export type EvaluationPath = 'inline' | 'pool';

export interface AdmissionResult {
  status: number;
  body: unknown;
  /** For metrics and logs; absent when the request was refused before evaluation. */
  verdict?: VerdictLabel;
  /** Absent when nothing was evaluated (a generation not loaded here, an invalid review). */
  path?: EvaluationPath;
}

/** A Namespace's JSON, written once per version of it (the watch replaces the object on change). */
const namespaceTexts = new WeakMap<object, string>();
function namespaceJson(namespace: unknown): string | null {
  if (typeof namespace !== 'object' || namespace === null) return null;
  let text = namespaceTexts.get(namespace);
  if (text === undefined) namespaceTexts.set(namespace, (text = JSON.stringify(namespace)));
  return text;
}

/**
 * Whether a policy's code may read `namespaceObject`: no expression can without the word, so
 * a policy whose code never has it needs no Namespace (once per generation's code).
 */
const namespaceReaders = new WeakMap<object, boolean>();
function readsNamespace(code: unknown): boolean {
  if (typeof code !== 'object' || code === null) return true;
  let reads = namespaceReaders.get(code);
  if (reads === undefined)
    namespaceReaders.set(code, (reads = JSON.stringify(code).includes('namespaceObject')));
  return reads;
}

const invalid = (error: string): AdmissionResult => ({ status: 400, body: { error } });

/** A review judged: its outcome, the request's uid and what answers it (the policy's actions). */
export interface Judgement {
  outcome: Outcome;
  uid: string;
  ctx: PolicyAnswerContext;
  path?: EvaluationPath;
}

/**
 * Judges one AdmissionReview body with `policy` at `generation`: the part of admission that
 * the audit shares, so both judge alike. Never throws; a result instead of a judgement when
 * the request is refused before evaluation (an unknown policy, an invalid review).
 */
export async function judge(
  body: string,
  policy: string,
  generation: number,
  deps: AdmissionDeps,
  overloaded?: string,
): Promise<Judgement | { refused: AdmissionResult }> {
  const target = deps.target(policy, generation);
  // A webhook for a Policy this server does not have: an error, so the apiserver applies
  // the webhook's own failurePolicy (this replica knows no better one).
  if (target.kind === 'unknown')
    return {
      refused: {
        status: 404,
        body: { error: `policy ${policy} is not assigned to this policy server (or was deleted)` },
        verdict: 'error',
      },
    };

  // The evaluation (inline or in a thread) reads the review. This thread parses it only for
  // what the evaluation does not give: the Namespace of a policy that reads namespaceObject, and the uid of a
  // request the thread did not answer (a generation not loaded here, a deadline passed).
  let parsed: ParsedReview | undefined;
  const read = () => (parsed ??= parseReview(body));
  let outcome: Outcome;
  let uid: string | undefined;
  let answers: { actions: readonly ValidationAction[]; failurePolicy: 'Fail' | 'Ignore' };
  let path: EvaluationPath | undefined;
  if (target.kind === 'unavailable') {
    outcome = { kind: 'unavailable', message: target.message };
    answers = target;
  } else {
    const { spec } = target;
    answers = { actions: actionsOf(spec), failurePolicy: spec.failurePolicy };
    if (overloaded !== undefined) outcome = { kind: 'unavailable', message: overloaded };
    else {
      let namespace: string | null = null;
      if (deps.namespace && readsNamespace(target.code)) {
        const review = read();
        if (!review.ok) return { refused: invalid(review.error) };
        namespace = namespaceJson(deps.namespace(review.request.namespace));
      }
      const job: PoolJob = {
        key: target.key,
        policy: { code: target.code, params: spec.settings, failurePolicy: spec.failurePolicy },
        review: body,
        namespace,
      };
      let answer = deps.inline?.(job);
      path = answer ? 'inline' : 'pool';
      answer ??= await deps.evaluate(job, deadlineMs(spec.timeoutSeconds));
      if (answer.kind === 'invalid') return { refused: invalid(answer.message) };
      outcome = answer;
      uid = answer.uid;
    }
  }
  if (uid === undefined) {
    const review = read();
    if (!review.ok) return { refused: invalid(review.error) };
    uid = review.request.uid;
  }
  return { outcome, uid, ctx: { policy, generation, ...answers }, ...(path && { path }) };
}

/**
 * Answers one AdmissionReview body for `policy` at `generation`. Never throws. `overloaded`:
 * the replica has no room for another evaluation, so a loaded generation is answered at once
 * by its failurePolicy with that message, as one not loaded here is.
 */
export async function review(
  body: string,
  policy: string,
  generation: number,
  deps: AdmissionDeps,
  overloaded?: string,
): Promise<AdmissionResult> {
  const judged = await judge(body, policy, generation, deps, overloaded);
  if ('refused' in judged) return judged.refused;
  const { response, verdict } = admissionResponse(judged.uid, judged.ctx, judged.outcome);
  return {
    status: 200,
    body: { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response },
    verdict,
    ...(judged.path && { path: judged.path }),
  };
}
