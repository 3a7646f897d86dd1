// ServiceAccount tokens, as a kubelet gets them for a pod's projected token volume: a
// TokenRequest for the pod's account, bound to the pod (its name and uid ride in the token and
// reach admission as `authentication.kubernetes.io/pod-name` / `pod-uid` in the user's
// extra), renewed at 80% of its lifetime, and dead once the pod is gone. The node agent gives
// each process a kubeconfig that reads the token from a file it rewrites on renewal
// (PodTokens); the demo and the tests use `requestToken` and `tokenKubeconfig` to act as one
// of rollcall's accounts.
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { stringify } from 'yaml';
import { KubeApiError, requestJson, type ApiTarget } from '../../../lib/kube/api.ts';
import { errorText } from '../../../lib/kube/errors.ts';
import type { AgentPod } from './pod.ts';

/** A kubelet's token lifetime (a projected volume's default expirationSeconds is an hour). */
export const DEFAULT_TOKEN_SECONDS = 3600;
/** An API request that takes longer has failed. */
const requestTimeoutMs = 10_000;

/** The pod a token is bound to: it stops authenticating once this pod is deleted. */
export interface BoundPod {
  name: string;
  uid: string;
}

export interface ServiceAccountToken {
  token: string;
  /** When it was issued and when it expires, in ms since the epoch. */
  issuedAt: number;
  expiresAt: number;
}

/**
 * `POST /api/v1/namespaces/NS/serviceaccounts/SA/token` (what `kubectl create token` does).
 * Rejects with the apiserver's answer: a 404 when the account does not exist.
 */
export async function requestToken(
  api: ApiTarget,
  namespace: string,
  account: string,
  { pod, seconds = DEFAULT_TOKEN_SECONDS }: { pod?: BoundPod; seconds?: number } = {},
): Promise<ServiceAccountToken> {
  const issuedAt = Date.now();
  const answer = (await requestJson(
    api,
    'POST',
    `/api/v1/namespaces/${namespace}/serviceaccounts/${account}/token`,
    {
      body: {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenRequest',
        spec: {
          expirationSeconds: seconds,
          ...(pod && {
            boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: pod.name, uid: pod.uid },
          }),
        },
      },
      signal: AbortSignal.timeout(requestTimeoutMs),
    },
  )) as { status?: { token?: unknown; expirationTimestamp?: unknown } };
  const token = answer.status?.token;
  const expires = Date.parse(String(answer.status?.expirationTimestamp));
  if (typeof token !== 'string' || !token || Number.isNaN(expires))
    throw new Error(`the TokenRequest for ${namespace}/${account} answered without a token`);
  return { token, issuedAt, expiresAt: expires };
}

/** When a kubelet renews a token: at 80% of its lifetime. */
export function renewalDue(token: Pick<ServiceAccountToken, 'issuedAt' | 'expiresAt'>): number {
  return token.issuedAt + 0.8 * (token.expiresAt - token.issuedAt);
}

export interface TokenKubeconfigInput {
  server: string;
  /** The cluster's CA: a file, or its PEM bytes. */
  ca: { file: string } | { data: Buffer };
  /** The user's name in the file (e.g. the account's). */
  user: string;
  namespace: string;
  /**
   * The token itself, or a file that holds it and is rewritten as it rotates. A file is
   * written in client-node's in-cluster form (`auth-provider: tokenFile`), which client-node
   * rereads every minute and lib/kube/api.ts on every request; kubectl does not read it.
   */
  token: { value: string } | { file: string };
}

/** A kubeconfig whose only user is a bearer token. */
export function tokenKubeconfig(input: TokenKubeconfigInput): string {
  const ca =
    'file' in input.ca
      ? { 'certificate-authority': input.ca.file }
      : { 'certificate-authority-data': input.ca.data.toString('base64') };
  const user =
    'value' in input.token
      ? { token: input.token.value }
      : { 'auth-provider': { name: 'tokenFile', config: { tokenFile: input.token.file } } };
  const name = input.user;
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'cluster', cluster: { server: input.server, ...ca } }],
    users: [{ name, user }],
    contexts: [{ name, context: { cluster: 'cluster', user: name, namespace: input.namespace } }],
    'current-context': name,
  });
}

/** The account a pod runs as: spec.serviceAccountName, else `default` (no admission plugin defaults it here). */
export function podAccount(pod: AgentPod): string {
  return pod.spec.serviceAccountName || pod.spec.serviceAccount || 'default';
}

/** Why a pod's token cannot be had yet, as its container's waiting state says it. */
export interface NoToken {
  reason: string;
  message: string;
}

/** Renewal retries after a failure: soon, but not in a tight loop. */
const retryMs = 10_000;

