// CEA-608 closed captions as they travel in H.264: the ATSC A/53 caption SEI (`GA94` cc_data)
// scanned out of NAL units, and a decoder of the 608 byte pairs (odd parity, control codes,
// pop-on, roll-up and paint-on) into the lines a viewer's decoder shows. Pure: bytes in, text out.

/** One cc_data construct of an A/53 caption SEI: which field or service it belongs to, and its two bytes. */
export interface CcData {
  /** 0: 608 field 1 (CC1/CC2), 1: 608 field 2 (CC3/CC4), 2 and 3: DTVCC (708) packet data. */
  type: number;
  /** The two bytes as sent (608: with their parity bits). */
  data1: number;
  data2: number;
}

/** The rows and columns of a 608 caption screen. */
export const CEA608_ROWS = 15;
export const CEA608_COLUMNS = 32;

const NAL_SEI = 6;
const SEI_USER_DATA_REGISTERED = 4;
const ITU_T_T35_USA = 0xb5;
const ATSC_PROVIDER = 0x0031;
const GA94 = 0x47413934;
const CC_DATA = 0x03;

/** NAL units of an Annex B byte stream (start codes `00 00 01` or `00 00 00 01`), without them. */
export function splitAnnexB(stream: Uint8Array): Uint8Array[] {
  const starts: { at: number; payload: number }[] = [];
  for (let i = 0; i + 2 < stream.length; i++) {
    if (stream[i] === 0 && stream[i + 1] === 0 && stream[i + 2] === 1) {
      starts.push({ at: i > 0 && stream[i - 1] === 0 ? i - 1 : i, payload: i + 3 });
      i += 2;
    }
  }
  return starts.map((s, k) =>
    stream.subarray(s.payload, k + 1 < starts.length ? starts[k + 1]!.at : stream.length),
  );
}

/** The RBSP of a NAL unit's payload: every emulation prevention byte (`00 00 03`) removed. */
function unescapeRbsp(payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(payload.length);
  let n = 0;
  let zeros = 0;
  for (const byte of payload) {
    if (zeros >= 2 && byte === 3) {
      zeros = 0;
      continue;
    }
    zeros = byte === 0 ? zeros + 1 : 0;
    out[n++] = byte;
  }
  return out.subarray(0, n);
}

/**
 * The cc_data constructs of one H.264 NAL unit (header byte first, no start code): an SEI's
 * `user_data_registered_itu_t_t35` messages carrying ATSC A/53 `GA94` caption data, in order.
 * Any other NAL unit, or a message that is not caption data, gives none; a message cut short
 * gives what it holds whole.
 */
export function ccDataFromNal(nal: Uint8Array): CcData[] {
  if (nal.length < 2 || (nal[0]! & 0x1f) !== NAL_SEI) return [];
  const rbsp = unescapeRbsp(nal.subarray(1));
  const out: CcData[] = [];
  let i = 0;
  // Each message: type and size (runs of 0xFF add 255), then the payload; the RBSP ends with
  // its stop bit (0x80).
  while (i < rbsp.length && !(rbsp[i] === 0x80 && i === rbsp.length - 1)) {
    let type = 0;
    while (rbsp[i] === 0xff) {
      type += 255;
      i++;
    }
    type += rbsp[i++] ?? 0;
    let size = 0;
    while (rbsp[i] === 0xff) {
      size += 255;
      i++;
    }
    size += rbsp[i++] ?? 0;
    const payload = rbsp.subarray(i, Math.min(rbsp.length, i + size));
    i += size;
    if (type === SEI_USER_DATA_REGISTERED) out.push(...ccDataFromT35(payload));
  }
  return out;
}

function ccDataFromT35(p: Uint8Array): CcData[] {
  let i = 0;
  if (p[i++] !== ITU_T_T35_USA) return [];
  if (p.length < i + 8) return [];
  const provider = (p[i]! << 8) | p[i + 1]!;
  const user = ((p[i + 2]! << 24) | (p[i + 3]! << 16) | (p[i + 4]! << 8) | p[i + 5]!) >>> 0;
  i += 6;
  if (provider !== ATSC_PROVIDER || user !== GA94 || p[i++] !== CC_DATA) return [];
  const flags = p[i++]!;
  i++; // em_data
  if ((flags & 0x40) === 0) return []; // process_cc_data_flag: nothing to process
  const out: CcData[] = [];
  const count = flags & 0x1f;
  for (let k = 0; k < count && i + 2 < p.length; k++, i += 3) {
    const head = p[i]!;
    if ((head & 0x04) === 0) continue; // cc_valid
    out.push({ type: head & 0x03, data1: p[i + 1]!, data2: p[i + 2]! });
  }
  return out;
}

