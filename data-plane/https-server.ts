/**
 * The policy server's one HTTPS listener: admission (`POST /validate/<policy>/<generation>`),
 * the audit's batches (`POST /audit`, audit.ts), probes (`/healthz`, `/readyz`) and `/metrics`. Plain node:https rather than a framework:
 * admission latency is the product, and the body cap must apply while reading. Limits on the
 * way in bound what clients can hold: connections, TLS handshakes, bodies, requests in flight.
 */
import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { Logger } from 'pino';
import { POLICY_SERVER_LIVENESS_PATH, POLICY_SERVER_READINESS_PATH } from '../api/constants.ts';
import { AUDIT_PATH } from '../api/audit.ts';
import { parseWebhookPath } from '../api/webhook-path.ts';
import { auditBatch, AuditQueue } from './audit.ts';
import {
  DEFAULT_MAX_REVIEW_BYTES,
  review,
  type AdmissionDeps,
  type AdmissionResult,
} from './admission.ts';
import type { Readiness } from './lifecycle.ts';
import type { PolicyServerMetrics } from './metrics.ts';
import type { TlsPair } from './tls.ts';

/** Limits on the way in, per replica (flags in config.ts). */
export interface IngressLimits {
  /** The largest AdmissionReview body (bytes); 413 beyond. */
  maxReviewBytes: number;
  /** Connections open at once, accepted here or handed over; one more is closed unanswered. */
  maxConnections: number;
  /**
   * AdmissionReview requests being answered at once; past it (or past half of it for one
   * policy) a request is answered at once by its policy's failurePolicy, not evaluated.
   */
  maxInFlight: number;
  /** A connection that has not finished its TLS handshake by then is dropped. */
  tlsHandshakeTimeoutMs: number;
}

export const DEFAULT_INGRESS_LIMITS: IngressLimits = {
  maxReviewBytes: DEFAULT_MAX_REVIEW_BYTES,
  // Far above what the apiservers open (one per concurrent call, bounded by their own
  // max-requests-inflight, plus 25 idle per webhook client), far below what exhausts memory.
  maxConnections: 1024,
  maxInFlight: 256,
  // Node's default is 120 s; client-go gives up on a handshake after 10 s anyway.
  tlsHandshakeTimeoutMs: 10_000,
};

export interface HttpsServerOptions {
  port: number;
  address: string;
  logger: Logger;
  metrics: PolicyServerMetrics;
  readiness(): Readiness;
  admission: AdmissionDeps;
  /** Defaults: DEFAULT_INGRESS_LIMITS. */
  limits?: Partial<IngressLimits>;
  /**
   * A PEM bundle of CAs (`--client-ca-file`): an AdmissionReview is then answered only on a
   * connection whose client certificate one of them signed, such as the apiserver's. Probes
   * and /metrics still need none (the kubelet presents no certificate), so the handshake asks
   * for one without insisting, and the admission path checks it. Unset: any client.
   */
  clientCaFile?: string;
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

/**
 * Closes a connection past `max` open ones before its TLS handshake: the client sees it
 * closed (the apiserver applies the webhook's failurePolicy). Both ways in arrive as the
 * server's 'connection' event, accepted here or handed over (server.maxConnections counts
 * only the first), so the TLS listener is called from here for the connections kept.
 * Returns the count of open connections.
 */
function capConnections(server: Server, max: number, onRefused: () => void): () => number {
  let open = 0;
  const accept = server.listeners('connection') as Array<(socket: Socket) => void>;
  server.removeAllListeners('connection');
  server.on('connection', (socket: Socket) => {
    if (open >= max) {
      socket.destroy();
      onRefused();
      return;
    }
    open++;
    socket.once('close', () => open--);
    for (const listener of accept) listener.call(server, socket);
  });
  return () => open;
}

type Slot = { release(): void } | { overloaded: string };

/**
 * AdmissionReview requests being answered. One policy may hold at most half of them (as one
 * generation may hold at most half of the evaluation threads), so a slow policy flooded with
 * requests fills its own share, and the others' requests are still evaluated.
 */
class InFlight {
  #count = 0;
  readonly #byPolicy = new Map<string, number>();
  readonly #max: number;
  readonly #perPolicy: number;

  constructor(max: number) {
    this.#max = max;
    this.#perPolicy = Math.ceil(max / 2);
  }

