/**
 * The policy server's one HTTPS listener: admission (`POST /validate/<policy>/<generation>`),
 * probes (`/healthz`, `/readyz`) and `/metrics`. Plain node:https rather than a framework:
 * admission latency is the product, and the body cap must apply while reading.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import { Socket } from 'node:net';
import type { Logger } from 'pino';
import { MAX_REVIEW_BYTES, parseValidatePath, review, type AdmissionDeps } from './admission.ts';
import type { Readiness } from './lifecycle.ts';
import type { PolicyServerMetrics } from './metrics.ts';
import type { TlsPair } from './tls.ts';

export interface HttpsServerOptions {
  port: number;
  address: string;
  logger: Logger;
  metrics: PolicyServerMetrics;
  readiness(): Readiness;
  admission: AdmissionDeps;
}

export interface PolicyHttpsServer {
  server: Server;
  port: number;
  /** Swaps the serving certificate for new connections. */
  setCertificate(pair: TlsPair): void;
  /** Stops accepting, lets requests in flight finish for up to `graceMs` (default 5 s). */
  close(graceMs?: number): Promise<void>;
}

/**
 * The messages of the IPC channel a parent may open to hand connections over (the local
 * cluster's node agent does: its kube-proxy passes the apiserver's socket on rather than
 * copying bytes between two sockets, as kube-proxy leaves forwarding to the kernel).
 */
export const handover = {
  /** Sent to the parent once the server listens: it may hand connections over now. */
  ready: 'rollcall.dev/takes-connections',
  /** Sent by the parent with the socket, which is then this server's connection. */
  connection: 'rollcall.dev/connection',
} as const;

/** Takes connections handed over on the IPC channel, when there is one; returns the open ones. */
function takeHandedConnections(server: Server): Set<Socket> {
  const open = new Set<Socket>();
  if (!process.send || !process.channel) return open;
  process.on('message', (message: unknown, socket: unknown) => {
    if (message !== handover.connection || !(socket instanceof Socket)) return;
    open.add(socket);
    socket.once('close', () => open.delete(socket));
    server.emit('connection', socket);
  });
  // The channel must not keep the process alive once the server has closed.
  process.channel.unref();
  process.send(handover.ready);
  return open;
}

export async function startHttpsServer(options: HttpsServerOptions): Promise<PolicyHttpsServer> {
  const server = createServer({}, (req, res) => {
    handle(req, res, options).catch((err: unknown) => {
      options.logger.error({ err, path: req.url }, 'request failed');
      if (!res.headersSent) send(res, 500, { error: 'internal error' });
    });
  });
  // A client that never finishes its request must not hold a socket forever.
  server.requestTimeout = 35_000;
  server.headersTimeout = 10_000;
  // The apiserver keeps up to 25 idle connections per webhook for 90 s (client-go's transport).
  // Node's default closes them after 5 s, so each burst dialled again (CONNECT + TLS handshake
  // each: the tail's cause, bench/RESULTS.md) and a POST sent on a connection closing under it
  // fails. Outlive the client instead.
  server.keepAliveTimeout = 120_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.address, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const handed = takeHandedConnections(server);
  const address = server.address();
  return {
    server,
    port: typeof address === 'object' && address ? address.port : options.port,
    setCertificate: (pair) => server.setSecureContext({ cert: pair.cert, key: pair.key }),
    close: (graceMs = 5000) =>
      new Promise<void>((resolve) => {
        // Requests in flight get their answer; idle keep-alive connections (the apiserver
        // keeps them) close now, and whatever is left after the grace period is cut.
        const timer = setTimeout(() => server.closeAllConnections(), graceMs);
        server.close(() => {
          // server.close waits only for the connections it accepted itself: then for these.
          const handedClosed = [...handed].map((s) => new Promise((r) => s.once('close', r)));
          void Promise.all(handedClosed).then(() => {
            clearTimeout(timer);
            resolve();
          });
        });
        server.closeIdleConnections();
      }),
  };
}

async function handle(
  req: IncomingMessage,
  res: ServerResponse,
  options: HttpsServerOptions,
): Promise<void> {
  const path = (req.url ?? '/').split('?')[0]!;
  if (req.method === 'GET' && path === '/healthz') return sendText(res, 200, 'ok\n');
  if (req.method === 'GET' && path === '/readyz') {
    const r = options.readiness();
    return sendText(res, r.ready ? 200 : 503, `${r.ready ? 'ok' : 'not ready'}: ${r.detail}\n`);
  }
  if (req.method === 'GET' && path === '/metrics') {
    const registry = options.metrics.registry;
    res.writeHead(200, { 'content-type': registry.contentType });
    res.end(await registry.metrics());
    return;
  }
  const target = parseValidatePath(path);
  if (!target) return send(res, 404, { error: 'expected POST /validate/<policy>/<generation>' });
  if (req.method !== 'POST') return send(res, 405, { error: 'use POST' });

  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > MAX_REVIEW_BYTES) return tooLarge(req, res);
  const body = await readBody(req, MAX_REVIEW_BYTES);
  if (body === undefined) return tooLarge(req, res);
  const started = performance.now();
  const result = await review(body, target.policy, target.generation, options.admission);
  send(res, result.status, result.body);
  const seconds = (performance.now() - started) / 1000;
  if (result.verdict)
    options.metrics.admission(
      target.policy,
      target.generation,
      result.verdict,
      seconds,
      result.path,
    );
  const { logger } = options;
  if (logger.isLevelEnabled('debug'))
    logger.debug(
      {
        ...target,
        status: result.status,
        verdict: result.verdict,
        path: result.path,
        ms: seconds * 1000,
      },
      'admission review',
    );
}

/**
 * The body as text, or undefined once it passes `max` bytes (the rest is not kept). Events
 * rather than `for await`: this runs for every admission request, and the async iterator
 * costs a promise and a tick per chunk.
 */
function readBody(req: IncomingMessage, max: number): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      if (size > max) return; // answered already
      size += chunk.length;
      if (size <= max) chunks.push(chunk);
      else resolve(undefined); // at once: a client may stream without end
    });
    req.on('end', () => {
      if (size <= max) resolve(Buffer.concat(chunks, size).toString('utf8'));
    });
    req.on('error', reject);
  });
}

function tooLarge(req: IncomingMessage, res: ServerResponse): void {
  send(
    res,
    413,
    { error: `an AdmissionReview may be at most ${MAX_REVIEW_BYTES} bytes` },
    { connection: 'close' },
  );
  res.on('finish', () => req.destroy());
}

function send(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

function sendText(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' });
  res.end(text);
}
