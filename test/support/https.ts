// One HTTPS request and its whole answer, for tests that talk to a TLS server directly.
import type { IncomingHttpHeaders } from 'node:http';
import { request, type RequestOptions } from 'node:https';
import type { TLSSocket } from 'node:tls';

export interface HttpsAnswer {
  status: number;
  body: string;
  headers: IncomingHttpHeaders;
  /** The SHA-256 fingerprint of the certificate the server presented. */
  fingerprint: string;
}

export function httpsRequest(
  options: RequestOptions,
  body?: string | Buffer,
): Promise<HttpsAnswer> {
  return new Promise((resolve, reject) => {
    const req = request(options, (res) => {
      const chunks: Buffer[] = [];
      const fingerprint = (res.socket as TLSSocket).getPeerX509Certificate()?.fingerprint256 ?? '';
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          body: Buffer.concat(chunks).toString('utf8'),
          headers: res.headers,
          fingerprint,
        }),
      );
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${options.timeout} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}

/** A JSON request to a server on 127.0.0.1:`port` whose certificate `ca` signed. */
export function callLocal(
  port: string | number,
  ca: Buffer,
  method: string,
  path: string,
  body?: string | Buffer,
): Promise<HttpsAnswer> {
  const options = { host: '127.0.0.1', port, method, path, ca, agent: false };
  return httpsRequest({ ...options, headers: { 'content-type': 'application/json' } }, body);
}
