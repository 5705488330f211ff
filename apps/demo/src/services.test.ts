import { describe, expect, it } from 'vitest';
import { type DemoSettings, serviceSpec } from './services.js';

const settings: DemoSettings = {
  root: '/repo/',
  fromSource: false,
  host: '0.0.0.0',
  ports: { gateway: 8080, admin: 9191, rulesApi: 8081, upstream: 3000 },
  dataDir: '/tmp/demo',
  adminToken: 'admin',
  readToken: 'read',
  jwtSecret: 'jwt-secret-of-the-demo-32-bytes-long',
  clientKeySecret: 'client-key-secret',
  logLevel: 'warn',
  env: { ANALYTICS_GATEWAYS: 'http://elsewhere:1', PATH: '/bin' },
};

describe('serviceSpec', () => {
  it("points the rules API's top offenders at the demo gateway's admin port (there is no Redis)", () => {
    const { env } = serviceSpec('rules-api', settings);
    expect(env.ANALYTICS_GATEWAYS).toBe('http://127.0.0.1:9191');
    expect(env.REDIS_URL).toBeUndefined();
    expect(env.PATH).toBe('/bin');
  });

  it('gives the gateway and the rules API the same JWT_SECRET and CLIENT_KEY_SECRET, whatever the shell says', () => {
    const shell = { ...settings, env: { ...settings.env, JWT_SECRET: 'x', CLIENT_KEY_SECRET: 'y' } };
    for (const name of ['gateway', 'rules-api'] as const) {
      const { env } = serviceSpec(name, shell);
      expect(env.JWT_SECRET).toBe(settings.jwtSecret);
      expect(env.CLIENT_KEY_SECRET).toBe(settings.clientKeySecret);
    }
  });

  it('the gateway serves that admin port', () => {
    expect(serviceSpec('gateway', settings).env.ADMIN_PORT).toBe('9191');
  });
});
