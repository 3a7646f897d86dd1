// node bench/admission-echo.ts <port> <cert> <key>: an HTTPS server that answers every request
// at once with 201 and the request body, in its own process as the apiserver is. The admission
// bench sends its load here first: what it measures is the generator's own floor (its client,
// TLS and loopback), with no apiserver behind it.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:https';

const [port, cert, key] = process.argv.slice(2);
if (!port || !cert || !key) throw new Error('usage: admission-echo.ts <port> <cert> <key>');

const server = createServer(
  { cert: readFileSync(cert), key: readFileSync(key), keepAliveTimeout: 60_000 },
  (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      res.writeHead(201, { 'content-type': 'application/json', 'content-length': body.length });
      res.end(body);
    });
  },
);
server.listen(Number(port), '127.0.0.1');
process.on('SIGTERM', () => server.close(() => process.exit(0)));
