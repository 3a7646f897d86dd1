/**
 * The serving certificate, reloaded without a restart. Kubernetes updates a Secret volume by
 * swapping a `..data` symlink, which a watch on the files themselves misses; so the directory
 * is watched, and checked again every `intervalMs` in case an event was lost. A pair that does
 * not load (half-written, mismatched key) keeps the previous one and is logged.
 */
import { createHash } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createSecureContext } from 'node:tls';

export interface TlsPair {
  cert: Buffer;
  key: Buffer;
}

export interface TlsReloaderOptions {
  dir: string;
  /** Called with each new valid pair (the first one included). */
  onChange(pair: TlsPair): void;
  onError?(message: string): void;
  /** Default 10 s. */
  intervalMs?: number;
}

/** Reads `tls.crt` and `tls.key` from `dir` and checks that they form a usable pair. */
export async function readTlsPair(dir: string): Promise<TlsPair> {
  const [cert, key] = await Promise.all([
    readFile(join(dir, 'tls.crt')),
    readFile(join(dir, 'tls.key')),
  ]);
  createSecureContext({ cert, key }); // throws on a mismatched or unreadable pair
  return { cert, key };
}

export class TlsReloader {
  readonly #options: TlsReloaderOptions;
  #digest: string | undefined;
  #lastError: string | undefined;
  #watcher: FSWatcher | undefined;
  #timer: NodeJS.Timeout | undefined;
  #checking: Promise<void> | undefined;
  #again = false;

  constructor(options: TlsReloaderOptions) {
    this.#options = options;
  }

  /** True once a pair has been loaded. */
  get loaded(): boolean {
    return this.#digest !== undefined;
  }

  /** Loads the pair once (resolves either way) and starts watching. */
  async start(): Promise<void> {
    await this.check();
    try {
      this.#watcher = watch(this.#options.dir, () => void this.check());
      this.#watcher.on('error', () => {}); // the interval still checks
    } catch {
      // The directory may not exist yet; the interval picks it up.
    }
    this.#timer = setInterval(() => void this.check(), this.#options.intervalMs ?? 10_000);
    this.#timer.unref();
  }

  stop(): void {
    this.#watcher?.close();
    clearInterval(this.#timer);
  }

  /** Reads the pair and reports it when it changed; checks never overlap. */
  check(): Promise<void> {
    if (this.#checking) {
      this.#again = true;
      return this.#checking;
    }
    this.#checking = this.#check().finally(() => {
      this.#checking = undefined;
      if (this.#again) {
        this.#again = false;
        void this.check();
      }
    });
    return this.#checking;
  }

  async #check(): Promise<void> {
    let pair: TlsPair;
    try {
      pair = await readTlsPair(this.#options.dir);
    } catch (err) {
      const message = `cannot load the serving certificate from ${this.#options.dir}: ${(err as Error).message}`;
      if (message !== this.#lastError) this.#options.onError?.(message);
      this.#lastError = message;
      return;
    }
    this.#lastError = undefined;
    const digest = createHash('sha256').update(pair.cert).update(pair.key).digest('hex');
    if (digest === this.#digest) return;
    try {
      this.#options.onChange(pair);
      this.#digest = digest;
    } catch (err) {
      this.#options.onError?.(`cannot use the serving certificate: ${(err as Error).message}`);
    }
  }
}