export interface RenewedTokenOptions {
  api: ApiTarget;
  namespace: string;
  account: string;
  /** Bind the token to this pod. */
  pod?: BoundPod;
  /** Where the token is written (0600) and rewritten on renewal. */
  file: string;
  /** The token's lifetime; the apiserver refuses less than 600 s. */
  seconds?: number;
  log: (line: string) => void;
}

/**
 * One account's token in a file, as a kubelet keeps a projected token: requested, written,
 * and requested again at 80% of its lifetime (every 10 s after a failed renewal, while the
 * old one still holds) until stopped.
 */
export class RenewedToken {
  readonly #o: RenewedTokenOptions;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(options: RenewedTokenOptions) {
    this.#o = options;
  }

  /** The first token, written; rejects with the apiserver's answer (the account is missing). */
  async start(): Promise<void> {
    const token = await this.#request();
    if (this.#stopped) return;
    mkdirSync(dirname(this.#o.file), { recursive: true, mode: 0o700 });
    writePrivate(this.#o.file, token.token);
    this.#renewLater(renewalDue(token) - Date.now());
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
  }

  #request(): Promise<ServiceAccountToken> {
    const { api, namespace, account, pod, seconds } = this.#o;
    return requestToken(api, namespace, account, { pod, seconds });
  }

  #renewLater(delayMs: number): void {
    const { namespace, account, pod } = this.#o;
    const whose = `${pod ? `pod ${namespace}/${pod.name}: ` : ''}the token of ${namespace}/${account}`;
    this.#timer = setTimeout(
      () => {
        this.#request().then(
          (token) => {
            if (this.#stopped) return;
            writePrivate(this.#o.file, token.token);
            this.#o.log(`renewed ${whose}`);
            this.#renewLater(renewalDue(token) - Date.now());
          },
          (err: unknown) => {
            if (this.#stopped) return;
            this.#o.log(`could not renew ${whose}: ${errorText(err)}`);
            this.#renewLater(retryMs);
          },
        );
      },
      Math.max(delayMs, 0),
    );
    this.#timer.unref();
  }
}

export interface PodTokensOptions {
  api: ApiTarget;
  /** The apiserver's URL and the CA file that verifies it, for the pods' kubeconfigs. */
  server: string;
  caFile: string;
  log: (line: string) => void;
  /** The tokens' lifetime (default an hour). */
  seconds?: number;
}

/** A pod's identity on disk: its kubeconfig (none when the pod opts out of a token). */
export interface PodIdentity {
  kubeconfig: string | undefined;
}

/**
 * The tokens of the agent's pods: minted when a pod's process is about to start, written to
 * `<pod dir>/serviceaccount/token` next to a kubeconfig that reads it, and renewed until
 * the pod is released.
 */
export class PodTokens {
  readonly #o: PodTokensOptions;
  /** By pod uid (a pod replaced under its name is another pod). */
  readonly #tokens = new Map<string, RenewedToken>();

  constructor(options: PodTokensOptions) {
    this.#o = options;
  }

  /**
   * Mints the pod's token and writes its kubeconfig, or says why it cannot (as a kubelet's
   * token volume fails to mount: the pod stays ContainerCreating).
   */
  async mount(pod: AgentPod, podDir: string): Promise<PodIdentity | NoToken> {
    const { namespace, name, uid } = pod.metadata;
    this.release(uid);
    if (pod.spec.automountServiceAccountToken === false) return { kubeconfig: undefined };
    const account = podAccount(pod);
    const file = join(podDir, 'serviceaccount', 'token');
    const token = new RenewedToken({
      api: this.#o.api,
      namespace,
      account,
      pod: { name, uid },
      file,
      seconds: this.#o.seconds,
      log: this.#o.log,
    });
    try {
      await token.start();
    } catch (err) {
      const why =
        err instanceof KubeApiError ? (err.status?.message ?? err.message) : errorText(err);
      return {
        reason: 'ContainerCreating',
        message: `MountVolume.SetUp failed for volume "kube-api-access": failed to fetch token: ${why}`,
      };
    }
    this.#tokens.set(uid, token);
    const kubeconfig = join(podDir, 'kubeconfig');
    writePrivate(
      kubeconfig,
      tokenKubeconfig({
        server: this.#o.server,
        ca: { file: this.#o.caFile },
        user: `system:serviceaccount:${namespace}:${account}`,
        namespace,
        token: { file },
      }),
    );
    return { kubeconfig };
  }

  /** Stops renewing the token of the pod with this uid (its process stopped or never started). */
  release(uid: string): void {
    this.#tokens.get(uid)?.stop();
    this.#tokens.delete(uid);
  }

  stop(): void {
    for (const uid of [...this.#tokens.keys()]) this.release(uid);
  }
}

/** Writes a 0600 file by a rename, so a reader never sees half of it. */
export function writePrivate(file: string, content: string): void {
  writeFileSync(`${file}.tmp`, content, { mode: 0o600 });
  renameSync(`${file}.tmp`, file);
}
