// A plain-HTTP proxy on loopback in front of the local apiserver, adding the kubeconfig's
// credentials. Tests and the bench point a process at it (through the kubeconfig it writes)
// to see or hold back that process's API requests from outside the process.
import { writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { Agent, request as httpsRequest, type RequestOptions } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { KubeConfig } from '@kubernetes/client-node';

export interface ApiProxy {
  url: string;
  close(): Promise<void>;
}

/**
 * Starts the proxy. `intercept` sees each request (and its response, to time it) first; the
 * request is forwarded once it returns (or its promise settles), so it can count requests or
 * hold them back.
 */
export async function startApiProxy(
  kc: KubeConfig,
  intercept: (req: IncomingMessage, res: ServerResponse) => void | Promise<void> = () => {},
): Promise<ApiProxy> {
  const target = new URL(kc.getCurrentCluster()!.server);
  const credentials: RequestOptions = {};
  await kc.applyToHTTPSOptions(credentials);
  const { ca, cert, key } = credentials;
  // One keep-alive pool for every forwarded request, as a client under load would have.
  const agent = new Agent({ keepAlive: true, maxSockets: Infinity, ca, cert, key });
  const server = createServer((req, res) => {
    void Promise.resolve(intercept(req, res)).then(() => {
      const upstream = httpsRequest(
        {
          hostname: target.hostname,
          port: target.port,
          method: req.method,
          path: req.url,
          agent,
          headers: { ...req.headers, ...credentials.headers, host: target.host },
        },
        (up) => {
          res.writeHead(up.statusCode ?? 502, up.headers);
          // Now, not with the first body chunk: a quiet watch would otherwise leave the client
          // waiting for headers, unable to abort it (client-node's Watch takes no signal).
          res.flushHeaders();
          up.pipe(res);
        },
      );
      upstream.on('error', () => res.destroy());
      res.on('close', () => upstream.destroy());
      req.pipe(upstream);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close() {
      server.closeAllConnections();
      agent.destroy();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

/**
 * Writes a kubeconfig for `proxyUrl` (the proxy adds the credentials). client-node allows
 * plain http only with skip-verify set, though there is no TLS to verify.
 */
export function writeProxyKubeconfig(proxyUrl: string, path: string): string {
  writeFileSync(
    path,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        { name: 'proxy', cluster: { server: proxyUrl, 'insecure-skip-tls-verify': true } },
      ],
      users: [{ name: 'proxy', user: {} }],
      contexts: [{ name: 'proxy', context: { cluster: 'proxy', user: 'proxy' } }],
      'current-context': 'proxy',
    }),
  );
  return path;
}
