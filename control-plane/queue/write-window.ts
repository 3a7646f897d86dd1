// How many writes one worker process sends to the API server at once. Unlimited until the
// first 429; then it follows TCP's congestion window (AIMD): each 429 halves it, each success
// widens it by 1/window (about one more per round of writes), and past `open` it is
// unlimited again. Without it, the writes of every job parked by a pause all go out together
// when it ends, APF rejects all but a seat's worth, and its Retry-After grows with the
// rejections (kubernetes/kubernetes#117547), to 32 s in a test where one write at a time
// fits the priority level's single seat.

export class WriteWindow {
  /** The window: writes allowed in flight; Infinity when open. */
  #size = Infinity;
  #inFlight = 0;
  readonly #waiting: (() => void)[] = [];
  readonly #open: number;

  constructor(open = 64) {
    this.#open = open;
  }

  get size(): number {
    return this.#size;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  /** Resolves once a write may go out; every enter needs its leave. */
  async enter(signal?: AbortSignal): Promise<void> {
    while (this.#inFlight >= this.#size) {
      signal?.throwIfAborted();
      await new Promise<void>((resolve) => {
        const abort = () => {
          this.#waiting.splice(this.#waiting.indexOf(wake), 1);
          resolve();
        };
        const wake = () => {
          signal?.removeEventListener('abort', abort);
          resolve();
        };
        this.#waiting.push(wake);
        signal?.addEventListener('abort', abort, { once: true });
      });
    }
    this.#inFlight++;
  }

  /** A write ended: `throttled` when the API server answered 429. */
  leave(throttled: boolean): void {
    this.#inFlight--;
    if (throttled)
      this.#size = Math.max(1, Math.floor(Math.min(this.#size, this.#inFlight + 1) / 2));
    else if (this.#size !== Infinity) {
      this.#size += 1 / this.#size;
      if (this.#size >= this.#open) this.#size = Infinity;
    }
    const free = this.#size - this.#inFlight;
    for (let n = 0; n < free && this.#waiting.length > 0; n++) this.#waiting.shift()!();
  }
}
