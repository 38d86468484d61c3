/**
 * The REST client of the jiyu server extension (`/jiyu/api/...`). Requests go through
 * JupyterLab's ServerConnection, which adds the token and the XSRF header that every
 * authenticated route needs.
 */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import type {
  ErrorReply,
  EventChunk,
  GpuStatus,
  LogChunk,
  RankList,
  RankRecord,
  Run,
  RunCheckpoints,
  RunList,
  StackDump,
  Submission
} from './api.generated';

/** A refusal from the server, with the message it sent (400s name the bad field). */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
  }
}

export class JiyuApi {
  constructor(readonly settings = ServerConnection.makeSettings()) {}

  gpus(): Promise<GpuStatus> {
    return this.request('api/gpus');
  }

  async runs(): Promise<Run[]> {
    return (await this.request<RunList>('api/runs')).runs;
  }

  run(runId: string): Promise<Run> {
    return this.request(`api/runs/${encodeURIComponent(runId)}`);
  }

  /** Events after byte `offset` of the run's event log, and the offset to ask from next. */
  events(runId: string, offset: number): Promise<EventChunk> {
    return this.request(`api/runs/${encodeURIComponent(runId)}/events`, {}, { offset });
  }

  async ranks(runId: string): Promise<RankRecord[]> {
    const reply = await this.request<RankList>(`api/runs/${encodeURIComponent(runId)}/ranks`);
    return reply.ranks;
  }

  log(runId: string, offset: number): Promise<LogChunk> {
    return this.request(`api/runs/${encodeURIComponent(runId)}/log`, {}, { offset });
  }

  stacks(runId: string): Promise<StackDump> {
    return this.request(`api/runs/${encodeURIComponent(runId)}/stacks`);
  }

  /** The run's checkpoints that exist on disk, and how many it recorded that are gone. */
  checkpoints(runId: string): Promise<RunCheckpoints> {
    return this.request(`api/runs/${encodeURIComponent(runId)}/checkpoints`);
  }

  stop(runId: string): Promise<Run> {
    return this.request(`api/runs/${encodeURIComponent(runId)}/stop`, { method: 'POST' });
  }

  submit(submission: Submission): Promise<Run> {
    return this.request('api/runs', {
      method: 'POST',
      body: JSON.stringify(submission)
    });
  }

  private async request<T>(
    path: string,
    init: RequestInit = {},
    query: Record<string, string | number> = {}
  ): Promise<T> {
    const url =
      URLExt.join(this.settings.baseUrl, 'jiyu', path) + URLExt.objectToQueryString(query);
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(url, init, this.settings);
    } catch (error) {
      throw new ServerConnection.NetworkError(error as TypeError);
    }
    const text = await response.text();
    let data: unknown = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!response.ok) {
      const refusal = data as ErrorReply | null;
      throw new ApiError(refusal?.message || text || response.statusText, response.status);
    }
    return data as T;
  }
}
