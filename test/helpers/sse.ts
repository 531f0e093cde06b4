// Server-Sent Events read the way a browser's EventSource would, for tests.

import assert from 'node:assert/strict';

export interface SseEvent {
  event: string;
  data: unknown;
  /** The event's `id:` field, when it has one. */
  id?: string;
}

/** Read Server-Sent Events from `url` until `until` says enough (or the stream ends). */
export async function readEvents(
  url: string,
  until: (events: SseEvent[]) => boolean,
  onOpen?: () => void,
  headers?: Record<string, string>,
): Promise<SseEvent[]> {
  const res = await fetch(url, { headers });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type')!, /^text\/event-stream/);
  onOpen?.();
  const events: SseEvent[] = [];
  const decoder = new TextDecoder();
  let text = '';
  const reader = res.body!.getReader();
  try {
    while (!until(events)) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      let end = text.indexOf('\n\n');
      while (end >= 0) {
        const block = text.slice(0, end);
        text = text.slice(end + 2);
        const event = /^event: (.*)$/m.exec(block)?.[1];
        const data = /^data: (.*)$/m.exec(block)?.[1];
        const id = /^id: (.*)$/m.exec(block)?.[1];
        if (event && data !== undefined)
          events.push({ event, data: JSON.parse(data), ...(id === undefined ? {} : { id }) });
        end = text.indexOf('\n\n');
      }
    }
  } finally {
    await reader.cancel();
  }
  return events;
}
