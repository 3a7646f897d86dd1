// A redis-server only one test uses, on a port that stays the same across restarts so that
// clients reconnect to the restarted one; it persists nothing, so a restart comes back empty.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { freePort } from '../../tooling/cluster/ports.ts';
import { ensureRedisServer, redisServerArgs, waitForPing } from '../../tooling/cluster/redis.ts';

export class PrivateRedis {
  private child: ChildProcess | undefined;
  readonly dir: string;
  port = 0;

  constructor(dir: string) {
    this.dir = dir;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    if (this.port === 0) this.port = await freePort();
    mkdirSync(this.dir, { recursive: true });
    // --save '' and no AOF (redisServerArgs): a restart comes back empty.
    this.child = spawn(await ensureRedisServer(), redisServerArgs(this.port, this.dir), {
      stdio: 'ignore',
    });
    await waitForPing(this.port, this.child);
  }

  /** SIGKILL: everything in it is gone. */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  }
}
