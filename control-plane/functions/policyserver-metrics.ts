// The serving certificates' expiry as a metric, read at scrape time from the PolicyServers'
// status in the projections (the policyserver function writes status.certificate), so every
// worker reports the same current values and a deleted server's series disappears.
import { Gauge, type Registry } from 'prom-client';
import { policyServerSchema } from '../../api/v1alpha1.ts';
import type { ProjectionStore } from '../projections/store.ts';

export function certificateExpiryGauge(registry: Registry, store: ProjectionStore): void {
  new Gauge({
    name: 'rollcall_policy_server_certificate_expiry_timestamp_seconds',
    help: "When each PolicyServer's serving certificate expires (Unix seconds), from its status",
    labelNames: ['policy_server', 'renewed_by'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const raw of await store.all('policyserver').catch(() => [])) {
        const parsed = policyServerSchema.safeParse(raw);
        const certificate = parsed.success ? parsed.data.status?.certificate : undefined;
        if (!parsed.success || certificate === undefined) continue;
        const at = Date.parse(certificate.notAfter);
        if (Number.isNaN(at)) continue;
        this.set(
          { policy_server: parsed.data.metadata.name, renewed_by: certificate.renewedBy },
          at / 1000,
        );
      }
    },
  });
}
