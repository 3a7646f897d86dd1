// Preloaded into a process under test (`NODE_OPTIONS=--import <this file's URL>`, see
// recordConnections): appends every TCP connection attempt the process makes, as
// `address:port`, to $ROLLCALL_TEST_CONNECTIONS, so a test can prove what it never tried.
import { subscribe } from 'node:diagnostics_channel';
import { appendFileSync } from 'node:fs';
import type { Socket } from 'node:net';

const file = process.env.ROLLCALL_TEST_CONNECTIONS;
if (file)
  subscribe('net.client.socket', (message) => {
    (message as { socket: Socket }).socket.on('connectionAttempt', (address, port) =>
      appendFileSync(file, `${address}:${port}\n`),
    );
  });

/** The environment that makes a child process record its connection attempts into `file`. */
export function recordConnections(file: string): Record<string, string> {
  const preload = `--import=${import.meta.url}`;
  return {
    NODE_OPTIONS: [process.env.NODE_OPTIONS, preload].filter(Boolean).join(' '),
    ROLLCALL_TEST_CONNECTIONS: file,
  };
}
