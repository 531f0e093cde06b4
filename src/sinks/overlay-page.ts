// The overlay page a caption relay serves (a broadcast's browser source): its HTML, style and
// script, and the security headers it is served with. The script is the page's whole logic: it
// reads the relay's Server-Sent Events and shows each cue for a time it can be read in.

/** The overlay's HTML: a cue line and a partial line, its script and style from the relay. */
export const overlayPage = (title: string, lang: string | undefined) => `<!doctype html>
<html${lang ? ` lang="${lang}"` : ''}>
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`)}</title>
<link rel="stylesheet" href="/overlay.css">
<script src="/overlay.js" defer></script>
</head>
<body>
<div id="captions" aria-live="polite"><p id="cue" class="cue" dir="auto"></p><p id="partial" class="partial" dir="auto"></p></div>
</body>
</html>
`;

/** The overlay's style: captions at the bottom of a transparent page. */
export const OVERLAY_CSS = `html, body { margin: 0; background: transparent; }
#captions { position: fixed; left: 5%; right: 5%; bottom: 6%; text-align: center;
  font: 600 clamp(12px, 2.8vw, 44px)/1.3 system-ui, sans-serif; color: #fff; }
#captions p { margin: 0.2em auto; display: table; padding: 0.1em 0.4em; border-radius: 0.2em;
  background: rgba(0, 0, 0, 0.72); white-space: pre-line; }
#captions p:empty { display: none; }
/* Provisional text: it may still change, and must not be taken for a final cue. */
.partial { opacity: 0.7; font-style: italic; font-weight: 400; }
.speaker { color: #ffd54a; }
`;

/**
 * The overlay's script. Cues of one utterance arrive together (within milliseconds), so they
 * go through a display queue, each on screen for a time it can be read in:
 * - alone, max(minDurationMs, chars / maxCharsPerSecond, its own endMs - startMs);
 * - with cues waiting behind it, only its reading time, max(minDurationMs, chars / cps), and
 *   with more than CATCH_UP waiting, that time times CATCH_UP / waiting, down to minDurationMs,
 *   so that a backlog drains faster than speech fills it (the cue on screen is shortened as
 *   soon as others arrive, never lengthened);
 * - with more than JOIN_PAST waiting (a burst: a file captioned faster than real time, a tab
 *   that slept), the next cues are joined on one screen, one more for every JOIN_PAST waiting
 *   (at most MAX_JOINED), each keeping its own lines and speaker: a backlog is caught up by
 *   showing more at once, and no cue is ever dropped.
 * A screen whose time is up stays until the next one, or LINGER_MS more at the most.
 */
export const overlayScript = (layout: { minMs: number; cps: number }) => `'use strict';
const MIN_MS = ${Number(layout.minMs)};
const CPS = ${Number(layout.cps)};
const CATCH_UP = 2;
const JOIN_PAST = 12;
const MAX_JOINED = 3;
const LINGER_MS = 1500;
const cueEl = document.getElementById('cue');
const partialEl = document.getElementById('partial');
const waiting = [];
// The cues on screen (one, or several joined to catch up), or null.
let current = null;
let shownAt = 0;
let holdTimer;
let lingerTimer;
function holdMs(screen, behind) {
  let chars = 0;
  for (const cue of screen) chars += cue.lines.join(' ').length + (cue.speaker ? cue.speaker.length + 2 : 0);
  const reading = Math.max(MIN_MS, (chars * 1000) / CPS);
  if (behind === 0) return Math.max(reading, screen.at(-1).endMs - screen[0].startMs);
  return Math.max(MIN_MS, reading * Math.min(1, CATCH_UP / behind));
}
function render(screen) {
  cueEl.textContent = '';
  screen.forEach((cue, i) => {
    if (i > 0) cueEl.append(document.createTextNode('\\n'));
    if (cue.speaker && (i === 0 || cue.speaker !== screen[i - 1].speaker)) {
      const who = document.createElement('span');
      who.className = 'speaker';
      who.dir = 'auto';
      who.textContent = cue.speaker + ': ';
      cueEl.append(who);
    }
    cueEl.append(document.createTextNode(cue.lines.join('\\n')));
  });
}
function schedule() {
  clearTimeout(holdTimer);
  const left = shownAt + holdMs(current, waiting.length) - performance.now();
  holdTimer = setTimeout(advance, Math.max(0, left));
}
function advance() {
  holdTimer = undefined;
  if (waiting.length === 0) {
    current = null;
    lingerTimer = setTimeout(() => { if (!current) cueEl.textContent = ''; }, LINGER_MS);
    return;
  }
  const joined = Math.min(MAX_JOINED, 1 + Math.floor((waiting.length - 1) / JOIN_PAST));
  current = waiting.splice(0, joined);
  clearTimeout(lingerTimer);
  shownAt = performance.now();
  render(current);
  schedule();
}
function enqueue(cue) {
  waiting.push(cue);
  if (current) schedule();
  else advance();
}
// A new EventSource does not send Last-Event-ID: the page says which cue it saw last itself.
let lastId;
// After the captions ended, or a connection the browser gave up on (a refusal, a relay gone),
// try again, ever less often (1 s doubling to 15 s, jittered so that many overlays spread out):
// a relay restarted on the same address is picked up by itself, and an ended one is not
// hammered. Captions arriving reset the pace.
const RETRY_MS = 1000;
const MAX_RETRY_MS = 15000;
let retries = 0;
let retryTimer;
function connect() {
  retryTimer = undefined;
  const events = new EventSource(lastId ? '/events?lastEventId=' + encodeURIComponent(lastId) : '/events');
  const retryLater = () => {
    events.close();
    if (retryTimer !== undefined) return;
    const ms = Math.min(MAX_RETRY_MS, RETRY_MS * 2 ** retries++);
    retryTimer = setTimeout(connect, ms * (0.5 + Math.random() / 2));
  };
  events.addEventListener('cue', (e) => {
    retries = 0;
    lastId = e.lastEventId;
    // The utterance is committed: its provisional text is obsolete.
    partialEl.textContent = '';
    enqueue(JSON.parse(e.data));
  });
  events.addEventListener('partial', (e) => {
    retries = 0;
    partialEl.textContent = JSON.parse(e.data).lines.join('\\n');
  });
  events.addEventListener('end', () => {
    partialEl.textContent = '';
    retryLater();
  });
  // A dropped connection the browser retries by itself (CONNECTING); one it gave up on is ours.
  events.addEventListener('error', () => {
    if (events.readyState === EventSource.CLOSED) retryLater();
  });
}
connect();
`;

/** Headers of everything the relay serves itself: its own script and style only, no sniffing. */
export const SECURITY_HEADERS = {
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};
