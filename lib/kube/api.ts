// A small client of the Kubernetes API for every role (watcher, workers, policy server): JSON
// requests and watches on node:http(s), with a kubeconfig's or the pod's service account's
// credentials.
//
// Why not @kubernetes/client-node here: loading it loads its whole generated API and undici,
// 78 MiB of a process's resident memory (bench/RESULTS.md, "Memory"), and its serializer walks
// every model on each request, while rollcall's watches, reads and writes
// (control-plane/functions/kube-writer.ts) are a few JSON requests. A kubeconfig whose user
// needs a plugin (`exec`, `auth-provider`) or a proxy is handed to client-node, loaded only then.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { dirname, resolve } from 'node:path';
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
  /** The answer's headers (a 429's Retry-After: lib/kube/errors.ts `responseHeaderOf`). */
  readonly headers: http.IncomingHttpHeaders;
  constructor(
    statusCode: number,
    status: KubeStatus | undefined,
    headers: http.IncomingHttpHeaders = {},
  ) {
    super(
      `apiserver answered ${statusCode}${status?.reason ? ` ${status.reason}` : ''}: ${status?.message ?? 'no message'}`,
    );
    this.name = 'KubeApiError';
    this.statusCode = statusCode;
    this.status = status;
    this.headers = headers;
  }
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

/** The path of an apiVersion's API: `/api/v1` for the core group, `/apis/apps/v1` for others. */
export function groupVersionPath(apiVersion: string): string {
  return apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
}

/** Where the apiserver is and how to reach it: what one request needs. */
export interface ApiTarget {
  /** The apiserver's URL, e.g. `https://127.0.0.1:6443`. */
  readonly server: string;
  /** TLS material and headers for the next request (a token file is reread as it rotates). */
  requestOptions(): Promise<https.RequestOptions>;
}

/** The TLS material and credentials a kubeconfig or service account resolves to. */
export interface Credentials {
  server: string;
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  /** `insecure-skip-tls-verify`. */
  insecure?: boolean;
  /** `tls-server-name`: the name to verify the serving certificate against. */
  serverName?: string;
  token?: string;
  /** A file holding the bearer token, reread for every request (it rotates). */
  tokenFile?: string;
  username?: string;
  password?: string;
}

/** An ApiTarget of resolved credentials, with one keep-alive connection pool. */
export function credentialsTarget(c: Credentials): ApiTarget {
  const agent = new https.Agent({
    keepAlive: true,
    ...(c.ca && { ca: c.ca }),
    ...(c.cert && { cert: c.cert }),
    ...(c.key && { key: c.key }),
    ...(c.serverName && { servername: c.serverName }),
    rejectUnauthorized: !c.insecure,
  });
  const plain = new http.Agent({ keepAlive: true });
  return {
    server: c.server,
    async requestOptions() {
      const token = c.tokenFile ? readFileSync(c.tokenFile, 'utf8').trim() : c.token;
      const authorization = token
        ? `Bearer ${token}`
        : c.username !== undefined
          ? `Basic ${Buffer.from(`${c.username}:${c.password ?? ''}`).toString('base64')}`
          : undefined;
      return {
        agent: c.server.startsWith('http:') ? plain : agent,
        headers: authorization ? { Authorization: authorization } : {},
      };
    },
  };
}

/** An ApiTarget from a client-node KubeConfig: every auth method it knows, one agent per request. */
export function kubeConfigTarget(kc: KubeConfig): ApiTarget {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('the kubeconfig has no current cluster');
  return {
    server: cluster.server,
    async requestOptions() {
      const options: https.RequestOptions = {};
      await kc.applyToHTTPSOptions(options); // CA, client certificate, token or plugin, proxy agent
      return options;
    },
  };
}

const serviceAccountDir = '/var/run/secrets/kubernetes.io/serviceaccount';

/** The pod's service account, as client-go's in-cluster config reads it. */
export function inClusterCredentials(env = process.env, dir = serviceAccountDir): Credentials {
  const host = env['KUBERNETES_SERVICE_HOST'];
  const port = env['KUBERNETES_SERVICE_PORT'];
  if (!host || !port)
    throw new Error(
      'no kubeconfig was given and this is not a pod (KUBERNETES_SERVICE_HOST/PORT are unset)',
    );
  return {
    server: `https://${host.includes(':') ? `[${host}]` : host}:${port}`,
    ca: readFileSync(`${dir}/ca.crt`),
    tokenFile: `${dir}/token`,
  };
}

type Named<T> = { name?: string } & T;
interface KubeconfigFile {
  'current-context'?: string;
  contexts?: Named<{ context?: { cluster?: string; user?: string } }>[];
  clusters?: Named<{ cluster?: Record<string, unknown> }>[];
  users?: Named<{ user?: Record<string, unknown> }>[];
}

