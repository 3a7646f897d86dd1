// A scripted stand-in for the apiserver's list and watch endpoints, so the reflector's
// reactions to pagination, 410s, errors and silence can be tested deterministically.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { credentialsTarget, type ApiTarget } from '../../../lib/kube/api.ts';

/** An answer to a list request: a status and a JSON body. */
export interface Answer {
  status: number;
  body: unknown;
}

/** The server side of one watch request. */
export interface WatchStream {
  readonly query: URLSearchParams;
  /** Sends one event line (status 200 is sent with the first one). */
  send(type: string, object: unknown): void;
  /** Ends the response normally, as the apiserver does when timeoutSeconds elapsed. */
  end(): void;
  /** Answers with a non-200 status instead of a stream. */
  fail(status: number, body?: unknown): void;
}

/** What the server does with the n-th watch request; watches beyond the script stay open and quiet. */
export type WatchScript = (watch: WatchStream) => void;

export interface FakeApiServerOptions {
  list: (query: URLSearchParams) => Answer;
  watches?: WatchScript[];
}

export class FakeApiServer {
  readonly lists: URLSearchParams[] = [];
  readonly watches: URLSearchParams[] = [];
  readonly #server: Server;
  readonly #options: FakeApiServerOptions;
  readonly #open = new Set<ServerResponse>();

  private constructor(options: FakeApiServerOptions) {
    this.#options = options;
    this.#server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://fake');
      if (url.searchParams.get('watch') === 'true') this.#watch(url.searchParams, res);
      else {
        this.lists.push(url.searchParams);
        const { status, body } = this.#options.list(url.searchParams);
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      }
    });
  }

  static async start(options: FakeApiServerOptions): Promise<FakeApiServer> {
    const fake = new FakeApiServer(options);
    await new Promise<void>((resolve) => fake.#server.listen(0, '127.0.0.1', resolve));
    return fake;
  }

  /** The API target of this server (lib/kube/api.ts), as the watcher reaches the apiserver. */
  target(): ApiTarget {
    const { port } = this.#server.address() as AddressInfo;
    return credentialsTarget({ server: `http://127.0.0.1:${port}` });
  }

  /** Watches currently open. */
  get openWatches(): number {
    return this.#open.size;
  }

  async close(): Promise<void> {
    for (const res of this.#open) res.destroy();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #watch(query: URLSearchParams, res: ServerResponse): void {
    const script = this.#options.watches?.[this.watches.length];
    this.watches.push(query);
    this.#open.add(res);
    res.on('close', () => this.#open.delete(res));
    const head = () => {
      if (!res.headersSent) res.writeHead(200, { 'content-type': 'application/json' });
    };
    const stream: WatchStream = {
      query,
      send: (type, object) => {
        head();
        res.write(`${JSON.stringify({ type, object })}\n`);
      },
      end: () => {
        head();
        res.end();
      },
      fail: (status, body = { kind: 'Status', code: status, message: `fake ${status}` }) => {
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      },
    };
    if (script) script(stream);
    else head(); // quiet, open watch
    if (!res.writableEnded) res.flushHeaders();
  }
}

/** A ConfigMap fixture. */
export function configMap(
  name: string,
  resourceVersion: string,
  data: Record<string, string> = {},
) {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name, namespace: 'ns', resourceVersion },
    data,
  };
}

/** A ConfigMapList page as the apiserver returns it (items without apiVersion/kind). */
export function configMapList(
  resourceVersion: string,
  items: ReturnType<typeof configMap>[],
  continueToken?: string,
): Answer {
  return {
    status: 200,
    body: {
      apiVersion: 'v1',
      kind: 'ConfigMapList',
      metadata: { resourceVersion, ...(continueToken ? { continue: continueToken } : {}) },
      items: items.map(({ metadata, data }) => ({ metadata, data })),
    },
  };
}

/** The Status of a watch ERROR event for a resourceVersion that left the apiserver's window. */
export const expired = (message?: string) => ({
  kind: 'Status',
  code: 410,
  reason: 'Expired',
  ...(message === undefined ? {} : { message }),
});
