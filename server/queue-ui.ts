// Bull Board at /queues for the reconcile queue. Access control lives in auth.ts (uiGuard),
// mounted in front of it; bull-board's own readOnlyMode hides the action buttons as well.
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { HonoAdapter } from '@bull-board/hono';
import { serveStatic } from '@hono/node-server/serve-static';
import type { Queue } from 'bullmq';
import type { Hono } from 'hono';

export const queueUiPath = '/queues';

/** Link to a queue's jobs in the given state (`latest`, `failed`, `delayed`, ...). */
export function queueLink(queueName: string, status: string): string {
  return `${queueUiPath}/queue/${encodeURIComponent(queueName)}?status=${encodeURIComponent(status)}`;
}

export function mountQueueUi(app: Hono, queues: readonly Queue[], readOnly: boolean): void {
  const adapter = new HonoAdapter(serveStatic).setBasePath(queueUiPath);
  createBullBoard({
    queues: queues.map(
      (q) =>
        new BullMQAdapter(q, {
          readOnlyMode: readOnly,
          allowRetries: !readOnly,
          description: 'rollcall reconcile jobs (one key per job)',
        }),
    ),
    // @bull-board/hono pins its own copy of @bull-board/api: same interface, distinct
    // declarations (private fields), so TypeScript needs telling they match.
    serverAdapter: adapter as unknown as Parameters<typeof createBullBoard>[0]['serverAdapter'],
    options: { uiConfig: { boardTitle: 'rollcall queues' } },
  });
  app.route(queueUiPath, adapter.registerPlugin());
}
