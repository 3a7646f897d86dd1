/**
 * A pool of evaluation threads with a deadline per request. A thread evaluates under the full
 * cost budget (an overrun is answered `cost`), but the budget cannot interrupt one call that
 * runs long (a regular expression with a backreference), so a deadline is enforced from
 * outside too: an evaluation still running at its deadline has its thread terminated (and
 * replaced), and the caller gets `timeout`.
 *
 * The deadline counts from the call, queueing included, so a request never waits behind a
 * stuck one longer than its own deadline. To keep one stuck policy from delaying the others,
 * the pool keeps a spare: whenever no thread is idle it starts another, up to `max`; threads
 * beyond `size` stop after being idle for `idleMs`. One policy generation occupies at most
 * `perKeyMax` threads, by default one core less than the machine has, so a flood of expensive
 * requests leaves a core to the main thread (probes, inline policies) and to other policies;
 * and a request that its generation's queue would keep past its deadline (judged by how long
 * that generation's evaluations take) is answered at once instead of waiting to be cut off,
 * which would cost a thread.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { EvalReply, EvalRequest } from './eval-worker.ts';
import type { EvalPolicy } from './evaluation.ts';
import type { Outcome } from './verdict.ts';

export interface PoolOptions {
  /** Threads kept warm. Default 2. */
  size?: number;
  /** Threads at most (busy ones included). Default 8. */
  max?: number;
  /**
   * Threads one policy generation may occupy at once. Default half of `max`, at most one less
   * than the cores (at least 1).
   */
  perKeyMax?: number;
  /** A thread beyond `size` idle this long is stopped. Default 30 s. */
  idleMs?: number;
  /**
   * Heap limit of one thread in MiB. Default 256: a policy that allocates without bound
   * kills its thread (answered by failurePolicy), not the process.
   */
  maxHeapMb?: number;
  /** The engine module a thread loads (a file URL); default data-plane/cel/index.ts. */
  engine?: string;
  /** Told when a thread is terminated at a deadline or dies. */
  onWorkerLost?(reason: 'timeout' | 'crash', detail: string): void;
}

/** One request to evaluate: the policy generation `key`, described by `policy`. */
export interface PoolJob {
  key: string;
  policy: EvalPolicy;
  /** The AdmissionReview's JSON text. */
  review: string;
  /** The request's Namespace as JSON, or null. */
  namespace: string | null;
}
/**
 * An outcome of the pool: never `unavailable`; with the request's uid when the thread read
 * the review (not after a timeout or a crash), or `invalid` when it is not an AdmissionReview.
 */
export type PoolOutcome =
  | (Exclude<Outcome, { kind: 'unavailable' }> & { uid?: string })
  | { kind: 'invalid'; message: string };

interface Slot {
  worker: Worker;
  startedAt: number;
  /** The engine has loaded (the thread said so). */
  ready: boolean;
  /** Policy generations sent to this thread (it keeps them), since the last reset. */
  sent: Set<string>;
  job?: Pending;
  idleTimer?: NodeJS.Timeout;
}

interface Pending {
  id: number;
  job: PoolJob;
  deadlineMs: number;
  /** When its deadline passes (Date.now() time). */
  deadlineAt: number;
  /** When a thread took it. */
  startedAt?: number;
  /** It had to wait for a thread (no thread could take it when it came). */
  queued?: boolean;
  timer: NodeJS.Timeout;
  resolve(outcome: PoolOutcome): void;
  slot?: Slot;
}

const workerUrl = new URL('./eval-worker.ts', import.meta.url);

/** Policy generations a thread keeps at most; past it, it forgets them all and is sent anew. */
const KEPT_MAX = 256;

/** Weight of the newest evaluation in a generation's running mean of evaluation times. */
const DURATION_WEIGHT = 0.3;

export class EvaluationPool {
  readonly #size: number;
  readonly #max: number;
  readonly #perKeyMax: number;
  readonly #idleMs: number;
  readonly #options: PoolOptions;
  readonly #slots = new Set<Slot>();
  readonly #queue: Pending[] = [];
  /** Mean evaluation time (ms) per policy generation, newest weighted DURATION_WEIGHT. */
  readonly #durations = new Map<string, number>();
  #nextId = 1;
  #closed = false;
  /** `size` threads have loaded the engine once. */
  #warmed = false;

