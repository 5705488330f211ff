import { expect, it } from 'vitest';
import { type ExitStatus, type ServiceProcess, type ServiceSpec, Supervisor } from './supervisor.js';

/** A child running `code` with node. */
function nodeChild(name: string, code: string): ServiceSpec {
  return { name, command: process.execPath, args: ['-e', code], cwd: process.cwd(), env: process.env };
}

/** Prints "ready", and "<name> stopping" on SIGTERM, then exits 0. */
const polite = (name: string) =>
  nodeChild(
    name,
    `console.log('ready'); process.on('SIGTERM', () => { process.stdout.write('${name} stopping\\n', () => process.exit(0)); }); setInterval(() => {}, 1000);`,
  );

function waitForLine(lines: string[], wanted: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const timer = setInterval(() => {
      if (lines.includes(wanted)) {
        clearInterval(timer);
        resolve();
      } else if (Date.now() - started > 10_000) {
        clearInterval(timer);
        reject(new Error(`no line ${wanted} in ${JSON.stringify(lines)}`));
      }
    }, 20);
  });
}

it('prefixes output with the service name and stops services last-started first', async () => {
  const lines: string[] = [];
  const unexpected: string[] = [];
  const supervisor = new Supervisor(
    (name, line) => lines.push(`${name}: ${line}`),
    (service) => unexpected.push(service.name),
  );
  supervisor.start(polite('first'));
  supervisor.start(polite('second'));
  await waitForLine(lines, 'first: ready');
  await waitForLine(lines, 'second: ready');
  await supervisor.stopAll(5_000);
  const stops = lines.filter((l) => l.endsWith('stopping'));
  expect(stops).toEqual(['second: second stopping', 'first: first stopping']);
  expect(unexpected).toEqual([]);
});

it('kills a service that ignores SIGTERM once the grace period is over', async () => {
  const lines: string[] = [];
  const supervisor = new Supervisor(
    (_, line) => lines.push(line),
    () => {},
  );
  const stubborn = supervisor.start(
    nodeChild(
      'stubborn',
      `process.on('SIGTERM', () => {}); console.log('ready'); setInterval(() => {}, 1000);`,
    ),
  );
  await waitForLine(lines, 'ready');
  const status = await stubborn.stop(300);
  expect(status).toEqual({ code: null, signal: 'SIGKILL' });
  expect(stubborn.running).toBe(false);
});

it('reports the first service that exits on its own, once', async () => {
  const reports: Array<[string, ExitStatus]> = [];
  let reported: (service: ServiceProcess) => void = () => {};
  const firstReport = new Promise<ServiceProcess>((resolve) => {
    reported = resolve;
  });
  const supervisor = new Supervisor(
    () => {},
    (service, status) => {
      reports.push([service.name, status]);
      reported(service);
    },
  );
  supervisor.start(polite('steady'));
  supervisor.start(nodeChild('crashy', 'setTimeout(() => process.exit(3), 100)'));
  expect((await firstReport).name).toBe('crashy');
  expect(supervisor.stopping).toBe(true);
  await supervisor.stopAll(5_000);
  expect(reports).toEqual([['crashy', { code: 3, signal: null }]]);
});
