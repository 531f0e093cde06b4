// CEA-608 in H.264: the A/53 caption SEI scanned out of hand-built NAL units (emulation
// prevention, several messages, invalid and field-2 constructs), and the 608 decoder on
// hand-built byte pairs: pop-on, roll-up, paint-on, doubled control codes, parity errors,
// special and extended characters, the other channel.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  type CcData,
  Cea608Decoder,
  ccDataFromNal,
  hasOddParity,
  isCea608Character,
  splitAnnexB,
  withOddParity,
} from '../src/protocol/cea608.ts';

type Pair = [number, number];
const p = withOddParity;
/** A control code (or any two 7-bit bytes) as sent: with parity. */
const code = (b1: number, b2: number): Pair => [p(b1), p(b2)];
const RCL = code(0x14, 0x20);
const BS = code(0x14, 0x21);
const RU2 = code(0x14, 0x25);
const RU3 = code(0x14, 0x26);
const RDC = code(0x14, 0x29);
const EDM = code(0x14, 0x2c);
const CR = code(0x14, 0x2d);
const ENM = code(0x14, 0x2e);
const EOC = code(0x14, 0x2f);
/** Preamble address code: row 1-15, indent in columns (a multiple of 4). */
function pac(row: number, indent = 0): Pair {
  const table: Record<number, [number, number]> = {
    1: [0x11, 0],
    2: [0x11, 0x20],
    3: [0x12, 0],
    4: [0x12, 0x20],
    5: [0x15, 0],
    6: [0x15, 0x20],
    7: [0x16, 0],
    8: [0x16, 0x20],
    9: [0x17, 0],
    10: [0x17, 0x20],
    11: [0x10, 0],
    12: [0x13, 0],
    13: [0x13, 0x20],
    14: [0x14, 0],
    15: [0x14, 0x20],
  };
  const [b1, high] = table[row]!;
  return code(b1, 0x40 | high | (indent > 0 ? 0x10 | ((indent / 4) << 1) : 0));
}
/** Basic characters, two a pair (the last pair padded with 0x00). */
function chars(text: string): Pair[] {
  const bytes = [...text].map((c) => c.charCodeAt(0));
  const out: Pair[] = [];
  for (let i = 0; i < bytes.length; i += 2) out.push([p(bytes[i]!), p(bytes[i + 1] ?? 0)]);
  return out;
}

function decode(pairs: Pair[], decoder = new Cea608Decoder()) {
  const out = pairs.flatMap(([a, b]) => decoder.push(a, b));
  return [...out, ...decoder.flush()].map((c) => ({ mode: c.mode, lines: c.lines }));
}

test('parity: 608 bytes carry odd parity in their top bit', () => {
  for (let b = 0; b < 0x80; b++) {
    assert.ok(hasOddParity(withOddParity(b)), `byte ${b}`);
    assert.equal(withOddParity(b) & 0x7f, b);
  }
  assert.equal(withOddParity(0x14), 0x94);
  assert.equal(withOddParity(0x20), 0x20);
});

test('pop-on: loaded off screen, shown whole at End Of Caption, rows in order', () => {
  const out = decode([ENM, RCL, pac(14), ...chars('HELLO WORLD'), pac(15, 4), ...chars('Second row'), EOC]);
  assert.deepEqual(out, [{ mode: 'pop-on', lines: ['HELLO WORLD', '    Second row'] }]);
});

test('pop-on: nothing shows before End Of Caption; the next caption replaces it', () => {
  const decoder = new Cea608Decoder();
  const first = [ENM, RCL, pac(15), ...chars('ONE')].flatMap(([a, b]) => decoder.push(a, b));
  assert.deepEqual(first, []);
  const out = decode([EOC, ENM, RCL, pac(15), ...chars('TWO'), EOC], decoder);
  assert.deepEqual(
    out.map((c) => c.lines),
    [['ONE'], ['TWO']],
  );
});

