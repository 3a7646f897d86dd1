// An open-loop load generator: requests leave on a fixed schedule whatever the answers do, so
// a slow answer cannot hold back the next request (no coordinated omission). Latency counts
// from the scheduled send time, so a generator that falls behind shows up in the figures,
// and its own lag (actual − scheduled send time) is reported beside them.
import type { ClientRequest } from 'node:http';
import { Agent, request, type RequestOptions } from 'node:https';
import type { Socket } from 'node:net';
import { percentile } from './support.ts';

export interface Target {
  host: string;
  port: number;
  /** CA, client certificate and headers (Authorization), as KubeConfig.applyToHTTPSOptions gives. */
  tls: Pick<RequestOptions, 'ca' | 'cert' | 'key' | 'headers'>;
  /** Skip certificate checks: only for a process of our own on loopback whose name we do not dial. */
  insecure?: boolean;
}

export interface LoadOptions {
  /** Requests per second. */
  rate: number;
  /** Requests in the run (the schedule is count / rate seconds long). */
  count: number;
  /** A request not answered in this long is an error (and its socket is destroyed). */
  timeoutMs: number;
  /** Path and body of request `i`. */
  request(i: number): { path: string; body: string };
  /** The status code that counts as success. */
  okStatus: number;
  /**
   * Headers, then the body in a second write (a second TLS record), as a client that writes
   * its request in pieces does; by default a request is one write.
   */
  splitWrites?: boolean;
  /**
   * Told of every HTTP answer (any status) with its body and its milliseconds from the
   * scheduled send, for a caller that sorts answers by what they say (bench/attack.ts).
   */
  onAnswer?(status: number, body: string, ms: number): void;
}

/** One open-loop run, unsummarized, so that runs of one subject in several rounds merge. */
export interface RawRun {
  sent: number;
  /** Milliseconds from scheduled send to the end of the response, successful requests only. */
  latencies: number[];
  /** Milliseconds the generator sent late. */
  lags: number[];
  /** Every failure by kind: `status 403`, `timeout`, `ECONNRESET`, `unanswered`. */
  errors: Record<string, number>;
  /** Connections the agent opened during the run (keep-alive reuses them). */
  connections: number;
  /** The first few error bodies, for the operator. */
  samples: string[];
}

export interface LoadResult {
  rate: number;
  sent: number;
  ok: number;
  errors: Record<string, number>;
  latency: { p50: number; p90: number; p99: number; max: number; mean: number };
  lag: { p99: number; max: number };
  connections: number;
  samples: string[];
}

/** Merges a subject's runs into its figures. */
export function summarize(rate: number, runs: readonly RawRun[]): LoadResult {
  const latencies = runs.flatMap((r) => r.latencies).sort((a, b) => a - b);
  const lags = runs.flatMap((r) => r.lags).sort((a, b) => a - b);
  const errors: Record<string, number> = {};
  for (const r of runs)
    for (const [kind, n] of Object.entries(r.errors)) errors[kind] = (errors[kind] ?? 0) + n;
  return {
    rate,
    sent: runs.reduce((n, r) => n + r.sent, 0),
    ok: latencies.length,
    errors,
    latency: {
      p50: percentile(latencies, 50),
      p90: percentile(latencies, 90),
      p99: percentile(latencies, 99),
      max: latencies.at(-1) ?? NaN,
      mean: latencies.reduce((a, b) => a + b, 0) / (latencies.length || 1),
    },
    lag: { p99: percentile(lags, 99), max: lags.at(-1) ?? NaN },
    connections: runs.reduce((n, r) => n + r.connections, 0),
    samples: runs.flatMap((r) => r.samples).slice(0, 5),
  };
}

/** A keep-alive pool sized well above rate × latency, so requests never queue for a socket. */
export function pooledAgent(target: Target): Agent {
  const { ca, cert, key } = target.tls;
  return new Agent({
    keepAlive: true,
    maxSockets: 256,
    maxFreeSockets: 256,
    ca,
    cert,
    key,
    rejectUnauthorized: !target.insecure,
  });
}

