/** The decision core and its collaborators (transport-free; see core.ts). */
export * from './core.js';
export * from './decision.js';
export * from './denial-cache.js';
export * from './events.js';
export * from './exchange.js';
export * from './explain.js';
export * from './facts.js';
export * from './lease-manager.js';
export * from './rule-plan.js';
export * from './slot-keeper.js';
export * from './store-policy.js';
