/**
 * The statuses of a run that has not ended. Every shape the jiyu server extension answers with
 * (a run, a GPU snapshot, a log chunk, a stack dump...) and the submission it takes come from
 * `api.generated.ts`, generated from the REST API's JSON Schema (`make api-types`), so they
 * cannot drift from the Python side.
 */

import { ActiveStatus, RunStatus } from './api.generated';

/** Every active status once and nothing else: the compiler checks it against the schema. */
const ACTIVE: Record<ActiveStatus, true> = {
  queued: true,
  starting: true,
  running: true,
  stopping: true
};

export const ACTIVE_STATUSES: ReadonlyArray<RunStatus> = Object.keys(ACTIVE) as ActiveStatus[];
