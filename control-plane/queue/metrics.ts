// Queue metrics on a registry the caller owns (never prom-client's global one).

import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { OutcomeKind } from './outcome.ts';
import { jobStates, type JobState } from './work-queue.ts';

export interface QueueMetricsOptions {
  /** Registry to register the metrics on. */
  registry: Registry;
  /** Source of queue depth, read on every scrape. Usually `() => workQueue.counts()`. */
  depth?: () => Promise<Record<JobState, number>>;
}

export class QueueMetrics {
  private readonly adds: Counter<'function'>;
  private readonly coalescedAdds: Counter<'function'>;
  private readonly runs: Counter<'function' | 'outcome'>;
  private readonly retries: Counter<'function'>;
  private readonly duration: Histogram<'function'>;
  private readonly pickup: Histogram<'function'>;

  constructor(opts: QueueMetricsOptions) {
    const registers = [opts.registry];
    const counter = <Label extends string>(name: string, help: string, labelNames: Label[]) =>
      new Counter({ name, help, labelNames, registers });
    this.adds = counter('rollcall_queue_adds_total', 'Keys enqueued', ['function']);
    this.coalescedAdds = counter(
      'rollcall_queue_coalesced_adds_total',
      'Enqueues that joined a pending run of the same key instead of adding one',
      ['function'],
    );
    this.runs = counter(
      'rollcall_queue_runs_total',
      'Handler runs by outcome (done, requeueAfter, retry, terminal, throttled, conflict)',
      ['function', 'outcome'],
    );
    this.retries = counter(
      'rollcall_queue_retries_total',
      'Runs scheduled again after a retryable error (with backoff)',
      ['function'],
    );
    this.duration = new Histogram({
      name: 'rollcall_queue_run_duration_seconds',
      help: 'Handler run time',
      labelNames: ['function'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    });
    this.pickup = new Histogram({
      name: 'rollcall_queue_pickup_seconds',
      help: 'From a job being added (or its delay ending) to a worker starting it',
      labelNames: ['function'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30],
      registers,
    });
    const depth = opts.depth;
    if (depth) {
      new Gauge({
        name: 'rollcall_queue_depth',
        help: 'Jobs in the queue by state',
        labelNames: ['state'],
        registers,
        // A scrape while Redis is away (a failover, a restart) leaves the depth out instead of
        // failing the whole scrape: the failover metrics matter most right then.
        async collect() {
          this.reset();
          const counts = await depth().catch(() => undefined);
          if (counts) for (const state of jobStates) this.set({ state }, counts[state]);
        },
      });
    }
  }

  enqueued(fn: string, coalesced: boolean): void {
    this.adds.inc({ function: fn });
    if (coalesced) this.coalescedAdds.inc({ function: fn });
  }

  pickedUp(fn: string, seconds: number): void {
    this.pickup.observe({ function: fn }, Math.max(0, seconds));
  }

  ran(fn: string, outcome: OutcomeKind, seconds: number): void {
    this.runs.inc({ function: fn, outcome });
    this.duration.observe({ function: fn }, seconds);
    if (outcome === 'retry') this.retries.inc({ function: fn });
  }
}
