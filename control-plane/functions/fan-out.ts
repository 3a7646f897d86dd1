// The fan-out function: a change that may touch every Policy of a server (a pod becoming
// Ready or going away, a ReplicaSet, the Deployment, the PolicyServer) enqueues one key,
// `server/<name>`, and this job enqueues the keys of the server's Policies in bulk. The
// watcher's cost of such an event stays one enqueue whatever the number of policies, and a
// burst of them (10,000 pods created) coalesces into a few fan-outs.
import { done, requeueAfter } from '../queue/index.ts';
import { notSyncedDelayMs, serversAffectedBy } from './policy-keys.ts';
import type { ReconcileFunction } from './types.ts';

/** The functions whose keys a server's fan-out enqueues for each of its Policies. */
const perPolicy = ['policy', 'webhook'];

export const server: ReconcileFunction = {
  name: 'server',

  keysFor(event) {
    return serversAffectedBy(event).map((s) => `server/${s}`);
  },

  async handle(name, ctx) {
    const policies = await ctx.store.policiesOfServer(name);
    if (!policies) return requeueAfter(notSyncedDelayMs);
    await ctx.enqueue(policies.flatMap((p) => perPolicy.map((fn) => `${fn}/${p}`)));
    return done();
  },
};
