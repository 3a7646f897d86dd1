// One HTTP server per process: liveness, readiness and Prometheus metrics.
import { serve, type ServerType } from '@hono/node-server';
import { Hono } from 'hono';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';

export interface HttpServerOptions {
  port: number;
  registry: Registry;
  logger: Logger;
  /** True when this process can do its job (its dependencies answer, its caches synced). */
  ready(): Promise<boolean>;
  /** Extra routes (status page, queue UI). */
  extend?(app: Hono): void;
}

export interface HttpServer {
  port: number;
  app: Hono;
  close(): Promise<void>;
}

export function createApp(opts: Omit<HttpServerOptions, 'port'>): Hono {
  const app = new Hono();
  // Liveness: answering at all proves the process and its event loop are alive.
  app.get('/healthz', (c) => c.text('ok'));
  app.get('/readyz', async (c) => {
    const ok = await opts.ready().catch(() => false);
    return c.text(ok ? 'ok' : 'not ready', ok ? 200 : 503);
  });
  app.get('/metrics', async (c) => c.body(await opts.registry.metrics(), 200, { 'content-type': opts.registry.contentType }));
  opts.extend?.(app);
  return app;
}

export function startHttpServer(opts: HttpServerOptions): Promise<HttpServer> {
  const app = createApp(opts);
  return new Promise((resolveServer) => {
    const server: ServerType = serve({ fetch: app.fetch, port: opts.port, hostname: '0.0.0.0' }, (info) => {
      resolveServer({
        port: info.port,
        app,
        close: () => new Promise<void>((r) => server.close(() => r())),
      });
    });
  });
}
