/**
 * Publishes the replica report on the pod: one merge patch of the annotation at a time, only
 * when the report changed since the last successful write, and the latest report wins (reports
 * produced while a patch is in flight collapse into one). A failed patch is retried with
 * backoff until it succeeds or a newer report replaces it.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { backoffDelay, type BackoffOptions } from '../lib/backoff.ts';

export interface ReportPublisherOptions {
  /** Writes the annotation value (a merge patch of the pod); rejects on failure. */
  patch(value: string): Promise<void>;
  /** Default 200 ms doubling to 30 s, 50 % jitter. */
  backoff?: BackoffOptions;
  onError?(err: unknown, attempt: number): void;
  onPublished?(value: string): void;
}

const reportBackoff: BackoffOptions = { baseMs: 200, capMs: 30_000, factor: 2, jitter: 0.5 };

export class ReportPublisher {
  readonly #options: ReportPublisherOptions;
  #written: string | undefined;
  #wanted: string | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;
  readonly #stop = new AbortController();

  constructor(options: ReportPublisherOptions) {
    this.#options = options;
  }

  /** Asks for `value` to be on the pod; returns at once. */
  publish(value: string): void {
    this.#wanted = value;
    if (!this.#running && !this.#stopped && value !== this.#written)
      this.#running = this.#loop()
        .catch((err: unknown) => this.#options.onError?.(err, -1))
        .finally(() => (this.#running = undefined));
  }

  /** The value last written successfully. */
  get written(): string | undefined {
    return this.#written;
  }

  /** Resolves once nothing is in flight (for tests and shutdown). */
  async idle(): Promise<void> {
    while (this.#running) await this.#running;
  }

  stop(): void {
    this.#stopped = true;
    this.#stop.abort();
  }

  async #loop(): Promise<void> {
    let failures = 0;
    while (!this.#stopped && this.#wanted !== undefined && this.#wanted !== this.#written) {
      const value = this.#wanted;
      try {
        await this.#options.patch(value);
        this.#written = value;
        failures = 0;
        this.#options.onPublished?.(value);
      } catch (err) {
        this.#options.onError?.(err, failures);
        await sleep(backoffDelay(++failures, this.#options.backoff ?? reportBackoff), undefined, {
          signal: this.#stop.signal,
        }).catch(() => {});
      }
    }
  }
}
