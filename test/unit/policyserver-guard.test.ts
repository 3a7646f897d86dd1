// What a PolicyServer may name (control-plane/functions/policyserver-guard.ts), as a table of
// named specs, and the flags that set it (control-plane/config.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { PolicyServerSpec } from '../../api/v1alpha1.ts';
import { ConfigError, parseConfig } from '../../control-plane/config.ts';
import {
  refusalCondition,
  refusePolicyServer,
  type PolicyServerGuard,
} from '../../control-plane/functions/policyserver-guard.ts';
import { aPolicyServer } from '../fixtures/builders.ts';

const secretEnv = (secret: string, key = 'ca.key') => [
  { name: 'LEAK', valueFrom: { secretKeyRef: { name: secret, key } } },
];
const caRef = (name: string) => ({ name, key: 'ca.crt' });

interface Row {
  name: string;
  spec: Partial<PolicyServerSpec>;
  guard?: PolicyServerGuard;
  /** Each problem the refusal names, or [] when the spec may run. */
  refused: RegExp[];
}

const rows: Row[] = [
  { name: 'the fixture (an image, no account, no Secret) may run', spec: {}, refused: [] },
  {
    name: "no spec.image (rollcall's own) may run whatever the image allowlist",
    spec: { image: undefined },
    guard: { images: ['registry.example/'] },
    refused: [],
  },
  {
    name: "the policy servers' own account may run by default",
    spec: { serviceAccountName: 'rollcall-policy-server' },
    refused: [],
  },
  {
    name: "the worker's account is refused, naming the controllers and what is allowed",
    spec: { serviceAccountName: 'rollcall-worker' },
    refused: [
      /^spec\.serviceAccountName rollcall-worker is one of rollcall's controllers' accounts \(rollcall-watcher, rollcall-worker\), never a PolicyServer's; allowed: rollcall-policy-server, or leave it unset/,
    ],
  },
  {
    name: "the watcher's account is refused even when the allowlist names it",
    spec: { serviceAccountName: 'rollcall-watcher' },
    guard: { serviceAccounts: ['rollcall-watcher', 'builder'] },
    refused: [/rollcall-watcher is one of rollcall's controllers' accounts.*allowed: builder,/],
  },
  {
    name: 'an account outside the allowlist is refused, naming the flag',
    spec: { serviceAccountName: 'builder' },
    refused: [
      /^spec\.serviceAccountName builder is not allowed; allowed: rollcall-policy-server, or leave it unset .*--policy-server-service-accounts/,
    ],
  },
  {
    name: 'an account the allowlist names may run',
    spec: { serviceAccountName: 'builder' },
    guard: { serviceAccounts: ['builder'] },
    refused: [],
  },
  {
    name: 'an empty allowlist allows no account by name',
    spec: { serviceAccountName: 'rollcall-policy-server' },
    guard: { serviceAccounts: [] },
    refused: [/allowed: none by name: leave it unset/],
  },
  {
    name: "an env secretKeyRef to the webhook CA's Secret is refused",
    spec: { env: secretEnv('rollcall-webhook-ca') },
    refused: [
      /^spec\.env\[LEAK\]\.valueFrom\.secretKeyRef names Secret rollcall-webhook-ca, rollcall's own \(rollcall-\*/,
    ],
  },
  {
    name: 'the UI credentials (kustomize names them rollcall-ui-<hash>) and the Redis password are refused',
    spec: {
      env: [
        ...secretEnv('rollcall-ui-5g7h9k2m4t', 'ROLLCALL_UI_CREDENTIALS'),
        { name: 'REDIS', valueFrom: { secretKeyRef: { name: 'rollcall-redis', key: 'password' } } },
      ],
    },
    refused: [
      /LEAK.*rollcall-ui-5g7h9k2m4t, rollcall's own/,
      /REDIS.*rollcall-redis, rollcall's own/,
    ],
  },
  {
    name: 'a caSecretRef to the webhook CA is refused',
    spec: { image: undefined, caSecretRef: caRef('rollcall-webhook-ca') },
    refused: [/^spec\.caSecretRef names Secret rollcall-webhook-ca, rollcall's own/],
  },
  {
    name: "another server's serving Secret is refused, by env or caSecretRef",
    spec: { env: secretEnv('policy-server-other-tls', 'tls.key') },
    refused: [
      /policy-server-other-tls, another policy server's serving Secret \(only policy-server-default-tls is this one's\)/,
    ],
  },
  {
    name: 'its own serving Secret may be named (with caBundle, the operator provides it)',
    spec: { env: secretEnv('policy-server-default-tls', 'tls.crt') },
    refused: [],
  },
  {
    name: 'a Secret of its own, and ConfigMaps and fields of any name, may be named',
    spec: {
      image: undefined,
      caSecretRef: caRef('default-cert'),
      env: [
        ...secretEnv('vendor-licence', 'key'),
        { name: 'C', valueFrom: { configMapKeyRef: { name: 'rollcall-settings', key: 'k' } } },
        { name: 'F', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
      ],
    },
    refused: [],
  },
  {
    name: 'a protected Secret (an external Redis URL) is refused, naming the flag',
    spec: { env: secretEnv('redis-url', 'REDIS_URL') },
    guard: { protectedSecrets: ['redis-url'] },
    refused: [/redis-url, protected \(the worker's --policy-server-protected-secrets\)/],
  },
  {
    name: 'an image outside the allowlist is refused, naming the prefixes',
    spec: { image: 'evil.example/miner:1' },
    guard: { images: ['registry.example/policy/', 'ghcr.io/rollcall/'] },
    refused: [
      /^spec\.image evil\.example\/miner:1 is not allowed: images must start with registry\.example\/policy\/, ghcr\.io\/rollcall\/ \(the worker's --policy-server-images\)/,
    ],
  },
  {
    name: 'an image under an allowed prefix may run',
    spec: { image: 'ghcr.io/rollcall/policy-server:v1' },
    guard: { images: ['registry.example/policy/', 'ghcr.io/rollcall/'] },
    refused: [],
  },
  {
    name: 'every forbidden field is named, in spec order',
    spec: {
      serviceAccountName: 'rollcall-worker',
      env: secretEnv('rollcall-webhook-ca'),
      image: 'evil.example/miner:1',
    },
    guard: { images: ['ghcr.io/'] },
    refused: [/^spec\.serviceAccountName/, /^spec\.env\[LEAK\]/, /^spec\.image/],
  },
];

describe('refusePolicyServer', () => {
  for (const row of rows)
    test(row.name, () => {
      const refusal = refusePolicyServer(aPolicyServer({ spec: row.spec }), row.guard);
      if (row.refused.length === 0) return assert.equal(refusal, undefined);
      assert.equal(refusal?.reason, 'ForbiddenReference');
      assert.equal(refusal.problems.length, row.refused.length, refusal.problems.join('\n'));
      row.refused.forEach((pattern, i) => assert.match(refusal.problems[i]!, pattern));
    });
});

describe('refusalCondition', () => {
  const server = aPolicyServer({ spec: { serviceAccountName: 'rollcall-worker' } });
  const refusal = refusePolicyServer(server)!;

  test('without a Deployment: nothing is created until the spec is fixed', () => {
    const { reason, message } = refusalCondition(server, refusal, false);
    assert.equal(reason, 'ForbiddenReference');
    assert.match(
      message,
      /^rollcall refuses to run PolicyServer default: spec\.serviceAccountName rollcall-worker .*\. No Deployment or Service is created until the spec is fixed\.$/,
    );
  });

  test('with a Deployment from an earlier spec: it is left as rollcall last applied it, and how to remove it', () => {
    assert.match(
      refusalCondition(server, refusal, true).message,
      /Its Deployment policy-server-default keeps what rollcall last applied until the spec is fixed \(delete the PolicyServer to remove it\)\.$/,
    );
  });
});

describe('the --policy-server-* flags', () => {
  const base = ['--redis-url', 'redis://localhost:6379'];
  const guardOf = (argv: string[], env: NodeJS.ProcessEnv = {}) =>
    parseConfig([...base, ...argv], env).policyServerGuard;

  test("default: the policy servers' own account, any image, no protected Secret besides rollcall's", () =>
    assert.deepEqual(guardOf([]), {
      serviceAccounts: ['rollcall-policy-server'],
      images: [],
      protectedSecrets: [],
    }));

  test('flags, then the environment; lists are comma-separated, blanks ignored', () => {
    assert.deepEqual(
      guardOf(
        [
          '--policy-server-service-accounts',
          'rollcall-policy-server, builder',
          '--policy-server-images=registry.example/policy/,ghcr.io/rollcall/',
        ],
        {
          ROLLCALL_POLICY_SERVER_SERVICE_ACCOUNTS: 'ignored',
          ROLLCALL_POLICY_SERVER_PROTECTED_SECRETS: 'redis-url,my-ui',
        },
      ),
      {
        serviceAccounts: ['rollcall-policy-server', 'builder'],
        images: ['registry.example/policy/', 'ghcr.io/rollcall/'],
        protectedSecrets: ['redis-url', 'my-ui'],
      },
    );
  });

  test('an empty account list allows none by name', () =>
    assert.deepEqual(
      guardOf([], { ROLLCALL_POLICY_SERVER_SERVICE_ACCOUNTS: '' }).serviceAccounts,
      [],
    ));

  test("naming rollcall's controllers is an error that says they are never allowed", () => {
    assert.throws(
      () => guardOf(['--policy-server-service-accounts', 'rollcall-policy-server,rollcall-worker']),
      (err: Error) =>
        err instanceof ConfigError &&
        /names rollcall-worker: rollcall's controllers' accounts \(rollcall-watcher, rollcall-worker\) are never a PolicyServer's, whatever this flag says/.test(
          err.message,
        ),
    );
  });

  test('a name that is not a Kubernetes name, or an image prefix with a blank, is an error naming it', () => {
    assert.throws(
      () => guardOf(['--policy-server-protected-secrets', 'Redis_URL']),
      /--policy-server-protected-secrets \(ROLLCALL_POLICY_SERVER_PROTECTED_SECRETS\) must be Secret names separated by commas, got "Redis_URL"/,
    );
    assert.throws(
      () => guardOf(['--policy-server-images', 'registry.example/a b']),
      /--policy-server-images \(ROLLCALL_POLICY_SERVER_IMAGES\) must be image prefixes/,
    );
  });
});