export async function openLoop(target: Target, agent: Agent, opts: LoadOptions): Promise<RawRun> {
  const interval = 1000 / opts.rate;
  const latencies: number[] = [];
  const lags: number[] = [];
  const errors: Record<string, number> = {};
  const samples: string[] = [];
  let connections = 0;
  let answered = 0;
  let sent = 0;
  const fail = (kind: string, detail?: string) => {
    errors[kind] = (errors[kind] ?? 0) + 1;
    if (detail && samples.length < 5) samples.push(`${kind}: ${detail.slice(0, 300)}`);
  };
  // The agent hands out a socket once per request; a socket not seen before is a new connection.
  const seen = new WeakSet<Socket>();
  const onSocket = (socket: Socket) => {
    if (!seen.has(socket)) (seen.add(socket), connections++);
  };

  let resolveDone: () => void = () => {};
  const done = new Promise<void>((r) => (resolveDone = r));
  /** Requests not settled yet, so that the end of the run can cut them. */
  const open = new Set<ClientRequest>();
  let closed = false;

  const fire = (i: number, scheduled: number) => {
    const { path, body } = opts.request(i);
    const started = performance.now();
    lags.push(started - scheduled);
    sent++;
    let settled = false;
    /** Each request ends exactly once: answered, failed, or timed out (counted from its schedule). */
    const settle = (outcome: () => void) => {
      if (settled || closed) return;
      settled = true;
      clearTimeout(timer);
      open.delete(req);
      outcome();
      answered++;
      if (answered === opts.count) resolveDone();
    };
    const req = request(
      {
        host: target.host,
        port: target.port,
        method: 'POST',
        path,
        agent,
        headers: {
          ...target.tls.headers,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          settle(() => {
            const ms = performance.now() - scheduled;
            if (opts.onAnswer)
              opts.onAnswer(res.statusCode ?? 0, Buffer.concat(chunks).toString(), ms);
            if (res.statusCode === opts.okStatus) latencies.push(ms);
            else fail(`status ${res.statusCode}`, Buffer.concat(chunks).toString());
          }),
        );
        res.on('error', (err) => settle(() => fail(err.message)));
      },
    );
    const timer = setTimeout(
      () => {
        settle(() => fail('timeout'));
        req.destroy();
      },
      Math.max(0, scheduled + opts.timeoutMs - performance.now()),
    );
    open.add(req);
    req.on('socket', onSocket);
    req.on('error', (err: NodeJS.ErrnoException) => settle(() => fail(err.code ?? err.message)));
    if (opts.splitWrites) {
      req.flushHeaders();
      setImmediate(() => req.end(body));
    } else req.end(body);
  };

  const t0 = performance.now() + 20;
  let next = 0;
  const tick = () => {
    const now = performance.now();
    // Everything due goes out now: a late timer sends its backlog at once, as an open loop must.
    while (next < opts.count && t0 + next * interval <= now) {
      fire(next, t0 + next * interval);
      next++;
    }
    if (next < opts.count) setTimeout(tick, Math.max(0, t0 + next * interval - performance.now()));
  };
  setTimeout(tick, 20);

  // Bounded in time: the schedule plus one timeout, then whatever is still open is an error.
  const scheduleMs = (opts.count / opts.rate) * 1000;
  const deadline = new Promise<void>((r) =>
    setTimeout(r, 20 + scheduleMs + opts.timeoutMs + 1000).unref(),
  );
  await Promise.race([done, deadline]);
  closed = true;
  for (const req of open) req.destroy();
  // Not sent (the generator fell that far behind) or sent and never settled.
  const unanswered = opts.count - answered;
  if (unanswered > 0) errors.unanswered = unanswered;
  return { sent, latencies, lags, errors, connections, samples };
}
