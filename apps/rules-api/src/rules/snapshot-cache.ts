/**
 * What every gateway polls every few seconds must be cheap. This replica keeps
 * - the rule-set version, trusted for `ttlMs` (default 500 ms) and raised at once by its own writes,
 *   so an unchanged poll (304) costs no query at all while the cache is fresh, and one tiny
 *   `SELECT version` otherwise;
 * - the serialised body of the newest snapshot it has read, reused until the version moves.
 *
 * Several replicas may write: another replica's write is seen here within `ttlMs`. A client that
 * shows a tag newer than the cached version proves the cache stale, so it is refreshed before
 * answering: a gateway never gets an older snapshot than the one it already has.
 */
import { promisify } from 'node:util';
import { gzip as gzipCallback } from 'node:zlib';
import type { RulesRepository } from './repository.js';

const gzip = promisify(gzipCallback);

export interface SnapshotBody {
  version: number;
  /** `{"version":n,"rules":[…]}`, UTF-8 */
  json: Buffer;
  /** the same bytes gzip-compressed (about a tenth of the size), made once per version on demand */
  gzipped(): Promise<Buffer>;
}

function snapshotBody(version: number, json: Buffer): SnapshotBody {
  let compressed: Promise<Buffer> | undefined;
  return {
    version,
    json,
    // zlib works on the thread pool: the event loop keeps serving while a new version compresses.
    gzipped: () => {
      compressed ??= gzip(json, { level: 6 });
      return compressed;
    },
  };
}

export class SnapshotCache {
  private version: number | undefined;
  private versionReadAt = 0;
  private versionLoad: Promise<number> | undefined;
  private body: SnapshotBody | undefined;
  private bodyLoad: Promise<SnapshotBody> | undefined;

  constructor(
    private readonly repository: RulesRepository,
    private readonly ttlMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** The rule-set version, from the cache while fresh; `atLeast` forces a read when the cache is older. */
  async currentVersion(atLeast = 0): Promise<number> {
    const fresh = this.version !== undefined && this.now() - this.versionReadAt < this.ttlMs;
    if (fresh && this.version! >= atLeast) return this.version!;
    // Concurrent polls share one query.
    this.versionLoad ??= this.readVersion().finally(() => {
      this.versionLoad = undefined;
    });
    return this.versionLoad;
  }

  private async readVersion(): Promise<number> {
    const startedAt = this.now();
    const version = await this.repository.currentRulesetVersion();
    this.learn(version, startedAt);
    return this.version!;
  }

  /** Records a version known to be committed at `seenAt`; the cache only ever moves forward. */
  learn(version: number, seenAt = this.now()): void {
    if (this.version === undefined || version > this.version) this.version = version;
    if (version >= this.version) this.versionReadAt = Math.max(this.versionReadAt, seenAt);
  }

  /** The full snapshot at the current version (read and serialised once per version). */
  async full(): Promise<SnapshotBody> {
    const version = await this.currentVersion();
    if (this.body && this.body.version >= version) return this.body;
    this.bodyLoad ??= this.readBody().finally(() => {
      this.bodyLoad = undefined;
    });
    const body = await this.bodyLoad;
    // A load that started before a write this request already knows of is too old: read again.
    return body.version >= version ? body : this.readBody();
  }

  private async readBody(): Promise<SnapshotBody> {
    const startedAt = this.now();
    const snapshot = await this.repository.snapshot();
    const body = snapshotBody(snapshot.version, Buffer.from(JSON.stringify(snapshot)));
    if (!this.body || body.version > this.body.version) this.body = body;
    this.learn(body.version, startedAt);
    return body;
  }
}
