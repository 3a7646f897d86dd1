// The node agent's ServiceAccount tokens (tooling/cluster/node-agent/tokens.ts): the
// TokenRequest it sends (bound to the pod), the kubeconfig a pod's process reads, renewal at
// 80% of the lifetime, and a pod whose account does not exist left waiting with the reason.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { parse } from 'yaml';
import { credentialsTarget, kubeconfigCredentials } from '../../../lib/kube/api.ts';
import { agentPodSchema, type AgentPod } from '../../../tooling/cluster/node-agent/pod.ts';
import {
  PodTokens,
  podAccount,
  renewalDue,
  requestToken,
  tokenKubeconfig,
} from '../../../tooling/cluster/node-agent/tokens.ts';

const pod = (spec: Record<string, unknown> = {}): AgentPod =>
  agentPodSchema.parse({
    metadata: { name: 'policy-server-a-1', namespace: 'rollcall-system', uid: 'uid-1' },
    spec: { containers: [{ name: 'policy-server', image: 'rollcall:0.1.0' }], ...spec },
  });

/** A fake apiserver's TokenRequest endpoint: tokens valid `lifetimeMs`, numbered; 404 for `absent`. */
class FakeTokenApi {
  readonly requests: { path: string; body: Record<string, unknown> }[] = [];
  lifetimeMs = 3_600_000;
  #server: Server | undefined;
  #n = 0;

  async start(): Promise<string> {
    this.#server = createServer((req, res) => void this.#answer(req, res));
    await new Promise<void>((r) => this.#server!.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  stop(): Promise<void> {
    return new Promise((r) => this.#server?.close(() => r()));
  }

  async #answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let text = '';
    for await (const chunk of req) text += String(chunk);
    this.requests.push({ path: req.url ?? '', body: JSON.parse(text) as Record<string, unknown> });
    res.setHeader('content-type', 'application/json');
    if (req.url?.includes('/serviceaccounts/absent/')) {
      res.statusCode = 404;
      res.end(
        JSON.stringify({
          kind: 'Status',
          code: 404,
          reason: 'NotFound',
          message: 'serviceaccounts "absent" not found',
        }),
      );
      return;
    }
    const expirationTimestamp = new Date(Date.now() + this.lifetimeMs).toISOString();
    res.end(JSON.stringify({ status: { token: `token-${++this.#n}`, expirationTimestamp } }));
  }
}

describe('ServiceAccount tokens', () => {
  const fake = new FakeTokenApi();
  let server = '';
  let dir = '';
  before(async () => {
    server = await fake.start();
    dir = mkdtempSync(join(tmpdir(), 'rollcall-tokens-'));
  });
  after(async () => {
    await fake.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  const api = () => credentialsTarget({ server });

  test('a TokenRequest names the account and binds the token to the pod', async () => {
    fake.requests.length = 0;
    const token = await requestToken(api(), 'ns', 'rollcall-policy-server', {
      pod: { name: 'p', uid: 'u' },
      seconds: 600,
    });
    assert.equal(fake.requests.length, 1);
    assert.match(token.token, /^token-\d+$/);
    const [sent] = fake.requests;
    assert.equal(sent?.path, '/api/v1/namespaces/ns/serviceaccounts/rollcall-policy-server/token');
    assert.deepEqual(sent?.body.spec, {
      expirationSeconds: 600,
      boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: 'p', uid: 'u' },
    });
    assert.ok(token.expiresAt > token.issuedAt);
  });

  test('renewal is due at 80% of the lifetime, as a kubelet renews', () => {
    assert.equal(renewalDue({ issuedAt: 1000, expiresAt: 11_000 }), 9000);
  });

  test("a pod runs as spec.serviceAccountName, else the namespace's default account", () => {
    assert.equal(
      podAccount(pod({ serviceAccountName: 'rollcall-policy-server' })),
      'rollcall-policy-server',
    );
    assert.equal(podAccount(pod({ serviceAccount: 'legacy' })), 'legacy');
    assert.equal(podAccount(pod()), 'default');
  });

  test("a pod's kubeconfig reads its token file (0600), and the file is renewed before it expires", async () => {
    fake.lifetimeMs = 1000; // renewal due after 0.8 s
    const tokens = new PodTokens({ api: api(), server, caFile: '/ca.crt', log: () => {} });
    const podDir = join(dir, 'pods', 'a');
    const identity = await tokens.mount(
      pod({ serviceAccountName: 'rollcall-policy-server' }),
      podDir,
    );
    assert.ok('kubeconfig' in identity && identity.kubeconfig);
    const tokenFile = join(podDir, 'serviceaccount', 'token');
    assert.equal(statSync(tokenFile).mode & 0o777, 0o600);
    assert.equal(statSync(identity.kubeconfig).mode & 0o777, 0o600);
    const config = parse(readFileSync(identity.kubeconfig, 'utf8')) as {
      users: { name: string; user: Record<string, unknown> }[];
      contexts: { context: { namespace: string } }[];
    };
    assert.equal(
      config.users[0]?.name,
      'system:serviceaccount:rollcall-system:rollcall-policy-server',
    );
    assert.deepEqual(config.users[0]?.user, {
      'auth-provider': { name: 'tokenFile', config: { tokenFile } },
    });
    assert.equal(config.contexts[0]?.context.namespace, 'rollcall-system');
    const first = readFileSync(tokenFile, 'utf8');
    await sleep(1500);
    const renewed = readFileSync(tokenFile, 'utf8');
    assert.notEqual(renewed, first, 'the token file was rewritten with a new token');
    tokens.release('uid-1');
    await sleep(1200);
    assert.equal(readFileSync(tokenFile, 'utf8'), renewed, 'a released pod is not renewed');
    fake.lifetimeMs = 3_600_000;
  });

  test('a pod whose account does not exist gets no token, and the reason a kubelet would give', async () => {
    const tokens = new PodTokens({ api: api(), server, caFile: '/ca.crt', log: () => {} });
    const result = await tokens.mount(
      pod({ serviceAccountName: 'absent' }),
      join(dir, 'pods', 'b'),
    );
    assert.deepEqual(result, {
      reason: 'ContainerCreating',
      message:
        'MountVolume.SetUp failed for volume "kube-api-access": failed to fetch token: serviceaccounts "absent" not found',
    });
  });

  test('a pod that opts out of a token (automountServiceAccountToken: false) gets no kubeconfig', async () => {
    const tokens = new PodTokens({ api: api(), server, caFile: '/ca.crt', log: () => {} });
    const result = await tokens.mount(
      pod({ automountServiceAccountToken: false }),
      join(dir, 'pods', 'c'),
    );
    assert.deepEqual(result, { kubeconfig: undefined });
  });

  test("a kubeconfig of a token value is one kubectl and rollcall's own client read", () => {
    const text = tokenKubeconfig({
      server: 'https://127.0.0.1:6443',
      ca: { data: Buffer.from('PEM') },
      user: 'rollcall-worker',
      namespace: 'ns',
      token: { value: 'abc' },
    });
    const credentials = kubeconfigCredentials(parse(text), '/');
    assert.equal(credentials?.server, 'https://127.0.0.1:6443');
    assert.equal(credentials?.token, 'abc');
    assert.equal(credentials?.ca?.toString(), 'PEM');
  });
});