  constructor(options: PoolOptions = {}) {
    this.#options = options;
    this.#size = Math.max(1, options.size ?? 2);
    this.#max = Math.max(this.#size, options.max ?? 8);
    this.#perKeyMax = Math.max(
      1,
      options.perKeyMax ?? Math.min(Math.floor(this.#max / 2), availableParallelism() - 1),
    );
    this.#idleMs = options.idleMs ?? 30_000;
    for (let i = 0; i < this.#size; i++) this.#spawn();
  }

  /** Threads alive now, and how many of them are evaluating. */
  stats(): { threads: number; busy: number; queued: number } {
    let busy = 0;
    for (const slot of this.#slots) if (slot.job) busy++;
    return { threads: this.#slots.size, busy, queued: this.#queue.length };
  }

  /**
   * True once `size` threads have loaded the engine (readiness waits for it at start). It
   * stays true while a thread cut off at a deadline is replaced: a replica's readiness must
   * not depend on what its policies evaluate.
   */
  warm(): boolean {
    return this.#warmed;
  }

  /** Evaluates `job`, answering `timeout` once `deadlineMs` have passed, whatever happens. */
  evaluate(job: PoolJob, deadlineMs: number): Promise<PoolOutcome> {
    if (this.#closed) return Promise.resolve({ kind: 'error', message: 'the server is stopping' });
    const ahead = this.#ahead(job.key);
    // One with a thread free for it is always tried: that keeps its generation's times fresh.
    const late = ahead >= this.#perKeyMax ? this.#late(job.key, deadlineMs, ahead) : undefined;
    if (late) return Promise.resolve({ kind: 'error', message: late });
    return new Promise((resolve) => {
      const pending: Pending = {
        id: this.#nextId++,
        job,
        deadlineMs,
        deadlineAt: Date.now() + deadlineMs,
        resolve,
        timer: setTimeout(() => this.#expire(pending), deadlineMs),
      };
      this.#queue.push(pending);
      this.#pump();
      if (!pending.slot) pending.queued = true;
    });
  }

  /** Terminates every thread; queued and running requests answer `error`. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const p of this.#queue.splice(0))
      this.#settle(p, { kind: 'error', message: 'the server is stopping' });
    const slots = [...this.#slots];
    this.#slots.clear();
    for (const slot of slots) {
      clearTimeout(slot.idleTimer);
      if (slot.job) this.#settle(slot.job, { kind: 'error', message: 'the server is stopping' });
    }
    await Promise.all(slots.map((s) => s.worker.terminate()));
  }

  /** Requests of generation `key` queued or running. */
  #ahead(key: string): number {
    let ahead = 0;
    for (const p of this.#queue) if (p.job.key === key) ahead++;
    for (const slot of this.#slots) if (slot.job?.job.key === key) ahead++;
    return ahead;
  }

  /**
   * Why a request of generation `key` with `remainingMs` left, behind `ahead` others of its
   * generation, cannot finish in time; undefined when it may (or nothing is known yet).
   */
  #late(key: string, remainingMs: number, ahead: number): string | undefined {
    const mean = this.#durations.get(key);
    if (mean === undefined) return undefined;
    const rounds = Math.floor(ahead / this.#perKeyMax) + 1;
    if (rounds * mean <= remainingMs) return undefined;
    return (
      `its evaluations take ~${Math.round(mean)} ms and ${ahead} of its requests are ahead ` +
      `of this one on ${this.#perKeyMax} thread(s): it could not finish within its deadline ` +
      `(${Math.round(remainingMs)} ms left), so it was not started`
    );
  }

  #recordDuration(key: string, ms: number): void {
    const mean = this.#durations.get(key);
    if (mean === undefined && this.#durations.size >= KEPT_MAX) this.#durations.clear();
    this.#durations.set(key, mean === undefined ? ms : mean + DURATION_WEIGHT * (ms - mean));
  }

  #spawn(): Slot {
    const worker = new Worker(workerUrl, {
      workerData: { engine: this.#options.engine },
      resourceLimits: { maxOldGenerationSizeMb: this.#options.maxHeapMb ?? 256 },
      // Worker stdout would otherwise be piped through the main thread's event loop.
      stdout: false,
      stderr: false,
    });
    const slot: Slot = { worker, startedAt: Date.now(), ready: false, sent: new Set() };
    worker.on('message', (reply: EvalReply) => this.#reply(slot, reply));
    worker.on('error', (err) => this.#lost(slot, 'crash', err.message));
    worker.on('exit', (code) => this.#lost(slot, 'crash', `exited with code ${code}`));
    worker.unref();
    this.#slots.add(slot);
    return slot;
  }

  /**
   * Hands queued requests to idle threads, oldest first, but never more than `perKeyMax`
   * threads to one policy generation, so a flood of requests to an expensive policy leaves
   * threads for the others; keeps a spare thread when it can.
   */
  #pump(): void {
    if (this.#closed) return;
    const running = new Map<string, number>();
    for (const slot of this.#slots)
      if (slot.job) running.set(slot.job.job.key, (running.get(slot.job.job.key) ?? 0) + 1);
    const allowed = (p: Pending) => (running.get(p.job.key) ?? 0) < this.#perKeyMax;
    // Threads whose engine has loaded first: a spare still starting would only add its startup.
    const idle = [...this.#slots]
      .filter((s) => !s.job)
      .sort((a, b) => Number(b.ready) - Number(a.ready));
    for (let i = 0; i < this.#queue.length && idle.length > 0;) {
      const pending = this.#queue[i]!;
      if (!allowed(pending)) {
        i++;
        continue;
      }
      this.#queue.splice(i, 1);
      // After its wait, it would be cut off at its deadline, and its thread with it.
      const late = pending.queued
        ? this.#late(pending.job.key, pending.deadlineAt - Date.now(), 0)
        : undefined;
      if (late) {
        this.#settle(pending, { kind: 'error', message: late });
        continue;
      }
      const slot = idle.shift()!;
      clearTimeout(slot.idleTimer);
      slot.idleTimer = undefined;
      slot.job = pending;
      pending.slot = slot;
      pending.startedAt = Date.now();
      running.set(pending.job.key, (running.get(pending.job.key) ?? 0) + 1);
      slot.worker.postMessage(this.#message(slot, pending));
    }
    const waiting = this.#queue.some(allowed);
    if ((idle.length === 0 || waiting) && this.#slots.size < this.#max) {
      this.#spawn();
      if (waiting) this.#pump();
    }
  }

  /** The request for `slot`: with its policy only when the thread does not keep it yet. */
  #message(slot: Slot, pending: Pending): EvalRequest {
    const { key, review, namespace, policy } = pending.job;
    const message: EvalRequest = { id: pending.id, key, review, namespace };
    if (slot.sent.has(key)) return message;
    if (slot.sent.size >= KEPT_MAX) {
      slot.sent.clear();
      message.reset = true;
    }
    slot.sent.add(key);
    message.policy = policy;
    return message;
  }

  #reply(slot: Slot, reply: EvalReply): void {
    if (reply.kind === 'ready') {
      slot.ready = true;
      let ready = 0;
      for (const s of this.#slots) if (s.ready) ready++;
      if (ready >= this.#size) this.#warmed = true;
      return;
    }
    const pending = slot.job;
    if (!pending || pending.id !== reply.id) return; // answered after its deadline: dropped
    slot.job = undefined;
    this.#recordDuration(pending.job.key, Date.now() - pending.startedAt!);
    const { id: _id, ...outcome } = reply;
    this.#settle(pending, outcome);
    if (this.#slots.size > this.#size) {
      slot.idleTimer = setTimeout(() => {
        if (slot.job || this.#slots.size <= this.#size) return;
        this.#slots.delete(slot);
        void slot.worker.terminate();
      }, this.#idleMs);
      slot.idleTimer.unref();
    }
    this.#pump();
  }

  #expire(pending: Pending): void {
    const queued = this.#queue.indexOf(pending);
    if (queued >= 0) this.#queue.splice(queued, 1);
    const slot = pending.slot;
    this.#settle(pending, { kind: 'timeout', ms: pending.deadlineMs });
    if (slot && slot.job === pending) {
      this.#recordDuration(pending.job.key, Date.now() - pending.startedAt!);
      // The only way to stop a running evaluation is to end its thread.
      this.#slots.delete(slot);
      slot.job = undefined;
      void slot.worker.terminate();
      this.#options.onWorkerLost?.(
        'timeout',
        `request ${pending.job.key} past ${pending.deadlineMs} ms`,
      );
      if (this.#slots.size < this.#size) this.#spawn();
      this.#pump();
    }
  }

  #lost(slot: Slot, reason: 'crash', detail: string): void {
    if (!this.#slots.delete(slot)) return; // terminated on purpose
    clearTimeout(slot.idleTimer);
    if (slot.job)
      this.#settle(slot.job, { kind: 'error', message: `evaluation thread died: ${detail}` });
    slot.job = undefined;
    this.#options.onWorkerLost?.(reason, detail);
    if (this.#closed) return;
    // A thread that dies at once (its engine does not load) is not restarted in a tight loop.
    const respawn = () => {
      if (this.#closed) return;
      if (this.#slots.size < this.#size) this.#spawn();
      this.#pump();
    };
    if (Date.now() - slot.startedAt < 1000) setTimeout(respawn, 1000).unref();
    else respawn();
  }

  #settle(pending: Pending, outcome: PoolOutcome): void {
    clearTimeout(pending.timer);
    pending.resolve(outcome);
  }
}
