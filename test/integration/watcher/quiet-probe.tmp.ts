import { Reflector } from '../../../watcher/reflector.ts';
import { testKubeConfig } from '../../support/kube.ts';
const t0 = Date.now();
const r = new Reflector({ kc: testKubeConfig(), path: '/api/v1/namespaces/kube-public/configmaps',
  metrics: { watchRestarted: (reason) => console.log('restart', reason, Date.now() - t0), received: (t) => console.log('event', t, Date.now() - t0) } });
r.start();
setTimeout(() => { void r.stop().then(() => console.log('stopped', Date.now() - t0)); }, 75_000);