/**
 * The credentials of a kubeconfig's current context (`document`, the parsed file), or
 * `undefined` when its user or cluster needs what only client-node does (an exec or
 * auth-provider plugin, a proxy). client-node's own in-cluster form, `auth-provider` named
 * `tokenFile`, is a token file. Files it names are relative to `baseDir`.
 */
export function kubeconfigCredentials(document: unknown, baseDir: string): Credentials | undefined {
  const file = (document ?? {}) as KubeconfigFile;
  const contextName = file['current-context'];
  const context = file.contexts?.find((c) => c.name === contextName)?.context;
  if (!context) throw new Error(`the kubeconfig has no context named '${contextName ?? ''}'`);
  const cluster = file.clusters?.find((c) => c.name === context.cluster)?.cluster;
  if (!cluster) throw new Error(`the kubeconfig has no cluster named '${context.cluster ?? ''}'`);
  const user = file.users?.find((u) => u.name === context.user)?.user ?? {};
  const str = (o: Record<string, unknown>, k: string) =>
    typeof o[k] === 'string' ? o[k] : undefined;
  const tokenFile = str(user, 'tokenFile') ?? tokenFileProvider(user['auth-provider']);
  if (user['exec'] || (user['auth-provider'] && !tokenFile) || cluster['proxy-url'])
    return undefined;

  // `<name>-data` is base64 inline; `<name>` is a file, relative to the kubeconfig's folder.
  const material = (o: Record<string, unknown>, name: string) => {
    const data = str(o, `${name}-data`);
    if (data) return Buffer.from(data, 'base64');
    const path = str(o, name);
    return path ? readFileSync(resolve(baseDir, path)) : undefined;
  };
  const server = str(cluster, 'server');
  if (!server) throw new Error(`the kubeconfig's cluster '${context.cluster}' has no server`);
  return {
    server,
    ca: material(cluster, 'certificate-authority'),
    cert: material(user, 'client-certificate'),
    key: material(user, 'client-key'),
    insecure: cluster['insecure-skip-tls-verify'] === true,
    serverName: str(cluster, 'tls-server-name'),
    token: str(user, 'token'),
    tokenFile: tokenFile && resolve(baseDir, tokenFile),
    username: str(user, 'username'),
    password: str(user, 'password'),
  };
}

/** The file of client-node's `auth-provider: {name: tokenFile, config: {tokenFile}}`, if that. */
function tokenFileProvider(provider: unknown): string | undefined {
  const { name, config } = (provider ?? {}) as { name?: unknown; config?: { tokenFile?: unknown } };
  const file = config?.tokenFile;
  return name === 'tokenFile' && typeof file === 'string' ? file : undefined;
}

/** The ApiTarget of the kubeconfig at `path`, or of the pod's service account when there is none. */
export async function loadApiTarget(path: string | undefined): Promise<ApiTarget> {
  if (!path) return credentialsTarget(inClusterCredentials());
  const { parse } = await import('yaml'); // only for a kubeconfig: a pod reads its service account
  const credentials = kubeconfigCredentials(parse(readFileSync(path, 'utf8')), dirname(path));
  if (credentials) return credentialsTarget(credentials);
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  return kubeConfigTarget(kc);
}

type Query = Record<string, string | number | boolean | undefined>;

/** What one request may carry besides its method and path. */
interface SendOptions {
  query?: Query;
  /** Sent as JSON. */
  body?: unknown;
  /** The body's media type, `application/json` unless given (a PATCH names its kind). */
  contentType?: string;
  /** The answer's media type, `application/json` unless given (see METADATA_ONLY). */
  accept?: string;
  signal?: AbortSignal | undefined;
}

/**
 * Accept headers that make the apiserver answer with objects' metadata only
 * (PartialObjectMetadata, as client-go's metadata client asks): a list, and a watch's events.
 * No fallback to whole objects: an apiserver that cannot answer so refuses (406).
 */
export const METADATA_ONLY = {
  list: 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1',
  watch: 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1',
} as const;

/** Sends one request and resolves with the response once its headers arrive. */
async function send(
  target: ApiTarget,
  method: string,
  path: string,
  options: SendOptions,
): Promise<http.IncomingMessage> {
  const url = new URL(target.server + path);
  for (const [key, value] of Object.entries(options.query ?? {}))
    if (value !== undefined) url.searchParams.set(key, String(value));
  const base = await target.requestOptions();
  const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
  const transport = url.protocol === 'http:' ? http : https;
  return new Promise((ok, fail) => {
    const req = transport.request(url, {
      ...base,
      method,
      headers: {
        Accept: options.accept ?? 'application/json',
        // Content-Length, not left to Node: it frames the body of a DELETE only so.
        ...(payload !== undefined && {
          'Content-Type': options.contentType ?? 'application/json',
          'Content-Length': Buffer.byteLength(payload),
        }),
        ...base.headers,
      },
      ...(options.signal && { signal: options.signal }),
    });
    req.on('response', ok);
    req.on('error', fail);
    req.end(payload);
  });
}

