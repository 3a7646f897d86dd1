// Mounts the operator UIs (status page at `/`, Bull Board at `/queues`) behind one guard,
// with the headers that keep other sites from framing them.
import type { Queue } from 'bullmq';
import type { Hono } from 'hono';
import type { Logger } from 'pino';
import type { ProjectionStore } from '../projections/store.ts';
import { uiDisabledReason, uiGuard, type UiAccess } from './auth.ts';
import { mountQueueUi, queueUiPath } from './queue-ui.ts';
import { mountStatusPage } from './status-page.ts';
import { uiHeaders } from './ui-headers.ts';

export interface UiOptions {
  access: UiAccess;
  queue: Queue;
  /** Projections for the status page; absent: no status page (the process has no store). */
  store: ProjectionStore | undefined;
  logger: Logger;
}

export function mountUis(app: Hono, opts: UiOptions): void {
  const guard = uiGuard(opts.access);
  const headers = uiHeaders();
  for (const path of ['/', queueUiPath, `${queueUiPath}/*`]) app.use(path, headers, guard);
  const off = uiDisabledReason(opts.access);
  if (off) {
    opts.logger.warn(off);
    return; // the guard answers 403 with the reason
  }
  mountQueueUi(app, [opts.queue], opts.access.readOnly);
  if (opts.store) mountStatusPage(app, opts.store, opts.queue.name);
  opts.logger.info(
    {
      queueUi: queueUiPath,
      localOnly: opts.access.localOnly,
      readOnly: opts.access.readOnly,
      basicAuth: Boolean(opts.access.credentials),
    },
    'operator UIs enabled',
  );
}
