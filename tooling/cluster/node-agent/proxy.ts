// The node agent's kube-proxy: an HTTP CONNECT proxy on a Unix socket. The apiserver's
// `cluster` egress goes through it, so a webhook that names a Service arrives as
// `CONNECT <clusterIP>:<port>` and goes to a Ready pod's process (round robin per connection,
// routing.ts): handed over to it on its IPC channel when it takes connections so (a policy
// server does), else piped to its port on loopback.
import type { ChildProcess } from 'node:child_process';
import { chmodSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { connect, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { KubernetesObject } from '@kubernetes/client-node';
import { handover } from '../../../data-plane/https-server.ts';
import type { ApiTarget } from '../../../lib/kube/api.ts';
import { Reflector, type ReflectorLogger } from '../../../lib/kube/reflector.ts';
import {
  agentServiceSchema,
  parseConnectTarget,
  pick,
  route,
  type AgentService,
  type Backend,
} from './routing.ts';

export interface ConnectProxyOptions {
  api: ApiTarget;
  /** The Unix socket it listens on (the apiserver's egress dials it). */
  socket: string;
  log: (line: string) => void;
  logger: ReflectorLogger;
  /** The pods the agent runs, as routes see them. */
  backends: () => Backend[];
  /** The pod's process, when it takes connections handed over on its IPC channel. */
  handoverTarget: (namespace: string, name: string) => ChildProcess | undefined;
}

export class ConnectProxy {
  readonly #o: ConnectProxyOptions;
  readonly #services: Reflector<KubernetesObject>;
  /** The round robin's turn counter of each route. */
  readonly #turns = new Map<string, number>();
  readonly #tunnels = new Set<Duplex>();
  readonly #server: Server;

  constructor(options: ConnectProxyOptions) {
    this.#o = options;
    this.#services = new Reflector({
      api: options.api,
      path: '/api/v1/services',
      logger: options.logger,
    });
    this.#server = createServer((_req, res) => {
      res.writeHead(405, { 'content-type': 'text/plain' });
      res.end('the local node agent is an HTTP CONNECT proxy\n');
    });
    this.#server.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
      this.#connect(req, socket, head),
    );
  }

  /** Listens on the socket, which only this user (the apiserver's) may use. */
  async listen(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      rmSync(this.#o.socket, { force: true }); // left by an agent that was killed
      this.#server.listen(this.#o.socket, () => resolve());
    });
    chmodSync(this.#o.socket, 0o600);
  }

  /** Watches the Services it routes by (call it once the apiserver is ready). */
  watch(): void {
    this.#services.start();
  }

  /** Closes the socket and every tunnel through it. */
  close(): void {
    for (const socket of this.#tunnels) socket.destroy();
    this.#server.close();
  }

  async unwatch(): Promise<void> {
    await this.#services.stop();
  }

  /** Takes a CONNECT from the apiserver to a Ready pod's process (handed over or piped). */
  #connect(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    // The reason is the status line's phrase too: the apiserver puts only the status line into
    // the error a webhook call fails with, so this is what an operator sees.
    const refuse = (code: 400 | 502 | 503, reason: string) => {
      this.#o.log(`CONNECT ${req.url}: ${code} ${reason}`);
      const phrase = reason.replace(/[^\x20-\x7e]/g, ' ');
      socket.end(
        `HTTP/1.1 ${code} ${phrase}\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n${reason}\n`,
      );
    };
    const target = parseConnectTarget(req.url);
    if (!target) return refuse(400, `not an IP:port authority: ${req.url}`);
    const services: AgentService[] = [];
    for (const obj of this.#services.list()) {
      const parsed = agentServiceSchema.safeParse(obj);
      if (parsed.success) services.push(parsed.data);
    }
    const chosen = route(target, services, this.#o.backends());
    if ('error' in chosen) return refuse(503, chosen.error);
    const turn = this.#turns.get(chosen.key) ?? 0;
    this.#turns.set(chosen.key, turn + 1);
    const backend = pick(chosen.candidates, turn);
    const child = this.#o.handoverTarget(backend.namespace, backend.name);
    if (child && head.length === 0 && socket instanceof Socket) return handOver(socket, child);
    // Only ever loopback: the backend's port is a process this agent started. noDelay: a request
    // that arrives as two TLS records must not wait for the first one's delayed ACK (~40 ms
    // stalls, bench/RESULTS.md "Where rollcall's time goes").
    const upstream: Socket = connect({ host: '127.0.0.1', port: backend.port!, noDelay: true });
    let established = false;
    this.#tunnels.add(socket);
    const close = () => {
      this.#tunnels.delete(socket);
      upstream.destroy();
      socket.destroy();
    };
    upstream.once('connect', () => {
      established = true;
      socket.write('HTTP/1.1 200 Connection established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
      upstream.on('close', close);
    });
    upstream.on('error', (err) => {
      if (established) return close();
      this.#tunnels.delete(socket);
      refuse(502, `pod ${backend.namespace}/${backend.name}: ${err.message}`);
    });
    socket.on('close', close);
  }
}

/**
 * Hands the apiserver's socket to the pod's process, so that no byte of the connection
 * passes through the agent. Reading stops before the 200 goes out: the TLS handshake the
 * apiserver sends next waits in the kernel for the process, not in the agent's buffers.
 */
function handOver(socket: Socket, child: ChildProcess): void {
  (socket as unknown as { _handle?: { readStop(): number } })._handle?.readStop();
  socket.write('HTTP/1.1 200 Connection established\r\n\r\n', (err) => {
    if (err) return socket.destroy();
    child.send(handover.connection, socket, (sendErr) => {
      if (sendErr) socket.destroy();
    });
  });
}
