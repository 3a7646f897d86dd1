// The runs of one worker that have not yet left BullMQ's active list, so shutdown can wait
// for them.

import { DelayedError } from 'bullmq';

/**
 * A run is in flight until its job has left BullMQ's active list: BullMQ moves it only after
 * the processor returns, and a forced close before that move skips it, leaving the job active
 * until a stall check re-runs it. BullMQ reports the move as 'completed' or 'failed' (call
 * `left`); a job moved to delayed left in the processor (it threw DelayedError); a move that
 * fails (Redis away, lock lost) reports nothing, so a finished run waits for it at most a
 * second (then its entry goes too).
 */
export class InflightRuns {
  readonly #runs = new Map<string, { left: Promise<void>; leave(): void }>();

  get size(): number {
    return this.#runs.size;
  }

  /** Tracks the run of job `id` and returns the run. */
  track(id: string, run: Promise<void>): Promise<void> {
    const { promise, resolve } = Promise.withResolvers<void>();
    const entry = {
      left: promise,
      leave: () => {
        resolve();
        if (this.#runs.get(id) === entry) this.#runs.delete(id);
      },
    };
    this.#runs.set(id, entry);
    const waitForMove = () => setTimeout(entry.leave, 1000).unref();
    run.then(waitForMove, (err: unknown) =>
      err instanceof DelayedError ? entry.leave() : waitForMove(),
    );
    return run;
  }

  /** BullMQ moved job `id` out of the active list. */
  left(id: string | undefined): void {
    if (id !== undefined) this.#runs.get(id)?.leave();
  }

  /**
   * Resolves true once no run is in flight (runs that start meanwhile included), false when
   * `deadline` (epoch ms) comes first.
   */
  async allLeft(deadline: number): Promise<boolean> {
    let finished = true;
    while (finished && this.#runs.size > 0)
      finished = await Promise.race([
        Promise.all([...this.#runs.values()].map((run) => run.left)).then(() => true),
        new Promise<false>((resolve) => setTimeout(resolve, deadline - Date.now(), false).unref()),
      ]);
    return finished;
  }
}
