/**
 * `pnpm --dir apps/demo ws [url] [message…]`: a WebSocket client for trying the demo (Node 20 has no
 * `WebSocket` of its own, and curl cannot send a message). Opens `url` (default
 * ws://127.0.0.1:8080/ws, the demo upstream's echo through the gateway), prints the handshake's answer
 * and every message received, sends each `message`, and closes once all are echoed. Exits 1 when the
 * handshake is refused (a 429, for instance), after printing the answer.
 */
import WebSocket from 'ws';

const [url = 'ws://127.0.0.1:8080/ws', ...messages] = process.argv.slice(2);
const ws = new WebSocket(url, { handshakeTimeout: 10_000 });
let waitingFor = messages.length + 1; // the greeting, then each echo

ws.on('upgrade', (response) => {
  console.log(`${response.statusCode} ${response.statusMessage}`);
  for (const name of ['x-request-id', 'ratelimit-policy', 'ratelimit']) {
    const value = response.headers[name];
    if (value !== undefined) console.log(`${name}: ${value}`);
  }
});
ws.on('open', () => {
  for (const message of messages) {
    console.log(`> ${message}`);
    ws.send(message);
  }
});
ws.on('message', (data) => {
  console.log(`< ${data.toString()}`);
  if (--waitingFor === 0) ws.close(1000);
});
ws.on('unexpected-response', (_request, response) => {
  console.log(`${response.statusCode} ${response.statusMessage}`);
  for (const [name, value] of Object.entries(response.headers)) console.log(`${name}: ${value}`);
  response.pipe(process.stdout);
  response.on('end', () => {
    console.log();
    process.exit(1);
  });
});
ws.on('close', (code) => console.log(`closed (${code})`));
ws.on('error', (error) => {
  console.error(`${url}: ${error.message}`);
  process.exit(1);
});
