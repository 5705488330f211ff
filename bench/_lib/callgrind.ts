// Instructions a process ran under valgrind's callgrind (Stack.startRedis({ callgrindDir })), read
// between two points of a bench: a count that barely moves with the machine's other load, where CPU
// time on a shared VM does (the hypervisor's noise is as large as the differences measured). What
// still moves it, by a few per cent: Redis's own timed work (serverCron, active expiry) runs more often
// when the run takes longer, and it is counted too.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/**
 * Instructions `pid` ran since the previous call (or since it started): callgrind dumps its counters
 * and zeroes them (`callgrind_control -d`), and the dump's `totals:` line is read.
 */
export function instructionsSinceLastDump(pid: number, dir: string): number {
  execFileSync('callgrind_control', ['-d', String(pid)], { stdio: 'ignore' });
  const prefix = `redis.${pid}.`;
  const dumps = readdirSync(dir)
    .filter((f) => f.startsWith(prefix))
    .map((f) => Number(f.slice(prefix.length)))
    .filter(Number.isInteger);
  if (dumps.length === 0) throw new Error(`no callgrind dump of ${pid} in ${dir}`);
  const text = readFileSync(`${dir}/${prefix}${Math.max(...dumps)}`, 'utf8');
  const totals = /^totals:\s+(\d+)/m.exec(text) ?? /^summary:\s+(\d+)/m.exec(text);
  if (!totals) throw new Error(`callgrind dump of ${pid} has no totals`);
  return Number(totals[1]);
}
