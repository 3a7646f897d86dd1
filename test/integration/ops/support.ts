// Helpers for the ops tests: free ports, a Redis the test may stop, an apiserver proxy that
// can hold back one kind of request, and polling an HTTP endpoint.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KubeConfig } from '@kubernetes/client-node';
import { startApiProxy, writeProxyKubeconfig, type ApiProxy } from '../../../cluster/api-proxy.ts';
import { redisServerArgs } from '../../../cluster/redis.ts';

export async function freePort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}

/** A throwaway redis-server the test can stop and start again on the same port. */
export class TestRedis {
  readonly port: number;
  private child: ChildProcess | undefined;
  constructor(port: number) {
    this.port = port;
  }
  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }
  async start(): Promise<void> {
    // Persists nothing (rollcall's private-instance flags), so the directory stays empty.
    this.child = spawn('redis-server', redisServerArgs(this.port, tmpdir()), { stdio: 'ignore' });
    await waitFor(
      async () => {
        const { connect } = await import('node:net');
        return new Promise<boolean>((resolve) => {
          const s = connect(this.port, '127.0.0.1', () => (s.destroy(), resolve(true)));
          s.on('error', () => resolve(false));
        });
      },
      10_000,
      'redis-server to listen',
    );
  }
  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  }
}

/**
 * A proxy to the cluster's apiserver (cluster/api-proxy.ts) that holds back list requests of
 * one path until released: an informer that cannot finish its list.
 */
export class HoldingProxy {
  private released = false;
  private readonly waiting: (() => void)[] = [];
  private proxy!: ApiProxy;

  static async start(kc: KubeConfig, heldPath: string): Promise<HoldingProxy> {
    const holding = new HoldingProxy();
    holding.proxy = await startApiProxy(kc, (req) => {
      const url = new URL(req.url ?? '/', 'http://proxy');
      const held =
        !holding.released && url.pathname === heldPath && url.searchParams.get('watch') !== 'true';
      if (held) return new Promise<void>((resolve) => holding.waiting.push(resolve));
    });
    return holding;
  }

  writeKubeconfig(path: string): string {
    return writeProxyKubeconfig(this.proxy.url, path);
  }

  release(): void {
    this.released = true;
    for (const go of this.waiting.splice(0)) go();
  }

  close(): Promise<void> {
    return this.proxy.close();
  }
}

export async function waitFor<T>(
  probe: () => Promise<T | undefined | false>,
  timeoutMs: number,
  what: string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe().catch(() => undefined);
    if (v) return v;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(200);
  }
}

/** GET url; resolves to status and body, or undefined when nothing answers. */
export async function get(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string } | undefined> {
  try {
    const res = await fetch(url, { headers, signal: AbortSignal.timeout(5000) });
    return { status: res.status, body: await res.text() };
  } catch {
    return undefined;
  }
}

/** Polls GET url until it answers `status`; resolves to that response. */
export const waitForStatus = (url: string, status: number, timeoutMs: number, what: string) =>
  waitFor(
    async () => {
      const r = await get(url);
      return r?.status === status ? r : undefined;
    },
    timeoutMs,
    what,
  );
