// Bull Board at /queues for the reconcile queue. Access control lives in auth.ts (uiGuard),
// mounted in front of it; bull-board's own readOnlyMode hides the action buttons as well.
import type { Queue } from 'bullmq';
import type { Context, Hono } from 'hono';

export const queueUiPath = '/queues';

/** Link to a queue's jobs in the given state (`latest`, `failed`, `delayed`, ...). */
export function queueLink(queueName: string, status: string): string {
  return `${queueUiPath}/queue/${encodeURIComponent(queueName)}?status=${encodeURIComponent(status)}`;
}

/**
 * Serves Bull Board under `queueUiPath`. It is loaded on the first request to it, not when
 * the process starts: most processes are never asked for it, and it costs ~5 MiB resident.
 */
export function mountQueueUi(app: Hono, queues: readonly Queue[], readOnly: boolean): void {
  let board: Promise<Hono> | undefined;
  const serve = async (c: Context) => {
    board ??= bullBoard(queues, readOnly);
    return (await board).fetch(c.req.raw, c.env);
  };
  app.all(queueUiPath, serve);
  app.all(`${queueUiPath}/*`, serve);
}

async function bullBoard(queues: readonly Queue[], readOnly: boolean): Promise<Hono> {
  const [{ createBullBoard }, { BullMQAdapter }, { HonoAdapter }, { serveStatic }, { Hono }] =
    await Promise.all([
      import('@bull-board/api'),
      import('@bull-board/api/bullMQAdapter'),
      import('@bull-board/hono'),
      import('@hono/node-server/serve-static'),
      import('hono'),
    ]);
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
  return new Hono().route(queueUiPath, adapter.registerPlugin());
}