/** Whether a 608 byte has odd parity (its top bit is the parity bit). */
export function hasOddParity(byte: number): boolean {
  let ones = 0;
  for (let b = byte & 0xff; b; b >>= 1) ones += b & 1;
  return ones % 2 === 1;
}

/** A 7-bit 608 byte with its odd-parity bit set, as it is sent. */
export function withOddParity(byte: number): number {
  const b = byte & 0x7f;
  return hasOddParity(b) ? b : b | 0x80;
}

// The basic character set is ASCII but for these.
const BASIC: Record<number, string> = {
  42: 'á',
  92: 'é',
  94: 'í',
  95: 'ó',
  96: 'ú',
  123: 'ç',
  124: '÷',
  125: 'Ñ',
  126: 'ñ',
  127: '█',
};
/** Special North American characters: 0x11 (channel 2: 0x19), then 0x30-0x3F. */
const SPECIAL = '®°½¿™¢£♪à\u00a0èâêîôû';
/** Extended Spanish, French and miscellaneous: 0x12 (0x1A), then 0x20-0x3F. */
const EXTENDED_1 = 'ÁÉÓÚÜü‘¡*’—©℠•“”ÀÂÇÈÊËëÎÏïÔÙùÛ«»';
/** Extended Portuguese, German and Danish: 0x13 (0x1B), then 0x20-0x3F. */
const EXTENDED_2 = 'ÃãÍÌìÒòÕõ{}\\^_|~ÄäÖöß¥¤¦ÅåØø┌┐└┘';

/** Which of 608's character sets a character is sent in. */
export type Cea608CharacterSet = 'basic' | 'special' | 'extended';

/** Every character a 608 caption can show, and its set (basic first: one byte, two a pair). */
const CHARACTER_SETS: ReadonlyMap<string, Cea608CharacterSet> = (() => {
  const sets = new Map<string, Cea608CharacterSet>();
  for (let b = 0x20; b <= 0x7f; b++) sets.set(BASIC[b] ?? String.fromCharCode(b), 'basic');
  for (const c of SPECIAL) if (!sets.has(c)) sets.set(c, 'special');
  for (const c of EXTENDED_1 + EXTENDED_2) if (!sets.has(c)) sets.set(c, 'extended');
  return sets;
})();

/** The 608 character set `char` (one character) is sent in, or undefined when 608 cannot show it. */
export function cea608CharacterSet(char: string): Cea608CharacterSet | undefined {
  return CHARACTER_SETS.get(char);
}

/** Whether a 608 caption can show `char` (one character, as a string). */
export function isCea608Character(char: string): boolean {
  return CHARACTER_SETS.has(char);
}

// PAC rows by first byte (channel bit cleared) and the second byte's 0x20 bit.
const PAC_ROWS: Record<number, [number, number]> = {
  17: [1, 2],
  18: [3, 4],
  21: [5, 6],
  22: [7, 8],
  23: [9, 10],
  16: [11, 11],
  19: [12, 13],
  20: [14, 15],
};

/** How a caption was put on screen. */
export type Cea608Mode = 'pop-on' | 'roll-up' | 'paint-on';

/** A caption a 608 decoder showed: its lines top to bottom, trailing spaces removed. */
export interface Cea608Caption {
  mode: Cea608Mode;
  lines: string[];
  /** The `time` given with the pair that completed it. */
  time?: number | undefined;
}

type Memory = string[][];
const blank = (): Memory =>
  Array.from({ length: CEA608_ROWS }, () => new Array<string>(CEA608_COLUMNS).fill(' '));
const rowText = (row: string[]) => row.join('').replace(/[ \u00a0]+$/, '');

