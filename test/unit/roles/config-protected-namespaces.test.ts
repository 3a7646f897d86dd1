import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigError, parseConfig } from '../../../control-plane/config.ts';

const base = ['--redis-url', 'redis://localhost:6379'];

describe("the namespaces every webhook excludes besides rollcall's own", () => {
  const rows: { name: string; argv?: string[]; env?: NodeJS.ProcessEnv; expected: string[] }[] = [
    {
      name: 'default to kube-system and kube-node-lease',
      expected: ['kube-system', 'kube-node-lease'],
    },
    {
      name: 'come from ROLLCALL_PROTECTED_NAMESPACES, blanks around commas ignored',
      env: { ROLLCALL_PROTECTED_NAMESPACES: 'kube-system, kube-node-lease ,cert-manager' },
      expected: ['kube-system', 'kube-node-lease', 'cert-manager'],
    },
    {
      name: 'come from --protected-namespaces before the environment',
      argv: ['--protected-namespaces=kube-system'],
      env: { ROLLCALL_PROTECTED_NAMESPACES: 'other' },
      expected: ['kube-system'],
    },
    {
      name: "an empty ROLLCALL_PROTECTED_NAMESPACES protects nothing more than rollcall's namespace",
      env: { ROLLCALL_PROTECTED_NAMESPACES: '' },
      expected: [],
    },
    {
      name: 'an empty --protected-namespaces wins over the environment too',
      argv: ['--protected-namespaces='],
      env: { ROLLCALL_PROTECTED_NAMESPACES: 'kube-system' },
      expected: [],
    },
    {
      name: 'a namespace named twice counts once',
      env: { ROLLCALL_PROTECTED_NAMESPACES: 'kube-system,kube-system' },
      expected: ['kube-system'],
    },
  ];
  for (const row of rows)
    test(row.name, () =>
      assert.deepEqual(
        parseConfig([...base, ...(row.argv ?? [])], row.env ?? {}).protectedNamespaces,
        row.expected,
      ),
    );

  test('a name that is not a namespace name is refused, saying which flag and which name', () => {
    assert.throws(
      () => parseConfig(base, { ROLLCALL_PROTECTED_NAMESPACES: 'kube-system,Kube_Public' }),
      (err: unknown) =>
        err instanceof ConfigError &&
        /--protected-namespaces \(ROLLCALL_PROTECTED_NAMESPACES\).*"Kube_Public"/.test(err.message),
    );
  });
});