  get count(): number {
    return this.#count;
  }

  /** A slot for one request of `policy`, or why there is none. */
  enter(policy: string): Slot {
    const mine = this.#byPolicy.get(policy) ?? 0;
    if (this.#count >= this.#max)
      return {
        overloaded: `policy ${policy}: policy server overloaded: ${this.#count} requests in flight (limit ${this.#max})`,
      };
    if (mine >= this.#perPolicy)
      return {
        overloaded: `policy ${policy}: policy server overloaded: ${mine} requests of this policy in flight (limit ${this.#perPolicy}, half of ${this.#max})`,
      };
    this.#count++;
    this.#byPolicy.set(policy, mine + 1);
    return {
      release: () => {
        this.#count--;
        const left = (this.#byPolicy.get(policy) ?? 1) - 1;
        if (left === 0) this.#byPolicy.delete(policy);
        else this.#byPolicy.set(policy, left);
      },
    };
  }
}

interface Ingress {
  maxReviewBytes: number;
  inFlight: InFlight;
  /** The audit judges a pair only while fewer admission requests than this are in flight. */
  auditRoom: number;
  audits: AuditQueue;
  /** `--client-ca-file` was given: admission needs a verified client certificate. */
  clientCertificates: boolean;
}

/** Reads the client CA bundle; throws saying which file and what is wrong with it. */
export async function readClientCa(path: string): Promise<Buffer> {
  const problem = (what: string) => new Error(`--client-ca-file ${path}: ${what}`);
  let pem: Buffer;
  try {
    pem = await readFile(path);
  } catch (err) {
    throw problem((err as Error).message);
  }
  const blocks = pem
    .toString('utf8')
    .match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g);
  if (!blocks) throw problem('holds no PEM certificate');
  blocks.forEach((block, i) => {
    try {
      new X509Certificate(block);
    } catch (err) {
      throw problem(`certificate ${i + 1} does not parse: ${(err as Error).message}`);
    }
  });
  return pem;
}

export async function startHttpsServer(options: HttpsServerOptions): Promise<PolicyHttpsServer> {
  const limits = { ...DEFAULT_INGRESS_LIMITS, ...options.limits };
  const clientCa =
    options.clientCaFile === undefined ? undefined : await readClientCa(options.clientCaFile);
  const ingress: Ingress = {
    maxReviewBytes: limits.maxReviewBytes,
    inFlight: new InFlight(limits.maxInFlight),
    auditRoom: Math.max(1, Math.floor(limits.maxInFlight / 4)),
    audits: new AuditQueue(),
    clientCertificates: clientCa !== undefined,
  };
  const server = createServer(
    {
      handshakeTimeout: limits.tlsHandshakeTimeoutMs,
      // How often the request and headers timeouts below are checked (Node's default, 30 s,
      // would let a silent connection stay up to 30 s past them).
      connectionsCheckingInterval: 5_000,
      ...(clientCa && { requestCert: true, rejectUnauthorized: false, ca: clientCa }),
    },
    (req, res) => {
      handle(req, res, options, ingress).catch((err: unknown) => {
        options.logger.error({ err, path: req.url }, 'request failed');
        if (!res.headersSent) send(res, 500, { error: 'internal error' });
      });
    },
  );
  const { metrics } = options;
  const connections = capConnections(server, limits.maxConnections, () =>
    metrics.connectionRefused(),
  );
  server.on('tlsClientError', (err: NodeJS.ErrnoException) =>
    metrics.handshakeFailed(err.code === 'ERR_TLS_HANDSHAKE_TIMEOUT' ? 'timeout' : 'error'),
  );
  metrics.watchIngress(() => ({ connections: connections(), inFlight: ingress.inFlight.count }));
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
    // A new context replaces the whole old one: the client CAs go into it again.
    setCertificate: (pair) =>
      server.setSecureContext({
        cert: pair.cert,
        key: pair.key,
        ...(clientCa && { ca: clientCa }),
      }),
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
  ingress: Ingress,
): Promise<void> {
  const path = (req.url ?? '/').split('?')[0]!;
  if (req.method === 'GET' && path === POLICY_SERVER_LIVENESS_PATH)
    return sendText(res, 200, 'ok\n');
  if (req.method === 'GET' && path === POLICY_SERVER_READINESS_PATH) {
    const r = options.readiness();
    return sendText(res, r.ready ? 200 : 503, `${r.ready ? 'ok' : 'not ready'}: ${r.detail}\n`);
  }
  if (req.method === 'GET' && path === '/metrics') {
    const registry = options.metrics.registry;
    res.writeHead(200, { 'content-type': registry.contentType });
    res.end(await registry.metrics());
    return;
  }
  const target = parseWebhookPath(path);
  const auditing = path === AUDIT_PATH;
  if (!target && !auditing)
    return send(res, 404, {
      error: `expected POST /validate/<policy>/<generation> or ${AUDIT_PATH}`,
    });
  if (req.method !== 'POST') return send(res, 405, { error: 'use POST' });
  if (ingress.clientCertificates && !(req.socket as TLSSocket).authorized)
    return refuseUnauthenticated(req, res);

  if (!target) return audit(req, res, options, ingress);

  const max = ingress.maxReviewBytes;
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > max) return tooLarge(req, res, max, options.metrics);
  const body = await readBody(req, max);
  if (body === undefined) return tooLarge(req, res, max, options.metrics);
  const started = performance.now();
  // Counted from the whole body: the answer needs its uid, even one refused for overload.
  const slot = ingress.inFlight.enter(target.policy);
  const overloaded = 'overloaded' in slot ? slot.overloaded : undefined;
  if (overloaded !== undefined) options.metrics.admissionRefused('overloaded');
  let result: AdmissionResult;
  try {
    result = await review(body, target.policy, target.generation, options.admission, overloaded);
  } finally {
    if ('release' in slot) slot.release();
  }
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
 * `POST /audit` (audit.ts): under admission's limits on the body and the client certificate;
 * a batch waits for the one being judged, and is refused (503) when several wait already.
 */
async function audit(
  req: IncomingMessage,
  res: ServerResponse,
  options: HttpsServerOptions,
  ingress: Ingress,
): Promise<void> {
  const busy = () => {
    send(
      res,
      503,
      { error: 'policy server busy: other audit batches are being judged' },
      { connection: 'close', 'retry-after': '5' },
    );
    res.on('finish', () => req.destroy());
  };
  // Refused unread: a queue of bodies would hold their memory.
  if (ingress.audits.full) return busy();
  const max = ingress.maxReviewBytes;
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > max) return tooLarge(req, res, max, options.metrics, 'an audit batch');
  const body = await readBody(req, max);
  if (body === undefined) return tooLarge(req, res, max, options.metrics, 'an audit batch');
  const started = performance.now();
  const answer = await ingress.audits.run(() =>
    auditBatch(body, {
      admission: options.admission,
      enter: (policy) => {
        const admitting = ingress.inFlight.count;
        if (admitting >= ingress.auditRoom)
          return {
            overloaded: `policy server busy: ${admitting} requests in flight (the audit waits for fewer than ${ingress.auditRoom})`,
          };
        return ingress.inFlight.enter(policy);
      },
      evaluated: (policy) => options.metrics.audited(policy),
    }),
  );
  if (!answer) return busy();
  send(res, answer.status, answer.body);
  if (options.logger.isLevelEnabled('debug'))
    options.logger.debug(
      {
        status: answer.status,
        ms: performance.now() - started,
        ...('error' in answer.body
          ? { error: answer.body.error }
          : { pairs: answer.body.results.reduce((n, r) => n + r.length, 0) }),
      },
      'audit batch',
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

function tooLarge(
  req: IncomingMessage,
  res: ServerResponse,
  max: number,
  metrics: PolicyServerMetrics,
  what = 'an AdmissionReview',
): void {
  metrics.admissionRefused('too_large');
  send(
    res,
    413,
    { error: `${what} may be at most ${max} bytes (--max-review-bytes)` },
    { connection: 'close' },
  );
  res.on('finish', () => req.destroy());
}

/** An admission request without a client certificate of the CAs: refused unread. */
function refuseUnauthenticated(req: IncomingMessage, res: ServerResponse): void {
  const socket = req.socket as TLSSocket;
  const presented = Object.keys(socket.getPeerCertificate()).length > 0;
  const why = presented
    ? `the one presented is not: ${String(socket.authorizationError)}`
    : 'none was presented';
  send(
    res,
    403,
    {
      error: `admission requests need a client certificate signed by a CA of --client-ca-file; ${why}`,
    },
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
