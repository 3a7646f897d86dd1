import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compact } from '../../../control-plane/projections/project.ts';

test("a Secret's projection keeps its name, resourceVersion and labels, never its data", () => {
  const kept = {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: 'rollcall-webhook-ca',
      namespace: 'rollcall-system',
      resourceVersion: '7',
      labels: { 'app.kubernetes.io/managed-by': 'rollcall' },
    },
  };
  const projected = compact('secret', {
    ...kept,
    metadata: { ...kept.metadata, annotations: { note: 'x' } },
    data: { 'ca.key': 'c2VjcmV0' },
  } as never);
  assert.deepEqual(projected, kept);
  assert.doesNotMatch(JSON.stringify(projected), /c2VjcmV0/);
});
