// A minimal JSON GET against the apiserver by URL path, for resources no generated client
// names (a reflector lists any path). TLS and credentials come from the KubeConfig.
import http from 'node:http';
import https from 'node:https';
import type { KubeConfig } from '@kubernetes/client-node';

/** The body of a failed API request (metav1.Status), as far as rollcall reads it. */
export interface KubeStatus {
  code?: number;
  reason?: string;
  message?: string;
}

/** A non-2xx answer from the apiserver. */
export class KubeApiError extends Error {
  readonly statusCode: number;
  readonly status: KubeStatus | undefined;
  constructor(statusCode: number, status: KubeStatus | undefined) {
    super(
      `apiserver answered ${statusCode}${status?.reason ? ` ${status.reason}` : ''}: ${status?.message ?? 'no message'}`,
    );
    this.name = 'KubeApiError';
    this.statusCode = statusCode;
    this.status = status;
  }
}

/**
 * GETs `path` with `query` and resolves with the parsed JSON body; rejects with a
 * `KubeApiError` on a non-2xx status, or with the transport error. `signal` aborts it.
 */
export async function getJson(
  kc: KubeConfig,
  path: string,
  query: Record<string, string | number | boolean | undefined>,
  signal?: AbortSignal,
): Promise<unknown> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('the kubeconfig has no current cluster');
  const url = new URL(cluster.server + path);
  for (const [key, value] of Object.entries(query))
    if (value !== undefined) url.searchParams.set(key, String(value));

  const options: https.RequestOptions = { method: 'GET', headers: { Accept: 'application/json' } };
  await kc.applyToHTTPSOptions(options); // CA, client certificate, bearer token, proxy agent
  const transport = url.protocol === 'http:' ? http : https;

  return new Promise((resolve, reject) => {
    const req = transport.request(url, { ...options, signal }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
        const code = res.statusCode ?? 0;
        if (code >= 200 && code < 300 && body !== undefined) resolve(body);
        else reject(new KubeApiError(code, asStatus(body) ?? { message: text.slice(0, 200) }));
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/** Reads a metav1.Status out of an unknown value (a response body or a watch ERROR event). */
export function asStatus(value: unknown): KubeStatus | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const { code, reason, message } = value as Record<string, unknown>;
  return {
    code: typeof code === 'number' ? code : undefined,
    reason: typeof reason === 'string' ? reason : undefined,
    message: typeof message === 'string' ? message : undefined,
  };
}
