export * from './apply.js';
export * from './cli.js';
export * from './client.js';
export * from './plan.js';
export * from './rules-file.js';
