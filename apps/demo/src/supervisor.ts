/**
 * Runs the demo's services as child processes: prefixes their output with the service name, notices
 * a child that dies on its own, and stops them in reverse start order with SIGTERM (then SIGKILL after
 * a grace period). Children get their own process group, so a terminal Ctrl-C reaches only the demo,
 * which then stops them in order instead of all at once.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

export interface ServiceSpec {
  name: string;
  command: string;
  args: string[];
  cwd: string;
  env: Record<string, string | undefined>;
}

export interface ExitStatus {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export class ServiceProcess {
  readonly #child: ChildProcess;
  /** settles when the process has exited */
  readonly exited: Promise<ExitStatus>;
  #exit: ExitStatus | undefined;

  constructor(
    readonly spec: ServiceSpec,
    print: (name: string, line: string) => void,
  ) {
    this.#child = spawn(spec.command, spec.args, {
      cwd: spec.cwd,
      env: spec.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const onLine = (line: string) => print(spec.name, line);
    createInterface({ input: this.#child.stdout! }).on('line', onLine);
    createInterface({ input: this.#child.stderr! }).on('line', onLine);
    this.exited = new Promise((resolve) => {
      this.#child.once('error', (err) => {
        onLine(`could not start: ${err.message}`);
        this.#exit = { code: null, signal: null };
        resolve(this.#exit);
      });
      // 'close' comes after 'exit' once the output pipes are drained, so no last words are lost
      this.#child.once('close', (code, signal) => {
        this.#exit = { code, signal };
        resolve(this.#exit);
      });
    });
  }

  get name(): string {
    return this.spec.name;
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  get running(): boolean {
    return this.#exit === undefined;
  }

  /** SIGTERM, then SIGKILL if it has not exited within `graceMs`. Resolves once it has exited. */
  async stop(graceMs: number): Promise<ExitStatus> {
    if (!this.running) return this.exited;
    this.signal('SIGTERM');
    const timer = setTimeout(() => this.signal('SIGKILL'), graceMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Signals the child's process group (the child and anything it started), ignoring "already gone". */
  signal(signal: NodeJS.Signals): void {
    if (!this.running || this.#child.pid === undefined) return;
    try {
      process.kill(-this.#child.pid, signal);
    } catch {
      // exited between the check and the kill
    }
  }
}

export function describeExit(status: ExitStatus): string {
  if (status.signal) return `was killed by ${status.signal}`;
  if (status.code === null) return 'could not be started';
  return `exited with code ${status.code}`;
}

/**
 * The set of running services. `onUnexpectedExit` fires once, for the first child that exits while
 * the supervisor is not stopping.
 */
export class Supervisor {
  readonly #services: ServiceProcess[] = [];
  #stopping = false;

  constructor(
    private readonly print: (name: string, line: string) => void,
    private readonly onUnexpectedExit: (service: ServiceProcess, status: ExitStatus) => void,
  ) {
    // Whatever way this process ends, do not leave children behind (SIGKILL of this process excepted).
    process.once('exit', () => {
      for (const service of this.#services) service.signal('SIGKILL');
    });
  }

  get stopping(): boolean {
    return this.#stopping;
  }

  start(spec: ServiceSpec): ServiceProcess {
    const service = new ServiceProcess(spec, this.print);
    this.#services.push(service);
    void service.exited.then((status) => {
      if (!this.#stopping) {
        this.#stopping = true;
        this.onUnexpectedExit(service, status);
      }
    });
    return service;
  }

  /** Stops every service, last started first. Safe to call more than once. */
  async stopAll(graceMs: number): Promise<void> {
    this.#stopping = true;
    for (const service of [...this.#services].reverse()) await service.stop(graceMs);
  }

  /** Kills every service at once (second Ctrl-C). */
  killAll(): void {
    this.#stopping = true;
    for (const service of this.#services) service.signal('SIGKILL');
  }
}
