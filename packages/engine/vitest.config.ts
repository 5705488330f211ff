import { defineProject, mergeConfig } from 'vitest/config';
import engine from '../../vitest.shared.js';

export default mergeConfig(engine, defineProject({ test: { name: 'shared' } }));
