// Which Redis node is primary for rollcall's keys, as this process's client sees it, and when
// that changed: for /readyz and the metrics (Sentinel and Cluster). A change of address is a
// failover (Sentinel promoted a replica, or a Cluster moved the slot); a restart at the same
// address is not.

import { Counter, Gauge, type Registry } from 'prom-client';
import { primaryAddress, type RedisClient } from './client.ts';

export interface RedisFailover {
  from: string;
  to: string;
  at: Date;
}

export interface RedisPrimaryTrackerOptions {
  /** Where `rollcall_redis_primary{address}`, `rollcall_redis_failovers_total` and `rollcall_redis_last_failover_timestamp_seconds` go. */
  registry?: Registry;
  /** Called once per failover seen. */
  onFailover?: (failover: RedisFailover) => void;
  /** How often the client's primary is read besides its `ready` events. Default 1 s. */
  everyMs?: number;
}

export class RedisPrimaryTracker {
  private readonly client: RedisClient;
  private readonly key: string;
  private readonly onFailover: ((f: RedisFailover) => void) | undefined;
  private readonly timer: NodeJS.Timeout;
  private current: string | undefined;
  private failovers = 0;
  private last: RedisFailover | undefined;
  private readonly counter: Counter | undefined;
  private readonly lastAt: Gauge | undefined;
  private readonly primaryGauge: Gauge<'address'> | undefined;

  /** `key`: one of rollcall's keys (on a Cluster its slot picks the node). */
  constructor(client: RedisClient, key: string, opts: RedisPrimaryTrackerOptions = {}) {
    this.client = client;
    this.key = key;
    this.onFailover = opts.onFailover;
    if (opts.registry) {
      const registers = [opts.registry];
      const collect = () => void this.observe();
      this.counter = new Counter({
        name: 'rollcall_redis_failovers_total',
        help: "Times the Redis primary holding rollcall's keys changed address (Sentinel failover, Cluster slot move)",
        registers,
      });
      this.lastAt = new Gauge({
        name: 'rollcall_redis_last_failover_timestamp_seconds',
        help: 'When this process saw the last Redis failover (Unix time), 0 if none',
        registers,
        collect,
      });
      this.primaryGauge = new Gauge({
        name: 'rollcall_redis_primary',
        help: "1 for the Redis node (address) this process writes rollcall's keys to",
        labelNames: ['address'],
        registers,
        collect,
      });
      this.lastAt.set(0);
    }
    client.on('ready', () => this.observe());
    this.timer = setInterval(() => this.observe(), opts.everyMs ?? 1000);
    this.timer.unref();
  }

  /** Reads the client's primary now; counts a failover when its address changed. */
  observe(): string | undefined {
    const now = primaryAddress(this.client, this.key);
    if (now === undefined || now === this.current) return this.current;
    const before = this.current;
    this.current = now;
    this.primaryGauge?.reset();
    this.primaryGauge?.set({ address: now }, 1);
    if (before !== undefined) {
      this.failovers++;
      this.last = { from: before, to: now, at: new Date() };
      this.counter?.inc();
      this.lastAt?.set(this.last.at.getTime() / 1000);
      this.onFailover?.(this.last);
    }
    return now;
  }

  /** For /readyz: `primary 10.0.0.7:6379; 1 failover, last at 2026-…Z (from 10.0.0.5:6379)`. */
  describe(): string {
    this.observe();
    const primary = `primary ${this.current ?? 'not known yet'}`;
    if (!this.last) return `${primary}; no failover seen`;
    const n = `${this.failovers} failover${this.failovers === 1 ? '' : 's'}`;
    return `${primary}; ${n}, last at ${this.last.at.toISOString()} (from ${this.last.from})`;
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
