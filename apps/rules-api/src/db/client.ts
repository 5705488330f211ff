/**
 * Opens the rules database: a pg pool when `DATABASE_URL` is set, else an embedded PGlite under
 * `DATA_DIR`. Both give the same drizzle API over the same schema and migrations.
 */
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import pg from 'pg';
import { DatabaseUnavailableError, isDatabaseUnavailable } from '../errors.js';

/** The drizzle database both drivers give; repository code sees only this. */
export type Db = PgDatabase<PgQueryResultHKT>;

export interface TransactionOptions {
  isolationLevel?: 'read committed' | 'repeatable read' | 'serializable';
  accessMode?: 'read only' | 'read write';
}

export interface Database {
  readonly kind: 'postgres' | 'pglite';
  readonly db: Db;
  /**
   * Runs `work` in one transaction: commits when it resolves, rolls back when it throws. On pg, a
   * connection that failed or timed out is thrown away instead of being rolled back and pooled
   * again (a ROLLBACK on a silent connection would wait out another timeout).
   */
  transaction<T>(work: (tx: Db) => Promise<T>, options?: TransactionOptions): Promise<T>;
  /** Resolves when the database answers `SELECT 1` within `timeoutMs`; rejects otherwise, never hangs. */
  ping(timeoutMs: number): Promise<void>;
  close(): Promise<void>;
  /** pg only: the connection string (migrations take an advisory lock on a connection of their own) */
  readonly url?: string;
  /** pglite only: the embedded instance */
  readonly pglite?: PGlite;
}

export interface OpenDatabaseOptions {
  databaseUrl: string | undefined;
  dataDir: string;
  /** bounds connecting and waiting for a pooled connection, ms; also the base of the query bounds */
  timeoutMs: number;
  /** pool size per process */
  maxConnections?: number;
  onPoolError?: (err: Error) => void;
}

/** Rejects with a 503-class error when `promise` has not settled after `timeoutMs`. */
export function withDeadline<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new DatabaseUnavailableError(`${what}: database did not answer within ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/** pg pool settings: every wait is bounded, so a database that is down gives errors, not hangs. */
export function poolConfig(databaseUrl: string, timeoutMs: number, maxConnections = 10): pg.PoolConfig {
  return {
    connectionString: databaseUrl,
    max: maxConnections,
    // Covers both the TCP/startup handshake and waiting for a free pooled connection.
    connectionTimeoutMillis: timeoutMs,
    // Server-side bounds: Postgres cancels the statement itself and the connection stays usable.
    // Every statement of this API takes milliseconds (10,000-rule snapshot included).
    statement_timeout: timeoutMs,
    lock_timeout: timeoutMs,
    idle_in_transaction_session_timeout: 60_000,
    // Client-side backstop for a server that has gone silent (no RST, no answer): a little later
    // than the server-side bound, so a live server reports its own timeout first.
    query_timeout: timeoutMs + 500,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    application_name: 'sluice-rules-api',
  };
}

function beginStatement(options: TransactionOptions = {}): string {
  const modes = [options.isolationLevel && `ISOLATION LEVEL ${options.isolationLevel}`, options.accessMode];
  return ['BEGIN', ...modes.filter(Boolean)].join(' ').toUpperCase();
}

async function pgTransaction<T>(pool: pg.Pool, work: (tx: Db) => Promise<T>, options?: TransactionOptions) {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query(beginStatement(options));
    const result = await work(drizzlePg(client) as unknown as Db);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    if (isDatabaseUnavailable(err)) {
      // Postgres rolls back by itself when the session ends.
      broken = err as Error;
    } else {
      await client.query('ROLLBACK').catch((rollbackErr: Error) => {
        broken = rollbackErr;
      });
    }
    throw err;
  } finally {
    // release(err) destroys the connection instead of returning it to the pool
    client.release(broken);
  }
}

export async function openDatabase(options: OpenDatabaseOptions): Promise<Database> {
  if (options.databaseUrl !== undefined) {
    const pool = new pg.Pool(poolConfig(options.databaseUrl, options.timeoutMs, options.maxConnections));
    // An idle pooled connection that dies (database restart) emits here; without a listener the
    // process would crash. The pool drops that connection and opens a new one on the next query.
    pool.on('error', (err) => options.onPoolError?.(err));
    const db = drizzlePg(pool) as unknown as Db;
    return {
      kind: 'postgres',
      db,
      transaction: (work, txOptions) => pgTransaction(pool, work, txOptions),
      url: options.databaseUrl,
      ping: (timeoutMs) =>
        withDeadline(
          pool.query({ text: 'SELECT 1', query_timeout: timeoutMs } as pg.QueryConfig).then(() => undefined),
          timeoutMs,
          'ping',
        ),
      close: () => pool.end(),
    };
  }

  const dataDir = options.dataDir.startsWith('memory://')
    ? options.dataDir
    : path.join(path.resolve(options.dataDir), 'rules-db');
  if (!dataDir.startsWith('memory://')) await mkdir(dataDir, { recursive: true });
  const pglite = new PGlite(dataDir);
  await pglite.waitReady;
  const db = drizzlePglite(pglite) as unknown as Db;
  return {
    kind: 'pglite',
    db,
    // PGlite runs one statement at a time, in-process: nothing can time out or break half-way.
    transaction: (work, txOptions) => db.transaction((tx) => work(tx), txOptions),
    pglite,
    ping: (timeoutMs) =>
      withDeadline(
        db.execute(sql`SELECT 1`).then(() => undefined),
        timeoutMs,
        'ping',
      ),
    close: () => pglite.close(),
  };
}
