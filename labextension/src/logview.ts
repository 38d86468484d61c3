/**
 * A main-area view of a run's stdout/stderr that follows the log like `tail -f`: it asks the
 * server for the bytes after its offset, appends them, and keeps the view pinned to the
 * bottom unless the reader scrolled up. It stops asking once the run has ended and the whole
 * log is shown.
 */

import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { JiyuApi } from './api';
import { jiyuIcon } from './icons';
import type { LogChunk } from './api.generated';

/** The most characters kept on screen; older text is dropped from the top. */
export const MAX_CHARS = 2_000_000;

export class LogView extends Widget {
  constructor(
    readonly api: JiyuApi,
    readonly runId: string,
    readonly runName: string
  ) {
    super();
    this.id = `jiyu-log-${runId}`;
    this.addClass('jp-JiyuLog');
    this.title.label = `Log: ${runName}`;
    this.title.caption = `stdout/stderr of run ${runName} (${runId})`;
    this.title.icon = jiyuIcon;
    this.title.closable = true;
    this._state.className = 'jp-JiyuLog-state';
    this._state.setAttribute('role', 'status');
    this._text.className = 'jp-JiyuLog-text';
    this._text.setAttribute('aria-label', `Log of ${runName}`);
    this._text.tabIndex = 0;
    this.node.append(this._state, this._text);
    this._poll = new Poll({
      factory: () => this._follow(),
      frequency: { interval: 1000, backoff: true, max: 30_000 },
      standby: 'when-hidden',
      name: `jiyu-magics:log-${runId}`
    });
  }

  dispose(): void {
    this._poll.dispose();
    super.dispose();
  }

  private async _follow(): Promise<void> {
    const pinned = this._atBottom();
    let chunk: LogChunk;
    try {
      do {
        chunk = await this.api.log(this.runId, this._offset);
        this._append(chunk.text);
        this._offset = chunk.offset;
      } while (chunk.text && chunk.offset < chunk.size);
    } catch (error) {
      this._state.textContent = `Cannot read the log: ${(error as Error).message}`;
      throw error;
    }
    if (pinned) {
      this._text.scrollTop = this._text.scrollHeight;
    }
    const ended = !chunk.active && chunk.offset >= chunk.size;
    this._state.textContent = ended
      ? `Run ${chunk.status}: end of log (${chunk.size} bytes).`
      : `Following · ${chunk.status} · ${chunk.size} bytes`;
    this.node.classList.toggle('jp-mod-ended', ended);
    if (ended) {
      this._poll.dispose();
    }
  }

  private _append(text: string): void {
    if (!text) {
      return;
    }
    this._text.append(document.createTextNode(text));
    this._chars += text.length;
    while (this._chars > MAX_CHARS && this._text.firstChild) {
      this._chars -= this._text.firstChild.textContent?.length ?? 0;
      this._text.firstChild.remove();
    }
  }

  private _atBottom(): boolean {
    const t = this._text;
    return t.scrollTop + t.clientHeight >= t.scrollHeight - 8;
  }

  private _offset = 0;
  private _chars = 0;
  private _poll: Poll;
  private _state = document.createElement('div');
  private _text = document.createElement('pre');
}
