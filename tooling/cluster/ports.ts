import { createServer } from 'node:net';

/** Asks the kernel for a free loopback port. Another process could take it before we bind it; on loopback in a test run that race is rare enough to accept. */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => {
        if (address && typeof address === 'object') resolvePort(address.port);
        else reject(new Error('could not allocate a loopback port'));
      });
    });
  });
}
