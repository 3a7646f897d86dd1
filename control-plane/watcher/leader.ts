// Leader election on a coordination.k8s.io/v1 Lease, so that only one watcher replica works
// while the others stand by.
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { requestJson, type ApiTarget } from '../../lib/kube/api.ts';
import { errorText, isConflict, isNotFound, statusCodeOf } from '../../lib/kube/errors.ts';

/** The fields of a coordination.k8s.io/v1 Lease that leader election reads (times are RFC 3339). */
const leaseSchema = z.looseObject({
  metadata: z.looseObject({ resourceVersion: z.string().optional() }).optional(),
  spec: z
    .looseObject({
      holderIdentity: z.string().optional(),
      leaseDurationSeconds: z.number().optional(),
      acquireTime: z.string().optional(),
      renewTime: z.string().optional(),
      leaseTransitions: z.number().optional(),
    })
    .optional(),
});
export type Lease = z.infer<typeof leaseSchema>;

/** A MicroTime as the apiserver parses it: RFC 3339 with six fractional digits. */
export function microTime(date: Date): string {
  return date.toISOString().replace(/Z$/, '000Z');
}

export interface LeaderElectorOptions {
  /** The apiserver (lib/kube/api.ts). */
  api: ApiTarget;
  /** Namespace of the Lease. */
  namespace: string;
  /** Name of the Lease; every candidate for the same role uses the same one. */
  name: string;
  /** This candidate, unique among them (e.g. the pod name). */
  identity: string;
  /** How long a lease stays valid after its last renewal; others take over after it. Default 15. */
  leaseDurationSeconds?: number;
  /** How often the leader renews and a standby tries to acquire. Default 2000 ms. */
  renewEveryMs?: number;
  /**
   * A leader that could not renew for this long steps down. It must be shorter than the
   * lease duration, so a leader stops working before a standby can take over. Default:
   * two thirds of the lease duration (client-go's 10 s for 15 s).
   */
  renewDeadlineMs?: number;
  /** Called on becoming leader; `signal` aborts when leadership ends. */
  onStartedLeading?(signal: AbortSignal): void | Promise<void>;
  /** Called on losing leadership: the renew deadline passed, another holder won, or stop(). */
  onStoppedLeading?(): void | Promise<void>;
  logger?: { warn(obj: object, msg: string): void; info(obj: object, msg: string): void };
}

/**
 * One candidate in a leader election. The Lease is the truth: a candidate acquires it when
 * it has no holder or its holder did not renew within the lease duration, and all writes
 * are replaces guarded by resourceVersion, so of two racing candidates one gets 409 and
 * stays a standby.
 *
 * Trade-off: expiry compares the Lease's `renewTime` (the holder's clock) with this
 * process's clock, so the candidates' clocks must roughly agree (client-go instead waits a
 * full lease duration after it last saw the record change, which tolerates skew but makes
 * a new candidate wait even for a long-expired lease).
 */
export class LeaderElector {
  readonly #options: LeaderElectorOptions;
  #leading: AbortController | undefined;
  #deadline: NodeJS.Timeout | undefined;
  /** The Lease as last written by us while leading, for renewing and releasing it. */
  #lease: Lease | undefined;
  #stop: AbortController | undefined;
  #running: Promise<void> | undefined;
  /** Why the last acquire/renew got no answer about the Lease; undefined once one did. */
  #problem: string | undefined = 'the leader Lease has not been checked yet';

  constructor(options: LeaderElectorOptions) {
    this.#options = options;
  }

  /** Starts competing for the lease; a no-op when running. */
  start(): void {
    if (this.#running) return;
    this.#stop = new AbortController();
    this.#running = this.#run(this.#stop.signal);
  }

  /**
   * Stops competing. A leader releases the lease (clears its holder) so a standby takes
   * over at once, then calls onStoppedLeading. `release: false` skips the release, as a
   * crash would: standbys then wait for the lease to expire (tests use it).
   */
  async stop({ release = true }: { release?: boolean } = {}): Promise<void> {
    this.#stop?.abort();
    await this.#running;
    this.#running = undefined;
    if (this.#leading && release) await this.#release();
    await this.#stepDown();
  }

  /** True while this candidate holds the lease. */
  isLeader(): boolean {
    return this.#leading !== undefined;
  }

  /**
   * Why this candidate cannot tell who leads (the apiserver is unreachable, or refuses the
   * Lease), or undefined when its last attempt got an answer. A standby with a problem could
   * not take over if the leader died.
   */
  problem(): string | undefined {
    return this.#problem;
  }

  async #run(signal: AbortSignal): Promise<void> {
    const { renewEveryMs = 2_000 } = this.#options;
    while (!signal.aborted) {
      await this.#tryAcquireOrRenew();
      // Standbys retry a little irregularly so they do not race in lockstep.
      const wait = this.#leading ? renewEveryMs : renewEveryMs * (1 + 0.2 * Math.random());
      await sleep(wait, undefined, { signal }).catch(() => {});
    }
  }

  async #tryAcquireOrRenew(): Promise<void> {
    const { namespace, name, logger } = this.#options;
    try {
      await this.#acquireOrRenew();
      this.#problem = undefined;
    } catch (err) {
      // 409: another candidate wrote first, an answer like any other. Anything else: retry
      // next period. A leader keeps leading until its renew deadline passes.
      if (isConflict(err)) {
        this.#problem = undefined;
        return;
      }
      const code = statusCodeOf(err);
      const why = code ? `the apiserver answered HTTP ${code}` : errorText(err);
      this.#problem = `${why} (Lease ${namespace}/${name})`;
      logger?.warn({ err, lease: `${namespace}/${name}` }, 'lease acquire/renew failed');
    }
  }

