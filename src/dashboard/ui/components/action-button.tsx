/**
 * An action with its confirmation: the button opens a dialog that says what
 * will happen (and takes a reason, for a cancel); only its confirm button
 * sends the action. The answer is shown; every open page follows the change.
 */
import type { ComponentChildren } from 'preact';
import { useRef, useState } from 'preact/hooks';
import { act } from '../api.js';
import { useSession } from '../session.js';

export interface ActionButtonProps {
  action: 'cancel' | 'resume' | 'retry';
  label: string;
  /** What the dialog asks, e.g. "Cancel run order-1 in scope acme?" */
  question: string;
  children: ComponentChildren;
  body: Record<string, unknown>;
  withReason?: boolean;
  danger?: boolean;
  onDone?: () => void;
}

export function ActionButton(props: ActionButtonProps) {
  const { session } = useSession();
  const dialog = useRef<HTMLDialogElement>(null);
  const [reason, setReason] = useState('');
  const [busy, setBusy] = useState(false);
  const [message, setMessage] = useState<{ ok: boolean; text: string } | undefined>();
  if (!session.canAct) return null;
  const id = `reason-${props.action}`;
  const confirm = async () => {
    setBusy(true);
    try {
      const answer = await act(props.action, props.withReason && reason.trim() ? { ...props.body, reason: reason.trim() } : props.body, session.csrf);
      setMessage({ ok: answer.applied, text: answer.message });
      dialog.current?.close();
      props.onDone?.();
    } catch (error) {
      setMessage({ ok: false, text: error instanceof Error ? error.message : String(error) });
      dialog.current?.close();
    } finally {
      setBusy(false);
    }
  };
  return (
    <span class="action">
      <button type="button" class={props.danger ? 'danger' : ''} onClick={() => { setMessage(undefined); dialog.current?.showModal(); }}>
        {props.label}
      </button>
      {message ? <span role="status" class={message.ok ? 'ok-text' : 'error-text'}>{message.text}</span> : null}
      <dialog ref={dialog} aria-labelledby={`${id}-title`}>
        <form method="dialog" onSubmit={(event) => { event.preventDefault(); void confirm(); }}>
          <h2 id={`${id}-title`}>{props.question}</h2>
          <div class="dialog-body">{props.children}</div>
          {props.withReason ? (
            <p>
              <label for={id}>Reason (stored with the run)</label>
              <input id={id} type="text" maxLength={1000} value={reason} placeholder="cancelled" onInput={(event) => setReason(event.currentTarget.value)} />
            </p>
          ) : null}
          <p class="dialog-note">This is recorded in the audit log.</p>
          <div class="dialog-buttons">
            <button type="button" onClick={() => dialog.current?.close()} autoFocus>Keep as is</button>
            <button type="submit" class={props.danger ? 'danger' : 'primary'} disabled={busy}>{busy ? 'Working…' : `Yes, ${props.label.toLowerCase()}`}</button>
          </div>
        </form>
      </dialog>
    </span>
  );
}
