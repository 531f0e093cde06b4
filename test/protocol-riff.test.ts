import assert from 'node:assert/strict';
import { test } from 'node:test';
import { encodeWav, ProtocolError, parseWavHeader, writeWavHeader } from '../src/index.ts';
import { looksLikeWav } from '../src/protocol/riff.ts';

test('round-trip of a canonical header', () => {
  const wav = encodeWav(Buffer.alloc(320), 16000);
  assert.ok(looksLikeWav(wav));
  assert.deepEqual(parseWavHeader(wav), {
    format: 'pcm',
    formatTag: 1,
    channels: 1,
    sampleRate: 16000,
    bitsPerSample: 16,
    blockAlign: 2,
    dataOffset: 44,
    dataBytes: 320,
  });
});

test('streaming headers have unknown data size', () => {
  const h = writeWavHeader({ sampleRate: 48000, channels: 2 });
  assert.equal(parseWavHeader(h)!.dataBytes, undefined);
  const zero = writeWavHeader({ sampleRate: 8000, dataBytes: 0 });
  assert.equal(parseWavHeader(zero)!.dataBytes, undefined);
});

test('extra chunks before data are skipped, odd chunk sizes padded', () => {
  const h = writeWavHeader({ sampleRate: 16000, dataBytes: 4 });
  const list = Buffer.concat([
    Buffer.from('LIST'),
    Buffer.from([3, 0, 0, 0]),
    Buffer.from('abc'),
    Buffer.of(0),
  ]);
  const wav = Buffer.concat([h.subarray(0, 36), list, h.subarray(36), Buffer.alloc(4)]);
  assert.equal(parseWavHeader(wav)!.dataOffset, 44 + 12);
});

test('a partial header asks for more bytes', () => {
  const wav = encodeWav(Buffer.alloc(8), 16000);
  for (let n = 0; n < 44; n++) assert.equal(parseWavHeader(wav.subarray(0, n)), null, `${n} bytes`);
  assert.notEqual(parseWavHeader(wav.subarray(0, 44)), null);
});

test('float, A-law and mu-law formats are recognised', () => {
  const f = writeWavHeader({ sampleRate: 44100, format: 'float', bitsPerSample: 32, dataBytes: 8 });
  assert.equal(parseWavHeader(f)!.format, 'float');
  for (const [tag, name] of [
    [6, 'alaw'],
    [7, 'mulaw'],
  ] as const) {
    const h = writeWavHeader({ sampleRate: 8000, dataBytes: 8 });
    h.writeUInt16LE(tag, 20);
    h.writeUInt16LE(8, 34);
    h.writeUInt16LE(1, 32);
    assert.equal(parseWavHeader(h)!.format, name);
  }
});

test('unreadable WAVs are ProtocolError ERR_WAV_FORMAT', () => {
  const bad: Buffer[] = [
    Buffer.from('RIFX\0\0\0\0WAVE'),
    Buffer.from('RIFF\0\0\0\0AVI '),
    Buffer.from('ID3\x04'),
  ];
  const mp3 = writeWavHeader({ sampleRate: 16000, dataBytes: 0 });
  mp3.writeUInt16LE(0x55, 20);
  bad.push(mp3);
  const odd = writeWavHeader({ sampleRate: 16000, dataBytes: 0 });
  odd.writeUInt16LE(12, 34);
  bad.push(odd);
  for (const b of bad)
    assert.throws(
      () => parseWavHeader(b),
      (e: unknown) => e instanceof ProtocolError && e.code === 'ERR_WAV_FORMAT',
    );
});
