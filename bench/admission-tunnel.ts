// An HTTPS agent whose connections go the way the apiserver's webhook calls go on the local
// cluster: HTTP CONNECT to a Service's ClusterIP over the node agent's Unix socket, then TLS
// inside the tunnel. The admission bench uses it to time that hop without the apiserver.
import type { ClientRequestArgs } from 'node:http';
import { Agent, type AgentOptions } from 'node:https';
import { connect as netConnect } from 'node:net';
import type { Duplex } from 'node:stream';
import { connect as tlsConnect } from 'node:tls';

export class TunnelAgent extends Agent {
  readonly #socketPath: string;
  readonly #authority: string;
  readonly #verify: boolean;

  constructor(socketPath: string, authority: string, options: AgentOptions) {
    super(options);
    this.#socketPath = socketPath;
    this.#authority = authority;
    this.#verify = options.rejectUnauthorized !== false;
  }

  // node:http takes a connection handed over later through the callback.
  override createConnection(
    _options: ClientRequestArgs,
    callback?: (err: Error | null, stream: Duplex) => void,
  ): undefined {
    const raw = netConnect(this.#socketPath);
    let answered = false;
    const answer = (err: Error | null, stream: Duplex = raw) => {
      if (answered) return;
      answered = true;
      callback?.(err, stream);
    };
    let head = '';
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1');
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      raw.pause();
      raw.off('data', onData);
      if (!/^HTTP\/1\.[01] 200/.test(head)) {
        raw.destroy();
        return answer(new Error(`CONNECT ${this.#authority}: ${head.split('\r\n')[0]}`));
      }
      // Bytes after the CONNECT answer belong to TLS: give them back to the stream.
      const rest = Buffer.from(head.slice(end + 4), 'latin1');
      if (rest.length) raw.unshift(rest);
      const socket = tlsConnect({ socket: raw, rejectUnauthorized: this.#verify });
      socket.once('secureConnect', () => answer(null, socket));
      socket.once('error', (err) => answer(err));
    };
    raw.on('data', onData);
    raw.once('error', (err) => answer(err));
    raw.write(`CONNECT ${this.#authority} HTTP/1.1\r\nHost: ${this.#authority}\r\n\r\n`);
    return undefined;
  }
}
