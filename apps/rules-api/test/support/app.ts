/** Builds configs and apps for tests, on Postgres or on PGlite. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { RuleInput } from '@sluice/shared';
import { createTestDatabase } from '@sluice/test-support';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';
import { type AppDeps, buildApp } from '../../src/app.js';
import { type Config, loadConfig } from '../../src/config.js';

export const ADMIN_TOKEN = 'test-admin-token-0123456789';
export const READ_TOKEN = 'test-read-token-9876543210';
export const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
export const reader = { authorization: `Bearer ${READ_TOKEN}` };

export function testConfig(env: Record<string, string> = {}): Config {
  return loadConfig({ ADMIN_TOKEN, READ_TOKEN, LOG_LEVEL: 'silent', DATA_DIR: 'memory://', ...env });
}

/** Where a test file's rules live: its own Postgres database, or its own PGlite directory. */
export interface Backend {
  /** environment that points the rules API at this backend */
  env: Record<string, string>;
  cleanup(): Promise<void>;
}

export type MakeBackend = () => Promise<Backend>;

export const postgresBackend: MakeBackend = async () => {
  const db = await createTestDatabase();
  return { env: { DATABASE_URL: db.url }, cleanup: () => db.drop() };
};

export const pgliteBackend: MakeBackend = async () => {
  const dir = await mkdtemp(path.join(tmpdir(), 'sluice-rules-pglite-'));
  return { env: { DATA_DIR: dir }, cleanup: () => rm(dir, { recursive: true, force: true }) };
};

export function startApp(backend: Backend, env: Record<string, string> = {}, deps: AppDeps = {}) {
  return buildApp(testConfig({ ...backend.env, ...env }), deps);
}

let counter = 0;
/** A valid rule input with a unique name. */
export function ruleInput(overrides: Partial<RuleInput> = {}): RuleInput {
  counter += 1;
  return {
    name: `rule-${process.pid}-${counter}`,
    match: { path: '/orders/**' },
    limit: { capacity: 10, refill: 5, period: '1s' },
    ...overrides,
  };
}

export async function createRule(app: FastifyInstance, input: RuleInput = ruleInput()) {
  const res = await app.inject({ method: 'POST', url: '/rules', headers: admin, payload: input });
  expect(res.statusCode, res.body).toBe(201);
  return res.json();
}

/** Asserts the status and the error shape of docs/rules-api.md `{ statusCode, error, message }`; returns the body. */
export function expectError(res: LightMyRequestResponse, statusCode: number) {
  expect(res.statusCode, res.body).toBe(statusCode);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  const body = res.json();
  expect(body).toMatchObject({ statusCode, error: expect.any(String), message: expect.any(String) });
  return body as { statusCode: number; error: string; message: string; code?: string };
}
