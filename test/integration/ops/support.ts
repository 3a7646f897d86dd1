// Helpers for the ops tests: free ports, a Redis the test may stop, an apiserver proxy that
// can hold back one kind of request, and polling an HTTP endpoint.
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KubeConfig } from '@kubernetes/client-node';

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
    this.child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--save',
        '',
        '--appendonly',
        'no',
        '--maxmemory-policy',
        'noeviction',
      ],
      { stdio: 'ignore' },
    );
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
 * A plain-HTTP proxy to the cluster's apiserver (adding the test's credentials) that holds
 * back list requests of one path until released: an informer that cannot finish its list.
 */
export class HoldingProxy {
  private readonly server: Server;
  private released = false;
  private readonly waiting: (() => void)[] = [];

  private constructor(kc: KubeConfig, heldPath: string) {
    const target = new URL(kc.getCurrentCluster()!.server);
    this.server = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
      const url = new URL(req.url ?? '/', 'http://proxy');
      const held =
        !this.released && url.pathname === heldPath && url.searchParams.get('watch') !== 'true';
      const forward = async () => {
        const opts: RequestOptions = {
          hostname: target.hostname,
          port: target.port,
          path: req.url,
          method: req.method,
          headers: { ...req.headers, host: target.host },
        };
        await kc.applyToHTTPSOptions(opts);
        const upstream = httpsRequest(opts, (up) => {
          res.writeHead(up.statusCode ?? 502, up.headers);
          // Now, not with the first body chunk: a quiet watch would otherwise leave the client
          // waiting for headers, unable to abort it (client-node's Watch takes no signal).
          res.flushHeaders();
          up.pipe(res);
        });
        upstream.on('error', () => res.destroy());
        res.on('close', () => upstream.destroy());
        req.pipe(upstream);
      };
      if (held) this.waiting.push(() => void forward());
      else void forward();
    });
  }

  static async start(kc: KubeConfig, heldPath: string): Promise<HoldingProxy> {
    const proxy = new HoldingProxy(kc, heldPath);
    await new Promise<void>((r) => proxy.server.listen(0, '127.0.0.1', r));
    return proxy;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Writes a kubeconfig that talks to the proxy (which adds the real credentials); client-node
   * only allows plain http with skip-verify set, though there is no TLS to verify. */
  writeKubeconfig(path: string): string {
    writeFileSync(
      path,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [
          { name: 'proxy', cluster: { server: this.url, 'insecure-skip-tls-verify': true } },
        ],
        users: [{ name: 'proxy', user: {} }],
        contexts: [{ name: 'proxy', context: { cluster: 'proxy', user: 'proxy' } }],
        'current-context': 'proxy',
      }),
    );
    return path;
  }

  release(): void {
    this.released = true;
    for (const go of this.waiting.splice(0)) go();
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
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
