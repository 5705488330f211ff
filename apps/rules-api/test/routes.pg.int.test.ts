import { describeRoutes } from './routes.suite.js';
import { postgresBackend } from './support/app.js';

describeRoutes('Postgres', postgresBackend);