/**
 * Decoder of one 608 caption channel (CC1 by default) of one field: feed its byte pairs in
 * order with `push` and get the captions as a viewer would see them completed:
 * - pop-on (RCL ... EOC): the whole caption at its End Of Caption;
 * - roll-up (RU2-RU4 ... CR): each line as its carriage return rolls it up (and the last one
 *   at an erase, a mode change, or `flush`);
 * - paint-on (RDC): the screen when it is erased, the mode changes, or at `flush`.
 * A control code sent twice in a row (as 608 sends them, for robustness) acts once. A pair
 * with a parity error is counted in `parityErrors`; its control code is ignored and its
 * characters shown as █, as decoders do.
 */
export class Cea608Decoder {
  /** Pairs with a byte whose parity was wrong. */
  parityErrors = 0;
  readonly #channel: 1 | 2;
  #displayed: Memory = blank();
  #hidden: Memory = blank();
  #mode: Cea608Mode | undefined;
  #row = CEA608_ROWS - 1;
  #col = 0;
  #rollRows = 2;
  /** The last control code acted on, to skip its repetition. */
  #lastControl = -1;
  /** Whether the screen holds text not yet reported (roll-up: the base row; paint-on: any). */
  #unreported = false;
  /** Whether the pairs now belong to the other channel (after its control code). */
  #otherChannel = false;

  constructor(options: { channel?: 1 | 2 } = {}) {
    this.#channel = options.channel ?? 1;
  }

