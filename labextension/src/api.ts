/**
 * The REST client of the jiyu server extension (`/jiyu/api/...`). Requests go through
 * JupyterLab's ServerConnection, which adds the token and the XSRF header that every
 * authenticated route needs.
 */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IRankRecord, IRunEvent } from './runevents';
import { IGpuSnapshot, ILogChunk, IRun, IRunCheckpoints, IStackDump, ISubmission } from './types';

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

  gpus(): Promise<IGpuSnapshot> {
    return this.request('api/gpus');
  }

  async runs(): Promise<IRun[]> {
    return (await this.request<{ runs: IRun[] }>('api/runs')).runs;
  }

  run(runId: string): Promise<IRun> {
    return this.request(`api/runs/${encodeURIComponent(runId)}`);
  }

  /** Events after byte `offset` of the run's event log, and the offset to ask from next. */
  events(runId: string, offset: number): Promise<{ events: IRunEvent[]; offset: number }> {
    return this.request(`api/runs/${encodeURIComponent(runId)}/events`, {}, { offset });
  }

  async ranks(runId: string): Promise<IRankRecord[]> {
    const reply = await this.request<{ ranks: IRankRecord[] }>(
      `api/runs/${encodeURIComponent(runId)}/ranks`
    );
    return reply.ranks;
  }

  log(runId: string, offset: number): Promise<ILogChunk> {
    return this.request(`api/runs/${encodeURIComponent(runId)}/log`, {}, { offset });
  }

  stacks(runId: string): Promise<IStackDump> {
    return this.request(`api/runs/${encodeURIComponent(runId)}/stacks`);
  }

  /** The run's checkpoints that exist on disk, and how many it recorded that are gone. */
  checkpoints(runId: string): Promise<IRunCheckpoints> {
    return this.request(`api/runs/${encodeURIComponent(runId)}/checkpoints`);
  }

  stop(runId: string): Promise<IRun> {
    return this.request(`api/runs/${encodeURIComponent(runId)}/stop`, { method: 'POST' });
  }

  submit(submission: ISubmission): Promise<IRun> {
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
    let data: any = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!response.ok) {
      throw new ApiError(data?.message || text || response.statusText, response.status);
    }
    return data as T;
  }
}