test('a control code sent twice in a row acts once; sent a third time, again', () => {
  // BS BS erases one character, not two; BS BS BS erases two.
  assert.deepEqual(decode([RCL, pac(15), ...chars('ABCD'), BS, BS, EOC])[0]!.lines, ['ABC']);
  assert.deepEqual(decode([RCL, pac(15), ...chars('ABCD'), BS, BS, BS, EOC])[0]!.lines, ['AB']);
  // Padding between them does not break the pair: still once.
  assert.deepEqual(decode([RCL, pac(15), ...chars('ABCD'), BS, [0x80, 0x80], BS, EOC])[0]!.lines, ['ABC']);
  // A character between them does: each acts (ABCD, ABC, ABCX, ABC).
  assert.deepEqual(decode([RCL, pac(15), ...chars('ABCD'), BS, ...chars('X'), BS, EOC])[0]!.lines, ['ABC']);
});

test('roll-up: each carriage return rolls a finished line up; the last one comes at the end', () => {
  const out = decode([
    RU2,
    CR,
    pac(15),
    ...chars('FIRST LINE'),
    CR,
    ...chars('SECOND LINE'),
    CR,
    ...chars('THIRD'),
  ]);
  assert.deepEqual(out, [
    { mode: 'roll-up', lines: ['FIRST LINE'] },
    { mode: 'roll-up', lines: ['SECOND LINE'] },
    { mode: 'roll-up', lines: ['THIRD'] },
  ]);
});

test('roll-up: the window keeps its rows; an erase reports the line on screen once', () => {
  const out = decode([RU3, pac(12), ...chars('A'), CR, ...chars('B'), EDM, EDM, pac(12), ...chars('C'), CR]);
  // The base row moved to 12 with the PAC; EDM twice is one erase; C is written after it.
  assert.deepEqual(
    out.map((c) => c.lines),
    [['A'], ['B'], ['C']],
  );
});

test('paint-on: shown as written, reported when erased or at the end', () => {
  const out = decode([RDC, pac(1), ...chars('PAINTED'), EDM, RDC, pac(2), ...chars('AGAIN')]);
  assert.deepEqual(out, [
    { mode: 'paint-on', lines: ['PAINTED'] },
    { mode: 'paint-on', lines: ['AGAIN'] },
  ]);
});

test('parity errors: a character becomes a block, a control code is ignored; both counted', () => {
  const decoder = new Cea608Decoder();
  const bad = 0x41; // 'A' has two bits set: without its parity bit it fails
  const out = decode([RCL, pac(15), [bad, p(0x42)], [0x14, p(0x2f)], EOC], decoder);
  assert.deepEqual(out[0]!.lines, ['█B']);
  assert.equal(decoder.parityErrors, 2);
});

test('special, extended and the basic set differences', () => {
  const music = code(0x11, 0x37); // ♪
  const eAcute = code(0x12, 0x21); // É, replacing the E sent before it
  const out = decode([RCL, pac(15), music, ...chars(' CAFE'), eAcute, ...chars(' \\ ~'), EOC]);
  assert.deepEqual(out[0]!.lines, ['♪ CAFÉ é ñ']);
  assert.ok(isCea608Character('É') && isCea608Character('♪') && isCea608Character('a'));
  assert.ok(!isCea608Character('ش') && !isCea608Character('😀'));
});

test('only the chosen channel: CC2 text after its control code is not CC1 text', () => {
  const cc2 = (b2: number) => code(0x1c, b2);
  const out = decode([
    RCL,
    pac(15),
    ...chars('ONE'),
    cc2(0x20),
    ...chars('OTHER'),
    RCL,
    ...chars(' TWO'),
    EOC,
  ]);
  assert.deepEqual(out[0]!.lines, ['ONE TWO']);
  const two = decode([cc2(0x20), cc2(0x20), ...chars('OTHER'), cc2(0x2f)], new Cea608Decoder({ channel: 2 }));
  assert.deepEqual(two[0]!.lines, ['OTHER']);
});

test('any line of basic characters, loaded pop-on, decodes back as sent', () => {
  const basic = fc.constantFrom(
    ..."ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 .,?!'-".split(''),
  );
  fc.assert(
    fc.property(
      fc.array(fc.array(basic, { minLength: 1, maxLength: 32 }), { minLength: 1, maxLength: 4 }),
      (rows) => {
        const lines = rows.map((r) => r.join('').trimEnd()).filter((l) => l !== '');
        const pairs = [ENM, RCL, ...lines.flatMap((line, k) => [pac(11 + k), ...chars(line)]), EOC];
        const out = decode(pairs);
        assert.deepEqual(out.length === 0 ? [] : out[0]!.lines, lines);
      },
    ),
  );
});

