// One HTTP server per process: liveness, readiness, Prometheus metrics, and (when configured)
// the status page and the queue UI behind one access guard.
import { serve, type ServerType } from '@hono/node-server';
import { Hono } from 'hono';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { errorText } from '../../lib/kube/errors.ts';

/** What /readyz answers: ready or not, and a line an operator can act on. */
export interface Readiness {
  ready: boolean;
  detail: string;
}

export interface HttpServerOptions {
  port: number;
  /** Interface to bind. Default all (probes must be reachable by the kubelet). */
  hostname?: string;
  registry: Registry;
  logger: Logger;
  /** Whether this process can do its job now (its dependencies answer, its caches synced). */
  ready(): Promise<Readiness>;
  /** A readiness check slower than this counts as not ready. Default 2 s. */
  readyTimeoutMs?: number;
  /** Extra routes (status page, queue UI). */
  extend?(app: Hono): void;
}

export interface HttpServer {
  port: number;
  app: Hono;
  close(): Promise<void>;
}

function withTimeout<T>(p: Promise<T>, ms: number, fallback: T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<T>((resolve) => (timer = setTimeout(() => resolve(fallback), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

export function createApp(opts: Omit<HttpServerOptions, 'port'>): Hono {
  const app = new Hono();
  // Liveness: answering at all proves the process and its event loop are alive. It checks no
  // dependency on purpose: restarting rollcall does not bring Redis or the API server back.
  app.get('/healthz', (c) => c.text('ok'));
  app.get('/readyz', async (c) => {
    const ms = opts.readyTimeoutMs ?? 2000;
    const r = await withTimeout(
      opts.ready().catch((err: unknown): Readiness => ({
        ready: false,
        detail: `readiness check failed: ${errorText(err)}`,
      })),
      ms,
      { ready: false, detail: `readiness check took over ${ms} ms` },
    );
    return c.text(`${r.ready ? 'ok' : 'not ready'}: ${r.detail}\n`, r.ready ? 200 : 503);
  });
  app.get('/metrics', async (c) =>
    c.body(await opts.registry.metrics(), 200, { 'content-type': opts.registry.contentType }),
  );
  opts.extend?.(app);
  app.onError((err, c) => {
    // HTTPException carries its own response (e.g. basic auth's 401 with WWW-Authenticate).
    if ('getResponse' in err && typeof err.getResponse === 'function')
      return err.getResponse() as Response;
    opts.logger.error({ err, path: c.req.path }, 'http handler failed');
    return c.text('internal error', 500);
  });
  return app;
}

export function startHttpServer(opts: HttpServerOptions): Promise<HttpServer> {
  const app = createApp(opts);
  return new Promise((resolveServer) => {
    const server: ServerType = serve(
      { fetch: app.fetch, port: opts.port, hostname: opts.hostname ?? '0.0.0.0' },
      (info) => {
        resolveServer({
          port: info.port,
          app,
          close: () =>
            new Promise<void>((r) => {
              server.close(() => r());
              // Keep-alive connections (a browser on the status page) must not hold shutdown up.
              if ('closeAllConnections' in server) server.closeAllConnections();
            }),
        });
      },
    );
  });
}
