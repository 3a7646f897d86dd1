// Every reconcile function rollcall runs. Adding one means adding its file and a line here.
import { policy } from './policy.ts';
import { policyServer } from './policyserver.ts';
import { server } from './fan-out.ts';
import type { ReconcileFunction } from './types.ts';
import { webhook } from './webhook.ts';

export const functions: readonly ReconcileFunction[] = [policyServer, policy, webhook, server];
