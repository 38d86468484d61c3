/**
 * "Submit notebook as background job": a dialog for processes, name and parameters, then
 * `POST /jiyu/api/runs`. The notebook is saved first: the job runs the file on disk.
 */

import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import { JiyuApi } from './api';
import { ISubmitValues, toSubmission } from './params';
import { IRun, ISubmission } from './types';

export class SubmitForm extends Widget implements Dialog.IBodyWidget<ISubmitValues> {
  constructor(notebookPath: string, nproc: number) {
    super();
    this.addClass('jp-JiyuSubmit');
    const where = document.createElement('p');
    where.textContent = `Runs ${notebookPath} under torchrun in the background; it keeps going when the browser or the kernel goes away.`;
    this._nproc = field('number', String(nproc));
    this._nproc.min = '1';
    this._name = field('text', '');
    this._name.placeholder = 'defaults to the notebook name';
    this._params = document.createElement('textarea');
    this._params.rows = 4;
    this._params.placeholder = 'lr = 3e-4\nepochs = 5';
    this.node.append(
      where,
      labelled('Processes per node (GPUs)', this._nproc),
      labelled('Run name', this._name),
      labelled('Parameters, one "name = value" a line', this._params)
    );
  }

  getValue(): ISubmitValues {
    return {
      nproc: this._nproc.value,
      name: this._name.value,
      params: this._params.value
    };
  }

  private _nproc: HTMLInputElement;
  private _name: HTMLInputElement;
  private _params: HTMLTextAreaElement;
}

function field(type: string, value: string): HTMLInputElement {
  const input = document.createElement('input');
  input.type = type;
  input.value = value;
  input.className = 'jp-mod-styled';
  return input;
}

function labelled(text: string, control: HTMLElement): HTMLLabelElement {
  const label = document.createElement('label');
  const span = document.createElement('span');
  span.textContent = text;
  label.append(span, control);
  return label;
}

/** The run the server created, or null when the user cancelled or the input was invalid. */
export async function submitNotebook(
  notebook: NotebookPanel,
  api: JiyuApi,
  nproc: number
): Promise<IRun | null> {
  const path = notebook.context.path;
  const result = await showDialog({
    title: 'Submit notebook as background job',
    body: new SubmitForm(path, nproc),
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Submit' })],
    focusNodeSelector: 'input'
  });
  if (!result.button.accept || !result.value) {
    return null;
  }
  let submission: ISubmission;
  try {
    submission = toSubmission(path, result.value);
  } catch (error) {
    await showErrorMessage('Cannot submit the notebook', (error as Error).message);
    return null;
  }
  if (notebook.context.model.dirty) {
    await notebook.context.save();
  }
  return api.submit(submission);
}
