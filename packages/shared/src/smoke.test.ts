import { hello } from '@sluice/shared';
import { expect, test } from 'vitest';

test('resolves', () => {
  expect(hello).toBe(1);
});
