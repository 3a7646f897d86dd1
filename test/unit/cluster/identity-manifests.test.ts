// The test support renders deploy/'s accounts, RBAC and guards for a test namespace
// (test/support/identities.ts) and the demo applies them as they are
// (tooling/demo/identities.ts): every binding must still reach its role and its accounts,
// nothing may still name rollcall-system, and what is shared by namespaces must not collide.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { identityManifests } from '../../support/identities.ts';
import { refusedBy } from '../../../tooling/demo/identities.ts';

const NS = 'rollcall-e2e-x';

test('rendered for a test namespace, nothing names rollcall-system and every binding reaches its role', () => {
  const manifests = identityManifests(NS);
  assert.ok(manifests.some((m) => m.kind === 'ServiceAccount'));
  assert.doesNotMatch(JSON.stringify(manifests), /rollcall-system/);
  const key = (kind: string, name: string, ns = '') => `${kind}/${ns}/${name}`;
  const present = new Set(manifests.map((m) => key(m.kind, m.metadata.name, m.metadata.namespace)));
  for (const m of manifests) {
    if (m.roleRef) {
      const ns = m.roleRef.kind === 'Role' ? m.metadata.namespace : undefined;
      assert.ok(
        present.has(key(m.roleRef.kind, m.roleRef.name, ns)),
        `${m.kind} ${m.metadata.name} → ${m.roleRef.name}`,
      );
    }
    if (m.kind === 'ValidatingAdmissionPolicyBinding' && m.spec?.policyName)
      assert.ok(present.has(key('ValidatingAdmissionPolicy', m.spec.policyName)), m.metadata.name);
    // Objects outside the namespace are shared by every test namespace: suffixed, so they do not collide.
    if (m.metadata.namespace !== NS) assert.ok(m.metadata.name.endsWith(`-${NS}`), m.metadata.name);
  }
  const accounts = manifests.filter((m) => m.kind === 'ServiceAccount').map((m) => m.metadata.name);
  assert.deepEqual(accounts.sort(), [
    'rollcall-policy-server',
    'rollcall-watcher',
    'rollcall-worker',
  ]);
});

test("for rollcall-system, deploy/'s files are applied as they are", () => {
  const manifests = identityManifests('rollcall-system');
  const names = manifests.filter((m) => m.kind === 'ClusterRole').map((m) => m.metadata.name);
  assert.ok(names.includes('rollcall-worker'));
});

test("kubectl's error says who refused: an admission policy, RBAC, or a webhook", () => {
  assert.equal(
    refusedBy(
      `Error from server (Forbidden): pods "p" is forbidden: ValidatingAdmissionPolicy 'rollcall-policy-server-own-pod' with binding 'b' denied request: no`,
    ),
    'refused by ValidatingAdmissionPolicy rollcall-policy-server-own-pod',
  );
  assert.equal(
    refusedBy(
      'Error from server (Forbidden): secrets "rollcall-webhook-ca" is forbidden: User "system:serviceaccount:rollcall-system:rollcall-policy-server" cannot get resource "secrets" in API group "" in the namespace "rollcall-system"',
    ),
    'refused by RBAC',
  );
  assert.equal(
    refusedBy('Error from server: admission webhook "x.rollcall.dev" denied the request: no'),
    'refused by webhook x.rollcall.dev',
  );
});