/** The parsed JSON body of a 2xx answer; a `KubeApiError` for any other. */
function answer(res: http.IncomingMessage): Promise<unknown> {
  return new Promise((ok, fail) => {
    const chunks: Buffer[] = [];
    res.on('data', (chunk: Buffer) => chunks.push(chunk));
    res.on('error', fail);
    res.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        body = undefined;
      }
      const code = res.statusCode ?? 0;
      if (code >= 200 && code < 300 && body !== undefined) ok(body);
      else
        fail(
          new KubeApiError(code, asStatus(body) ?? { message: text.slice(0, 200) }, res.headers),
        );
    });
  });
}

/** What `requestJson` takes besides its method and path. */
export type RequestOptions = SendOptions & { timeoutMs?: number };

/**
 * How long a request (not a watch) may take: longer than the apiserver's own limit
 * (`--request-timeout`, 60 s by default), so a slow apiserver answers first, while a connection
 * gone silent (a partition, a half-open socket) fails instead of holding its job forever.
 */
export const REQUEST_TIMEOUT_MS = 70_000;

/**
 * Sends `method path?query` with an optional JSON `body` and resolves with the parsed JSON
 * answer; rejects with a `KubeApiError` on a non-2xx status, with the transport error, or
 * after `timeoutMs` (default REQUEST_TIMEOUT_MS) without a whole answer.
 */
export async function requestJson(
  target: ApiTarget,
  method: string,
  path: string,
  options: RequestOptions = {},
): Promise<unknown> {
  const { timeoutMs = REQUEST_TIMEOUT_MS, ...rest } = options;
  const timeout = AbortSignal.timeout(timeoutMs);
  const signal = rest.signal ? AbortSignal.any([rest.signal, timeout]) : timeout;
  try {
    return await answer(await send(target, method, path, { ...rest, signal }));
  } catch (err) {
    if (!timeout.aborted || rest.signal?.aborted) throw err;
    throw new Error(`the apiserver did not answer ${method} ${path} within ${timeoutMs} ms`, {
      cause: err,
    });
  }
}

/**
 * True when the apiserver answers a health endpoint (`/readyz`, `/livez`) with 200; false for
 * any other status or a transport error. Its answer is text, so `requestJson` would not do.
 */
export async function isHealthy(
  target: ApiTarget,
  path: string,
  signal?: AbortSignal,
): Promise<boolean> {
  try {
    const res = await send(target, 'GET', path, { signal });
    res.resume();
    return res.statusCode === 200;
  } catch {
    return false;
  }
}

/** GETs `path` with `query` and resolves with the parsed JSON body (see `requestJson`). */
export function getJson(
  target: ApiTarget,
  path: string,
  query: Query,
  signal?: AbortSignal,
  accept?: string,
): Promise<unknown> {
  return requestJson(target, 'GET', path, { query, ...(signal && { signal }), accept });
}

/**
 * Watches `path` (`watch=1` is added): calls `onEvent` for each event of the stream, in order,
 * and resolves when the server ends it. Rejects with a `KubeApiError` when the apiserver
 * refuses the watch, or with the transport error; `signal` aborts it (the promise rejects).
 */
export async function watchJson(
  target: ApiTarget,
  path: string,
  query: Query,
  onEvent: (type: string, object: unknown) => void,
  signal?: AbortSignal,
  accept?: string,
): Promise<void> {
  const res = await send(target, 'GET', path, { query: { ...query, watch: true }, signal, accept });
  const code = res.statusCode ?? 0;
  if (code < 200 || code >= 300) await answer(res); // rejects with the apiserver's Status
  res.setEncoding('utf8');
  let pending = '';
  await new Promise<void>((ok, fail) => {
    /** Delivers one line of the stream; false once it was not JSON (the watch then fails). */
    const deliver = (line: string): boolean => {
      if (!line) return true;
      let event: { type?: unknown; object?: unknown };
      try {
        event = JSON.parse(line) as typeof event;
      } catch {
        fail(new Error(`the watch sent a line that is not JSON: ${line.slice(0, 100)}`));
        res.destroy();
        return false;
      }
      onEvent(String(event.type), event.object);
      return true;
    };
    res.on('data', (chunk: string) => {
      pending += chunk;
      for (let newline; (newline = pending.indexOf('\n')) >= 0;) {
        const line = pending.slice(0, newline).trim();
        pending = pending.slice(newline + 1);
        if (!deliver(line)) return;
      }
    });
    res.on('error', fail);
    // A last event without its newline still counts.
    res.on('end', () => deliver(pending.trim()) && ok());
    // After 'end' this changes nothing; without it, the connection was cut mid-stream.
    res.on('close', () => fail(new Error('the watch connection closed before the watch ended')));
  });
}