  /** One byte pair (with parity bits, as sent); returns the captions it completed. */
  push(data1: number, data2: number, time?: number): Cea608Caption[] {
    const out: Cea608Caption[] = [];
    const ok1 = hasOddParity(data1);
    const ok2 = hasOddParity(data2);
    if (!ok1 || !ok2) this.parityErrors++;
    const b1 = data1 & 0x7f;
    const b2 = data2 & 0x7f;
    if (b1 === 0 && b2 === 0) return out; // padding
    if (b1 >= 0x10 && b1 <= 0x1f) {
      if (!ok1) return out;
      const code = (b1 << 8) | b2;
      if (code === this.#lastControl) {
        this.#lastControl = -1;
        return out;
      }
      this.#lastControl = code;
      // A control code names its channel: the pairs after it belong there.
      this.#otherChannel = ((b1 & 0x08) === 0 ? 1 : 2) !== this.#channel;
      if (this.#otherChannel || !ok2) return out;
      this.#control(b1 & 0x17, b2, time, out);
      return out;
    }
    this.#lastControl = -1;
    if (b1 < 0x20 || this.#otherChannel) return out; // XDS, or the other channel's text
    this.#write(ok1 ? (BASIC[b1] ?? String.fromCharCode(b1)) : '█');
    if (b2 >= 0x20) this.#write(ok2 ? (BASIC[b2] ?? String.fromCharCode(b2)) : '█');
    return out;
  }

  /** What is on screen and not yet reported (the end of the stream). */
  flush(time?: number): Cea608Caption[] {
    const out: Cea608Caption[] = [];
    this.#report(time, out);
    return out;
  }

  #control(b1: number, b2: number, time: number | undefined, out: Cea608Caption[]): void {
    if (b2 >= 0x40) {
      this.#preamble(b1, b2);
      return;
    }
    if (b1 === 0x11 && b2 >= 0x20) {
      // Special characters; below them, mid-row style changes, which take a space.
      this.#write(b2 >= 0x30 ? SPECIAL[b2 - 0x30]! : ' ');
      return;
    }
    if ((b1 === 0x12 || b1 === 0x13) && b2 >= 0x20) {
      // An extended character replaces the standard one sent before it as a fallback.
      this.#col = Math.max(0, this.#col - 1);
      this.#write((b1 === 0x12 ? EXTENDED_1 : EXTENDED_2)[b2 - 0x20]!);
      return;
    }
    if (b1 === 0x17 && b2 >= 0x21 && b2 <= 0x23) {
      this.#col = Math.min(CEA608_COLUMNS - 1, this.#col + (b2 - 0x20));
      return;
    }
    if ((b1 !== 0x14 && b1 !== 0x15) || b2 < 0x20 || b2 > 0x2f) return;
    switch (b2) {
      case 0x20: // RCL: resume caption loading (pop-on)
        this.#enter('pop-on', time, out);
        break;
      case 0x25: // RU2, RU3, RU4
      case 0x26:
      case 0x27:
        this.#rollRows = b2 - 0x23;
        if (this.#mode !== 'roll-up') {
          this.#enter('roll-up', time, out);
          this.#displayed = blank();
          this.#hidden = blank();
          this.#row = CEA608_ROWS - 1;
        }
        this.#col = 0;
        break;
      case 0x29: // RDC: resume direct captioning (paint-on)
        this.#enter('paint-on', time, out);
        break;
      case 0x21: {
        // BS: backspace
        if (this.#col > 0) this.#col--;
        this.#target()[this.#row]![this.#col] = ' ';
        break;
      }
      case 0x24: // DER: delete to end of row
        this.#target()[this.#row]!.fill(' ', this.#col);
        break;
      case 0x2c: // EDM: erase displayed memory
        this.#report(time, out);
        this.#displayed = blank();
        break;
      case 0x2e: // ENM: erase non-displayed memory
        this.#hidden = blank();
        break;
      case 0x2f: {
        // EOC: end of caption, the loaded caption is shown
        const shown = this.#hidden;
        this.#hidden = this.#displayed;
        this.#displayed = shown;
        this.#mode = 'pop-on';
        const lines = shown.map(rowText).filter((l) => l !== '');
        if (lines.length > 0) out.push({ mode: 'pop-on', lines, time });
        break;
      }
      case 0x2d: // CR: carriage return
        if (this.#mode === 'roll-up') {
          this.#report(time, out);
          const top = Math.max(0, this.#row - this.#rollRows + 1);
          for (let r = 0; r < CEA608_ROWS; r++) if (r < top || r > this.#row) this.#displayed[r]!.fill(' ');
          for (let r = top; r < this.#row; r++) this.#displayed[r] = this.#displayed[r + 1]!;
          this.#displayed[this.#row] = new Array<string>(CEA608_COLUMNS).fill(' ');
        } else if (this.#row < CEA608_ROWS - 1) {
          this.#row++;
        }
        this.#col = 0;
        break;
      // AOF, AON, FON, TR and RTD change nothing a caption shows.
    }
  }

  #preamble(b1: number, b2: number): void {
    const rows = PAC_ROWS[b1];
    if (!rows) return;
    const row = rows[(b2 & 0x20) === 0 ? 0 : 1] - 1;
    if (this.#mode === 'roll-up' && row !== this.#row) {
      // The roll-up window moves with its base row.
      const moved = this.#displayed.slice(this.#row - this.#rollRows + 1, this.#row + 1);
      this.#displayed = blank();
      moved.forEach((line, k) => {
        const r = row - moved.length + 1 + k;
        if (r >= 0) this.#displayed[r] = line;
      });
    }
    this.#row = row;
    this.#col = (b2 & 0x10) === 0 ? 0 : ((b2 & 0x0e) >> 1) * 4;
  }

  #enter(mode: Cea608Mode, time: number | undefined, out: Cea608Caption[]): void {
    if (this.#mode !== mode) this.#report(time, out);
    this.#mode = mode;
  }

  /** Roll-up and paint-on text shown and not reported yet. */
  #report(time: number | undefined, out: Cea608Caption[]): void {
    if (!this.#unreported) return;
    this.#unreported = false;
    if (this.#mode === 'roll-up') {
      const line = rowText(this.#displayed[this.#row]!);
      if (line !== '') out.push({ mode: 'roll-up', lines: [line], time });
    } else if (this.#mode === 'paint-on') {
      const lines = this.#displayed.map(rowText).filter((l) => l !== '');
      if (lines.length > 0) out.push({ mode: 'paint-on', lines, time });
    }
  }

  #target(): Memory {
    return this.#mode === 'pop-on' ? this.#hidden : this.#displayed;
  }

  #write(char: string): void {
    if (this.#mode === undefined) return; // no mode yet: nowhere to write
    this.#target()[this.#row]![this.#col] = char;
    if (this.#col < CEA608_COLUMNS - 1) this.#col++;
    if (this.#mode !== 'pop-on') this.#unreported = true;
  }
}
