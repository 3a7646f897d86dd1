// One evaluation thread of the pool (pool.ts). It keeps each policy generation it is sent
// (compiled once), evaluates requests one at a time, and may be terminated at any moment when
// an evaluation runs past its deadline.
import { setFlagsFromString } from 'node:v8';
import { parentPort, workerData } from 'node:worker_threads';
import { parseReview } from './review.ts';
import type { EngineVerdict } from './verdict.ts';

// Process-wide already (main.ts), repeated so a worker started by a test is protected too.
setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');

/** A policy generation as a thread needs it; the pool sends it once per thread. */
export interface EvalPolicy {
  code: unknown;
  /** The policy's settings, exposed as `params`. */
  params: unknown;
  /** Ignore: a failing expression is skipped, as the apiserver does for ValidatingAdmissionPolicy. */
  failurePolicy: 'Fail' | 'Ignore';
}

/**
 * What a worker is asked. The review travels as the text received and is parsed (and checked)
 * here only: a string crosses threads at memcpy speed, where the structured clone of the
 * parsed tree cost more than the parse itself.
 */
export interface EvalRequest {
  id: number;
  /** `uid/generation`: the policy generation to evaluate. */
  key: string;
  /** The AdmissionReview as received. */
  review: string;
  /** The request's Namespace as JSON (for `namespaceObject`), or null. */
  namespace: string | null;
  /** The first time this thread is asked for `key` (or after `reset`). */
  policy?: EvalPolicy;
  /** Forget every policy kept so far first (the pool bounds what a thread keeps). */
  reset?: boolean;
}

/** What a worker answers: with the request's uid once it has read the review. */
export type EvalReply =
  /** Sent once, when the engine has loaded. */
  | { id: 0; kind: 'ready' }
  | { id: number; kind: 'verdict'; uid: string; verdict: EngineVerdict }
  | { id: number; kind: 'error'; uid?: string; message: string }
  /** The review is not an AdmissionReview v1 (`message` says why). */
  | { id: number; kind: 'invalid'; message: string };

/** The part of policy-server/cel this thread uses (a test may load another engine). */
interface Engine {
  compilePolicy(
    code: never,
    fieldPath?: string,
  ): { ok: true; policy: unknown } | { ok: false; errors: string[] };
  evaluatePolicy(
    policy: never,
    input: { request: unknown; params: unknown; namespaceObject: unknown },
    options: { failurePolicy: 'Fail' | 'Ignore' },
  ): EngineVerdict;
}

/** A policy generation as kept: compiled, or why it does not compile. */
type Kept = EvalPolicy & ({ compiled: unknown } | { problem: string });

if (parentPort) {
  const port = parentPort;
  const engineUrl =
    (workerData as { engine?: string } | undefined)?.engine ??
    new URL('./cel/index.ts', import.meta.url).href;
  const engine = (await import(engineUrl)) as Engine;
  const kept = new Map<string, Kept>();

  const keep = (key: string, policy: EvalPolicy): void => {
    let result: ReturnType<Engine['compilePolicy']>;
    try {
      result = engine.compilePolicy(policy.code as never);
    } catch (err) {
      result = { ok: false, errors: [String(err)] }; // an engine bug fails this policy only
    }
    kept.set(
      key,
      result.ok
        ? { ...policy, compiled: result.policy }
        : { ...policy, problem: `does not compile: ${result.errors.join('; ')}` },
    );
  };

  const answer = (req: EvalRequest): EvalReply => {
    const { id, namespace } = req;
    if (req.reset) kept.clear();
    if (req.policy) keep(req.key, req.policy);
    const review = parseReview(req.review);
    if (!review.ok) return { id, kind: 'invalid', message: review.error };
    const { uid } = review.request;
    const policy = kept.get(req.key);
    if (!policy) return { id, kind: 'error', uid, message: `the thread lacks policy ${req.key}` };
    if ('problem' in policy) return { id, kind: 'error', uid, message: policy.problem };
    const input = {
      request: review.request,
      params: policy.params,
      // Parsed only if an expression reads namespaceObject.
      get namespaceObject(): unknown {
        return namespace === null ? null : JSON.parse(namespace);
      },
    };
    try {
      const verdict = engine.evaluatePolicy(policy.compiled as never, input, {
        failurePolicy: policy.failurePolicy,
      });
      return { id, kind: 'verdict', uid, verdict };
    } catch (err) {
      return { id, kind: 'error', uid, message: err instanceof Error ? err.message : String(err) };
    }
  };

  port.postMessage({ id: 0, kind: 'ready' } satisfies EvalReply);
  port.on('message', (req: EvalRequest) => port.postMessage(answer(req)));
}
