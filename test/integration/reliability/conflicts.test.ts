// Fault 6 (write conflicts): a second writer keeps patching the same Policy statuses with
// garbage while the cluster changes. rollcall sees its status change, recomputes from the
// cluster and writes the truth back; once the writer stops, every status matches the model.
import { CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { test } from 'node:test';
import { faultScenario } from '../../support/driver.ts';

test(
  'a second writer scribbling on Policy statuses is overwritten with the truth',
  { timeout: 120_000 },
  async () => {
    const { s } = await faultScenario('rel-conflicts');
    await s.storm(6);
    await s.converge(60_000);

    const custom = s.kc.makeApiClient(CustomObjectsApi);
    const garbage = {
      status: {
        observedGeneration: 999,
        ready: '99/99',
        readyReplicas: 99,
        failedReplicas: 0,
        servedGeneration: 999,
        conditions: [
          {
            type: 'Ready',
            status: 'True',
            reason: 'Garbage',
            message: 'written by someone else',
            observedGeneration: 999,
            lastTransitionTime: new Date().toISOString(),
          },
        ],
      },
    };
    let writing = true;
    const scribbler = (async () => {
      while (writing) {
        for (const name of s.model.policies.keys()) {
          await custom
            .patchClusterCustomObjectStatus(
              {
                group: 'rollcall.dev',
                version: 'v1alpha1',
                plural: 'policies',
                name,
                body: garbage,
              },
              setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
            )
            .catch(() => {}); // deleted meanwhile
        }
      }
    })();
    await s.storm(8);
    writing = false;
    await scribbler;
    await s.converge(60_000);
  },
);
