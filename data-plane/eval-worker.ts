// One evaluation thread of the pool (pool.ts). It keeps each policy generation it is sent
// (compiled once), evaluates requests one at a time under the engine's per-request cost budget
// (an overrun is answered `cost`, as any outcome), and may be terminated at any moment when an
// evaluation runs past its deadline.
import { setFlagsFromString } from 'node:v8';
import { parentPort, workerData } from 'node:worker_threads';
import {
  answerReview,
  keepPolicy,
  type Answer,
  type Engine,
  type EvalPolicy,
  type KeptPolicy,
} from './evaluation.ts';

// Process-wide already (main.ts), repeated so a worker started by a test is protected too.
setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');

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

/** What a worker answers (see Answer). */
export type EvalReply =
  /** Sent once, when the engine has loaded. */
  { id: 0; kind: 'ready' } | ({ id: number } & Answer);

if (parentPort) {
  const port = parentPort;
  const engineUrl =
    (workerData as { engine?: string } | undefined)?.engine ??
    new URL('./cel/index.ts', import.meta.url).href;
  const engine = (await import(engineUrl)) as Engine;
  const kept = new Map<string, KeptPolicy>();

  const answer = (req: EvalRequest): EvalReply => {
    if (req.reset) kept.clear();
    if (req.policy) kept.set(req.key, keepPolicy(engine, req.policy));
    const reply = answerReview(engine, req.key, kept.get(req.key), req.review, req.namespace);
    return { id: req.id, ...reply };
  };

  port.postMessage({ id: 0, kind: 'ready' } satisfies EvalReply);
  port.on('message', (req: EvalRequest) => port.postMessage(answer(req)));
}
