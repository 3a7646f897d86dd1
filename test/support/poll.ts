// Polling what cannot be watched: a condition, an HTTP endpoint's status.
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Polls `probe` every 200 ms until it returns a value (a probe that throws counts as not yet)
 * and resolves with it; fails after `timeoutMs` naming `what`.
 */
export async function waitFor<T>(
  probe: () => Promise<T | undefined | false>,
  timeoutMs: number,
  what: string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe().catch(() => undefined);
    if (v) return v;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(200);
  }
}

/**
 * Polls `check` every `everyMs` until it holds; fails after `timeoutMs` naming `what`. For
 * state in this process (a recorder, a store), where a short interval costs nothing.
 */
export async function eventually(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
  everyMs = 10,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** GET url; resolves to status and body, or undefined when nothing answers. */
export async function get(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string } | undefined> {
  try {
    const res = await fetch(url, { headers, signal: AbortSignal.timeout(5000) });
    return { status: res.status, body: await res.text() };
  } catch {
    return undefined;
  }
}

/** Polls GET url until it answers `status`; resolves to that response. */
export const waitForStatus = (url: string, status: number, timeoutMs: number, what: string) =>
  waitFor(
    async () => {
      const r = await get(url);
      return r?.status === status ? r : undefined;
    },
    timeoutMs,
    what,
  );
