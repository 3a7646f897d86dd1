// The pure parts of the worker's API client: where an applied object is written, the merge
// patch a status is written with, and the MicroTime an Event carries. The requests themselves run against the real apiserver in the
// integration tests (api/crds, e2e/*, reliability/throttling).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import {
  microTime,
  objectPath,
  statusPatch,
} from '../../../control-plane/functions/kube-writer.ts';

describe('objectPath', () => {
  test('puts each kind rollcall applies at its resource, namespaced when the object names a namespace', () => {
    const meta = { name: 'rollcall-p', namespace: 'rollcall-system' };
    assert.equal(
      objectPath({ apiVersion: 'v1', kind: 'Service', metadata: meta }),
      '/api/v1/namespaces/rollcall-system/services/rollcall-p',
    );
    assert.equal(
      objectPath({ apiVersion: 'apps/v1', kind: 'Deployment', metadata: meta }),
      '/apis/apps/v1/namespaces/rollcall-system/deployments/rollcall-p',
    );
    assert.equal(
      objectPath({
        apiVersion: 'admissionregistration.k8s.io/v1',
        kind: 'ValidatingWebhookConfiguration',
        metadata: { name: 'rollcall-p' },
      }),
      '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/rollcall-p',
    );
  });

  test('refuses a kind rollcall does not apply, or an object without a name, naming it', () => {
    assert.throws(
      () => objectPath({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 's' } }),
      /rollcall does not apply Secret/,
    );
    assert.throws(() => objectPath({ apiVersion: 'v1', kind: 'Service', metadata: {} }), /Service/);
    assert.throws(() => objectPath({ metadata: { name: 'x' } }), /without a kind/);
  });
});

describe('objectPath, against generated objects', () => {
  const applied = ['Service', 'Deployment', 'ValidatingWebhookConfiguration'];
  const dnsLabel = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?$/);

  test('property: any kind but the three it applies is refused, whatever the rest says', () => {
    fc.assert(
      fc.property(
        fc.string().filter((k) => !applied.includes(k)),
        fc.string(),
        fc.option(fc.string(), { nil: undefined }),
        (kind, apiVersion, namespace) => {
          assert.throws(
            () => objectPath({ apiVersion, kind, metadata: { name: 'n', namespace } }),
            /rollcall does not apply/,
          );
        },
      ),
    );
  });

  test('property: an applied kind lands at its own name, in its namespace or none', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...applied),
        fc.constantFrom('v1', 'apps/v1', 'admissionregistration.k8s.io/v1'),
        dnsLabel,
        fc.option(dnsLabel, { nil: undefined }),
        (kind, apiVersion, name, namespace) => {
          const segments = objectPath({ apiVersion, kind, metadata: { name, namespace } })
            .split('/')
            .slice(1);
          assert.equal(segments.at(-1), name);
          const scope = namespace === undefined ? [] : ['namespaces', namespace];
          assert.deepEqual(segments.slice(-2 - scope.length, -2), scope);
          assert.deepEqual(segments.slice(0, -2 - scope.length), [
            apiVersion.includes('/') ? 'apis' : 'api',
            ...apiVersion.split('/'),
          ]);
        },
      ),
    );
  });
});

/** RFC 7386 as the apiserver applies a merge patch: null removes, objects merge, the rest replaces. */
function applyMergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    typeof target === 'object' && target !== null && !Array.isArray(target)
      ? { ...(target as Record<string, unknown>) }
      : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else
      Object.defineProperty(out, key, {
        value: applyMergePatch(out[key], value),
        enumerable: true,
        writable: true,
        configurable: true,
      });
  }
  return out;
}

/** A status as JSON carries it: undefined values are left out. */
const asJson = (v: unknown): unknown => JSON.parse(JSON.stringify(v));

describe('statusPatch', () => {
  test('removes a nested field the new status lacks: an audit pass of a new generation not complete yet', () => {
    const before = {
      ready: '2/2',
      audit: { generation: 1, checked: 99, failing: 29, completedAt: '2026-12-07T00:00:00Z' },
    };
    const after = { ready: '2/2', audit: { generation: 2, checked: 0, failing: 0 } };
    const patch = statusPatch(before, after);
    assert.deepEqual(patch, {
      ready: '2/2',
      audit: { completedAt: null, generation: 2, checked: 0, failing: 0 },
    });
    assert.deepEqual(applyMergePatch(before, patch), after);
  });

  test('an external certificate renewed in time loses its expiresSoon', () => {
    const before = { certificate: { secret: 's', notAfter: 'a', expiresSoon: true } };
    const after = { certificate: { secret: 's', notAfter: 'b', expiresSoon: undefined } };
    assert.deepEqual(applyMergePatch(before, asJson(statusPatch(before, after))), asJson(after));
  });

  // Statuses hold no null (their schemas have none): null in a merge patch means remove.
  const json = fc.letrec((tie) => ({
    value: fc.oneof(
      { depthSize: 'small' },
      fc.boolean(),
      fc.integer(),
      fc.string(),
      fc.constant(undefined),
      fc.array(tie('value'), { maxLength: 3 }),
      tie('object'),
    ),
    object: fc.dictionary(
      fc.oneof(fc.constantFrom('audit', 'completedAt', '__proto__', 'constructor'), fc.string()),
      tie('value'),
      { maxKeys: 4 },
    ),
  }));

  test('property: applied to what was read, the patch leaves exactly the new status, at any depth', () => {
    fc.assert(
      fc.property(json.object, json.object, (before, after) => {
        const read = asJson(before);
        const patch = asJson(statusPatch(read, after as object));
        assert.deepEqual(applyMergePatch(read, patch), asJson(after));
      }),
      { numRuns: 2000 },
    );
  });
});

describe('microTime', () => {
  test('is RFC 3339 with six fractional digits, and reads back as the same instant', () => {
    fc.assert(
      fc.property(
        fc.date({ min: new Date(0), max: new Date('9999-12-31'), noInvalidDate: true }),
        (at) => {
          const text = microTime(at);
          assert.match(text, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
          assert.equal(new Date(text).getTime(), at.getTime());
        },
      ),
    );
  });
});