  async #acquireOrRenew(): Promise<void> {
    const { namespace, name, identity, leaseDurationSeconds = 15 } = this.#options;
    const nowMs = Date.now();
    const now = microTime(new Date(nowMs));
    const current = await this.#read();
    if (!current) {
      this.#won(
        await this.#write('POST', this.#collection(), {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name, namespace },
          spec: {
            holderIdentity: identity,
            leaseDurationSeconds,
            acquireTime: now,
            renewTime: now,
            leaseTransitions: 0,
          },
        }),
      );
      return;
    }
    const spec = current.spec ?? {};
    const ours = spec.holderIdentity === identity;
    if (!ours && !leaseIsFree(current, nowMs)) {
      if (this.#leading) await this.#stepDown(); // someone else holds it: we lost it long ago
      return;
    }
    const renewed: Lease = {
      ...current,
      spec: ours
        ? { ...spec, renewTime: now, leaseDurationSeconds }
        : {
            holderIdentity: identity,
            leaseDurationSeconds,
            acquireTime: now,
            renewTime: now,
            leaseTransitions: (spec.leaseTransitions ?? 0) + (spec.holderIdentity ? 1 : 0),
          },
    };
    // replace carries current.metadata.resourceVersion: if anyone wrote since our read, 409.
    this.#won(await this.#write('PUT', this.#path(), renewed));
  }

  async #read(): Promise<Lease | undefined> {
    try {
      return leaseSchema.parse(await requestJson(this.#options.api, 'GET', this.#path()));
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  #collection(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/${this.#options.namespace}/leases`;
  }

  #path(): string {
    return `${this.#collection()}/${this.#options.name}`;
  }

  async #write(method: 'POST' | 'PUT', path: string, lease: Lease): Promise<Lease> {
    return leaseSchema.parse(await requestJson(this.#options.api, method, path, { body: lease }));
  }

  /** Records a successful acquire or renew and (re)arms the renew deadline. */
  #won(lease: Lease): void {
    const { leaseDurationSeconds = 15, renewDeadlineMs = (leaseDurationSeconds * 1000 * 2) / 3 } =
      this.#options;
    this.#lease = lease;
    clearTimeout(this.#deadline);
    this.#deadline = setTimeout(() => {
      this.#options.logger?.warn(
        { identity: this.#options.identity },
        'could not renew the lease in time; stepping down',
      );
      void this.#stepDown();
    }, renewDeadlineMs);
    if (this.#leading) return;
    this.#leading = new AbortController();
    this.#options.logger?.info({ identity: this.#options.identity }, 'started leading');
    const signal = this.#leading.signal;
    void Promise.resolve()
      .then(() => this.#options.onStartedLeading?.(signal))
      .catch((err: unknown) => this.#options.logger?.warn({ err }, 'onStartedLeading failed'));
  }

  async #stepDown(): Promise<void> {
    clearTimeout(this.#deadline);
    this.#deadline = undefined;
    const leading = this.#leading;
    if (!leading) return;
    this.#leading = undefined;
    this.#lease = undefined;
    leading.abort();
    this.#options.logger?.info({ identity: this.#options.identity }, 'stopped leading');
    try {
      await this.#options.onStoppedLeading?.();
    } catch (err) {
      this.#options.logger?.warn({ err }, 'onStoppedLeading failed');
    }
  }

  /** Clears the holder so a standby need not wait for expiry; a lost race means it is not ours anymore. */
  async #release(): Promise<void> {
    const lease = this.#lease;
    if (!lease) return;
    const { namespace, name } = this.#options;
    try {
      await this.#write('PUT', this.#path(), {
        ...lease,
        spec: {
          ...lease.spec,
          holderIdentity: undefined,
          acquireTime: undefined,
          renewTime: undefined,
        },
      });
    } catch (err) {
      this.#options.logger?.warn(
        { err, lease: `${namespace}/${name}` },
        'could not release the lease',
      );
    }
  }
}

/** True when the lease has no holder or its holder's last renewal is older than its duration. */
export function leaseIsFree(lease: Lease, nowMs: number): boolean {
  const { holderIdentity, renewTime, leaseDurationSeconds } = lease.spec ?? {};
  if (!holderIdentity || !renewTime) return true;
  return new Date(renewTime).getTime() + (leaseDurationSeconds ?? 0) * 1000 < nowMs;
}
