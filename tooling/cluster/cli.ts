// npm run cluster -- up|down|status|build ; npm run kubectl -- <args>
import { spawnSync } from 'node:child_process';
import { ensureBinaries } from './build.ts';
import { down, readState, status, up } from './cluster.ts';

const usage = `usage: npm run cluster -- <command>

  up       build (or reuse) the binaries and start the local cluster; a no-op when it runs
  down     stop every process of the cluster and remove its data
  status   show the components, their pids, whether the apiserver is ready and the node
           agent's pod processes
  build    only build (or reuse) the binaries
  kubectl  run the built kubectl against the cluster (also: npm run kubectl -- <args>)`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'up': {
      const state = await up();
      console.log(`export KUBECONFIG=${state.kubeconfig}`);
      return 0;
    }
    case 'down':
      await down();
      return 0;
    case 'status': {
      const s = await status();
      if (!s.running && s.components.length === 0) {
        console.log('no local cluster (start one with: npm run cluster -- up)');
        return 1;
      }
      console.log(`apiserver:  ${s.server} (${s.healthy ? 'ready' : 'NOT ready'})`);
      console.log(`kubeconfig: ${s.kubeconfig}`);
      for (const c of s.components)
        console.log(
          `  ${c.name.padEnd(24)} pid ${String(c.pid ?? '-').padEnd(8)} ${c.alive ? 'running' : 'STOPPED'}`,
        );
      if (s.nodeAgent)
        console.log(
          `node agent: CONNECT proxy ${s.nodeAgent.proxySocket}, ${s.nodeAgent.pods} pod processes (${s.nodeAgent.ready} ready)`,
        );
      return s.healthy ? 0 : 1;
    }
    case 'build': {
      const b = await ensureBinaries();
      console.log(`kube: ${b.kube}\nkwok: ${b.kwok}`);
      return 0;
    }
    case 'kubectl': {
      const state = readState();
      if (!state) {
        console.error('no local cluster is running: start it with `npm run cluster -- up`');
        return 1;
      }
      const res = spawnSync(
        state.binaries.kube,
        ['kubectl', `--kubeconfig=${state.kubeconfig}`, ...rest],
        { stdio: 'inherit' },
      );
      return res.status ?? 1;
    }
    default:
      console.error(usage);
      return command === undefined || command === 'help' || command === '--help' ? 0 : 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
