/**
 * `GET /auth/me` tells a client what its token may do, so the console needs no probing write to find
 * out: the admin token may write, the read token may not, no or a wrong token is a 401.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin, type Backend, expectError, postgresBackend, reader, startApp } from './support/app.js';

describe('GET /auth/me', () => {
  let backend: Backend;
  let app: FastifyInstance;
  let open: FastifyInstance;
  beforeAll(async () => {
    backend = await postgresBackend();
    app = await startApp(backend);
    open = await startApp(backend, { AUTH_DISABLED: 'true', ADMIN_TOKEN: '', READ_TOKEN: '' });
  });
  afterAll(async () => {
    await app?.close();
    await open?.close();
    await backend?.cleanup();
  });

  it('answers the role of the token and whether it may write', async () => {
    const asAdmin = await app.inject({ method: 'GET', url: '/auth/me', headers: admin });
    expect(asAdmin.statusCode).toBe(200);
    expect(asAdmin.json()).toEqual({ role: 'admin', canWrite: true });
    const asReader = await app.inject({ method: 'GET', url: '/auth/me', headers: reader });
    expect(asReader.json()).toEqual({ role: 'read', canWrite: false });
  });

  it('is a 401 without a token or with a wrong one', async () => {
    expect(expectError(await app.inject({ method: 'GET', url: '/auth/me' }), 401).code).toBe(
      'SLUICE_UNAUTHORIZED',
    );
    const wrong = await app.inject({
      method: 'GET',
      url: '/auth/me',
      headers: { authorization: 'Bearer nope' },
    });
    expect(expectError(wrong, 401).code).toBe('SLUICE_UNAUTHORIZED');
  });

  it('says anonymous, allowed to write, when auth is disabled', async () => {
    const res = await open.inject({ method: 'GET', url: '/auth/me' });
    expect(res.json()).toEqual({ role: 'anonymous', canWrite: true });
  });
});