/** An SEI NAL (header 0x06) of the given messages, emulation prevention applied. */
function seiNal(messages: { type: number; payload: number[] }[]): Uint8Array {
  const rbsp: number[] = [];
  for (const m of messages) {
    let t = m.type;
    while (t >= 255) {
      rbsp.push(0xff);
      t -= 255;
    }
    rbsp.push(t);
    let s = m.payload.length;
    while (s >= 255) {
      rbsp.push(0xff);
      s -= 255;
    }
    rbsp.push(s, ...m.payload);
  }
  rbsp.push(0x80);
  const escaped: number[] = [];
  let zeros = 0;
  for (const b of rbsp) {
    if (zeros >= 2 && b <= 3) {
      escaped.push(3);
      zeros = 0;
    }
    escaped.push(b);
    zeros = b === 0 ? zeros + 1 : 0;
  }
  return Uint8Array.from([0x06, ...escaped]);
}
/** An A/53 caption payload (user_data_registered_itu_t_t35) of cc_data constructs. */
function ga94(cc: { valid?: boolean; type: number; data1: number; data2: number }[]): number[] {
  return [
    0xb5,
    0x00,
    0x31,
    0x47,
    0x41,
    0x39,
    0x34,
    0x03,
    0x40 | cc.length,
    0xff,
    ...cc.flatMap((c) => [0xf8 | ((c.valid ?? true) ? 4 : 0) | c.type, c.data1, c.data2]),
    0xff,
  ];
}

test('caption SEI: cc_data out of GA94 messages, escaped bytes restored, others skipped', () => {
  const nal = seiNal([
    // Registered data of another provider (whose bytes 00 00 01 need emulation prevention).
    { type: 4, payload: [0xb5, 0x00, 0x00, 0x01, 0x44, 0x54, 0x47, 0x31, 0x41] },
    {
      type: 4,
      payload: ga94([
        { type: 0, data1: 0x94, data2: 0x20 },
        { valid: false, type: 0, data1: 0x80, data2: 0x80 },
        { type: 1, data1: 0x00, data2: 0x00 },
        { type: 0, data1: 0x01, data2: 0x80 },
      ]),
    },
    // Another message type (user_data_unregistered), then a second caption message.
    { type: 5, payload: new Array(300).fill(0x11) },
    { type: 4, payload: ga94([{ type: 0, data1: 0x94, data2: 0x2f }]) },
  ]);
  assert.ok(
    nal.some((b, i) => b === 3 && nal[i - 1] === 0 && nal[i - 2] === 0),
    'the NAL carries an emulation prevention byte',
  );
  const cc = ccDataFromNal(nal);
  assert.deepEqual(cc, [
    { type: 0, data1: 0x94, data2: 0x20 },
    { type: 1, data1: 0x00, data2: 0x00 },
    { type: 0, data1: 0x01, data2: 0x80 },
    { type: 0, data1: 0x94, data2: 0x2f },
  ] satisfies CcData[]);
  assert.deepEqual(ccDataFromNal(Uint8Array.from([0x65, 0x88, 0x84])), [], 'a slice has no captions');
});

test('caption SEI end to end: Annex B stream of slices and SEIs decodes to the caption', () => {
  const pairs = [ENM, RCL, pac(15), ...chars('IN THE STREAM'), EOC];
  const sei = seiNal([{ type: 4, payload: ga94(pairs.map(([a, b]) => ({ type: 0, data1: a, data2: b }))) }]);
  const slice = Uint8Array.from([0x65, 0x88, 0x80, 0x00, 0x00, 0x03, 0x01]);
  const stream = Uint8Array.from([
    0,
    0,
    0,
    1,
    0x09,
    0xf0,
    0,
    0,
    1,
    ...slice,
    0,
    0,
    0,
    1,
    ...sei,
    0,
    0,
    1,
    ...slice,
  ]);
  const nals = splitAnnexB(stream);
  assert.deepEqual(
    nals.map((n) => n[0]! & 0x1f),
    [9, 5, 6, 5],
  );
  const decoder = new Cea608Decoder();
  const captions = nals
    .flatMap((n) => ccDataFromNal(n))
    .filter((c) => c.type === 0)
    .flatMap((c) => decoder.push(c.data1, c.data2));
  assert.deepEqual(
    captions.map((c) => c.lines),
    [['IN THE STREAM']],
  );
});
