// Policy Events, written in the background as client-go's recorder writes them: a run returns
// once its status is written, and a few writers send its Events after it. Status writes are
// what an operator (and `kubectl wait`) waits for; queued behind an Event each, they would take
// half of the API server's attention in a storm. Best effort, as in Kubernetes: past `limit`
// pending Events a new one is dropped (counted and logged), and shutdown waits a bounded time.
import type { EventTarget, EventToWrite } from './kube-writer.ts';

export interface PendingEvent {
  regarding: EventTarget;
  event: EventToWrite;
  at: Date;
}

export interface EventRecorderOptions {
  /** Writes one Event (KubeWriter.event: behind the shared write gate). */
  write(pending: PendingEvent): Promise<void>;
  /** Events written at once. Default 2. */
  writers?: number;
  /** Pending Events kept; more are dropped. Default 1000, as client-go's broadcaster. */
  limit?: number;
  /** A write failed: logged, never retried. */
  failed(pending: PendingEvent, err: unknown): void;
  /** The backlog was full; `first`: the first drop since it was last empty (log that one). */
  dropped(pending: PendingEvent, first: boolean): void;
}

export class EventRecorder {
  private readonly opts: Required<EventRecorderOptions>;
  private readonly backlog: PendingEvent[] = [];
  private writing = 0;
  private readonly idle: (() => void)[] = [];
  private overflowing = false;

  constructor(opts: EventRecorderOptions) {
    this.opts = { writers: 2, limit: 1000, ...opts };
  }

  /** Events waiting or being written (rollcall_events_pending). */
  get pending(): number {
    return this.backlog.length + this.writing;
  }

  record(regarding: EventTarget, event: EventToWrite, at: Date): void {
    const pending = { regarding, event, at };
    if (this.pending >= this.opts.limit) {
      this.opts.dropped(pending, !this.overflowing);
      this.overflowing = true;
      return;
    }
    this.backlog.push(pending);
    this.pump();
  }

  /** Resolves once nothing is pending, or after `ms` with false. */
  async drain(ms: number): Promise<boolean> {
    if (this.pending === 0) return true;
    let timer: NodeJS.Timeout | undefined;
    const drained = new Promise<true>((resolve) => this.idle.push(() => resolve(true)));
    const late = new Promise<false>((resolve) => (timer = setTimeout(resolve, ms, false)));
    try {
      return await Promise.race([drained, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  private pump(): void {
    while (this.writing < this.opts.writers && this.backlog.length > 0) {
      const next = this.backlog.shift()!;
      this.writing++;
      void this.opts
        .write(next)
        .catch((err: unknown) => this.opts.failed(next, err))
        .finally(() => {
          this.writing--;
          this.pump();
          if (this.pending > 0) return;
          this.overflowing = false;
          for (const resolve of this.idle.splice(0)) resolve();
        });
    }
  }
}
