// A TCP proxy in front of the apiserver that a test can cut, to see how clients live
// through lost connections without touching the shared cluster.
import { connect, createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';

export class TcpProxy {
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  #refusing = false;

  private constructor(target: URL) {
    this.#server = createServer((client) => {
      if (this.#refusing) return void client.destroy();
      const upstream = connect(Number(target.port), target.hostname);
      for (const socket of [client, upstream]) {
        this.#sockets.add(socket);
        socket.on('close', () => this.#sockets.delete(socket));
        socket.on('error', () => {}); // a cut connection is the point
      }
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
      client.pipe(upstream).pipe(client);
    });
  }

  /** Starts a proxy to the current cluster of `kc` and returns it with a KubeConfig that goes through it. */
  static async inFrontOf(kc: KubeConfig): Promise<{ proxy: TcpProxy; kc: KubeConfig }> {
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('no current cluster');
    const proxy = new TcpProxy(new URL(cluster.server));
    await new Promise<void>((resolve) => proxy.#server.listen(0, '127.0.0.1', resolve));
    const { port } = proxy.#server.address() as AddressInfo;
    const proxied = new KubeConfig();
    proxied.loadFromOptions({
      clusters: kc
        .getClusters()
        .map((c) => (c.name === cluster.name ? { ...c, server: `https://127.0.0.1:${port}` } : c)),
      users: kc.getUsers(),
      contexts: kc.getContexts(),
      currentContext: kc.getCurrentContext(),
    });
    return { proxy, kc: proxied };
  }

  /** Destroys every open connection; with `refuse`, new ones are dropped too until `restore()`. */
  cut({ refuse = false }: { refuse?: boolean } = {}): void {
    this.#refusing = refuse;
    for (const socket of this.#sockets) socket.destroy();
  }

  restore(): void {
    this.#refusing = false;
  }

  async close(): Promise<void> {
    this.cut({ refuse: true });
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}
