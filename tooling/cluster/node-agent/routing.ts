// kube-proxy's part of the local node agent, as pure functions: which local process a
// `CONNECT <ip>:<port>` from the apiserver reaches.
import { isIP } from 'node:net';
import { z } from 'zod';

/** The fields of a Service the proxy reads. */
export const agentServiceSchema = z.looseObject({
  metadata: z.looseObject({ name: z.string(), namespace: z.string() }),
  spec: z
    .looseObject({
      clusterIP: z.string().optional(),
      clusterIPs: z.array(z.string()).optional(),
      selector: z.record(z.string(), z.string()).nullish(),
      ports: z.array(z.looseObject({ port: z.number() })).optional(),
    })
    .optional(),
});
export type AgentService = z.infer<typeof agentServiceSchema>;

/** A pod the agent runs, as the proxy sees it. */
export interface Backend {
  namespace: string;
  name: string;
  labels: Readonly<Record<string, string>>;
  podIP: string;
  /** The readiness probe's verdict. */
  ready: boolean;
  /** The local port of its live process; undefined when no process runs. */
  port: number | undefined;
}

export interface ConnectTarget {
  host: string;
  port: number;
}

/** Parses the authority of a CONNECT request: `10.0.0.12:443` or `[fd00::1]:443`. */
export function parseConnectTarget(authority: string | undefined): ConnectTarget | undefined {
  const match = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(authority ?? '');
  if (!match) return undefined;
  const host = match[1] ?? match[2]!;
  const port = Number(match[3]);
  if (!isIP(host) || port < 1 || port > 65535) return undefined;
  return { host, port };
}

export type Route = { key: string; candidates: Backend[] } | { error: string };

/**
 * The backends a CONNECT may reach: for a Service's cluster IP and one of its ports, the
 * pods its selector matches that are Ready and have a live process (as kube-proxy uses
 * only ready endpoints); for a pod IP, that pod. `key` names the round robin's turn counter.
 */
export function route(
  target: ConnectTarget,
  services: readonly AgentService[],
  backends: readonly Backend[],
): Route {
  const service = services.find(
    (s) => s.spec?.clusterIP === target.host || s.spec?.clusterIPs?.includes(target.host),
  );
  if (!service) {
    const pod = backends.find((b) => b.podIP === target.host);
    if (!pod) return { error: `no Service has cluster IP ${target.host}, and no pod has it` };
    if (pod.port === undefined)
      return { error: `pod ${pod.namespace}/${pod.name} has no running process` };
    return { key: `pod/${pod.namespace}/${pod.name}`, candidates: [pod] };
  }
  const { namespace, name } = service.metadata;
  const id = `service ${namespace}/${name}`;
  if (!service.spec?.ports?.some((p) => p.port === target.port))
    return { error: `${id} has no port ${target.port}` };
  const selector = service.spec.selector ?? {};
  if (Object.keys(selector).length === 0)
    return { error: `${id} has no selector; the local node agent routes only to selected pods` };
  const selected = backends
    .filter(
      (b) =>
        b.namespace === namespace && Object.entries(selector).every(([k, v]) => b.labels[k] === v),
    )
    .sort((a, b) => a.name.localeCompare(b.name));
  const candidates = selected.filter((b) => b.ready && b.port !== undefined);
  if (candidates.length === 0)
    return {
      error:
        selected.length === 0
          ? `${id} selects no pod that the local node agent runs`
          : `${id} has no ready pod with a running process (${selected.length} selected)`,
    };
  return { key: `service/${namespace}/${name}`, candidates };
}

/** Round robin: the backend for the `turn`-th connection to the same route. */
export function pick<T>(candidates: readonly T[], turn: number): T {
  return candidates[turn % candidates.length]!;
}
