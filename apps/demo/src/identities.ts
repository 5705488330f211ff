/**
 * The demo's customers: an HS256 token (signed with the demo's JWT_SECRET, by `jose`) for `alice` on
 * the `pro` plan and one for `bob` on `free`, printed in the banner so the per-customer rules can be
 * tried with curl. Made at every start, valid for a day.
 */
import { SignJWT } from 'jose';

export interface DemoIdentities {
  alice: string;
  bob: string;
}

const DAY_SECONDS = 86_400;

async function token(secret: string, sub: string, plan: string): Promise<string> {
  return new SignJWT({ plan })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(sub)
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + DAY_SECONDS)
    .sign(new TextEncoder().encode(secret));
}

export async function demoIdentities(jwtSecret: string): Promise<DemoIdentities> {
  const [alice, bob] = await Promise.all([token(jwtSecret, 'alice', 'pro'), token(jwtSecret, 'bob', 'free')]);
  return { alice, bob };
}
