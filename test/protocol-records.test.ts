import assert from 'node:assert/strict';
import { test } from 'node:test';
import { JOB_STATUSES, type JobStatus, ProtocolError, parseAsrRecord, parseJobV2 } from '../src/index.ts';
import { validateJobV1, validateJobV2, validateSubmitAck } from '../src/protocol/jobs.ts';
import { validateAsrRecord, validateDiarizationRecord, validateFastRecord } from '../src/protocol/records.ts';

const ID = '3f2504e0-4f89-41d3-9a0c-0305e82c3301';
const word = (w: string, s: number, e: number) => ({ word: w, start_time: s, end_time: e });

function issuesOf(result: { ok: boolean; issues?: { path: string; message: string }[] }): string[] {
  return result.ok ? [] : result.issues!.map((i) => `${i.path} ${i.message}`);
}

test('ASR record: valid, and every field checked', () => {
  const rec = {
    id: ID,
    seq: 3,
    transcription: 'hello world',
    words: [word('hello', 0, 0.4), word('world', 0.5, 0.9)],
    is_speech_final: true,
    is_final: false,
  };
  assert.deepEqual(validateAsrRecord(rec), { ok: true, value: rec });
  assert.deepEqual(issuesOf(validateAsrRecord({ ...rec, seq: 1.5 })), [
    '$.seq expected an integer, got number 1.5',
  ]);
  assert.deepEqual(issuesOf(validateAsrRecord({ ...rec, id: 'x' })), [
    '$.id expected a UUID string, got string "x"',
  ]);
  const { is_speech_final: _, ...noSpeechFinal } = rec;
  assert.deepEqual(issuesOf(validateAsrRecord(noSpeechFinal)), ['$.is_speech_final is required']);
  assert.deepEqual(issuesOf(validateAsrRecord({ ...rec, words: [word('a', 2, 1)] })), [
    '$.words[0] end_time 1 is before start_time 2',
  ]);
  assert.deepEqual(issuesOf(validateAsrRecord(null)), ['$ expected an object, got null']);
  assert.throws(
    () => parseAsrRecord({ ...rec, is_final: 'yes' }),
    (err: unknown) => {
      return (
        err instanceof ProtocolError &&
        err.code === 'ERR_INVALID_RECORD' &&
        err.issues[0]!.path === '$.is_final'
      );
    },
  );
});

test('fast record has no is_speech_final', () => {
  const rec = { id: ID, seq: 0, transcription: 'hi', words: [word('hi', 0, 0.2)], is_final: true };
  assert.equal(validateFastRecord(rec).ok, true);
  assert.equal(validateFastRecord({ ...rec, words: 'hi' }).ok, false);
});

test('diarization record: delta of closed segments, snapshot of active ones', () => {
  const rec = {
    id: ID,
    final_segments: [{ start_time: 0, end_time: 1.5, speaker: 'SPEAKER_00' }],
    active_segments: [{ start_time: 1.5, speaker: 'SPEAKER_01', confidence: 0.8 }],
    is_final: true,
  };
  assert.equal(validateDiarizationRecord(rec).ok, true, 'a final record may keep a provisional active tail');
  assert.deepEqual(issuesOf(validateDiarizationRecord({ ...rec, active_segments: [{ start_time: 1 }] })), [
    '$.active_segments[0].speaker is required',
  ]);
});

test('submission acknowledgement', () => {
  assert.equal(validateSubmitAck({ jobId: ID, status: 'queued' }).ok, true);
  assert.equal(validateSubmitAck({ jobId: ID, status: 'done' }).ok, false);
  assert.equal(validateSubmitAck({ job_id: ID, status: 'queued' }).ok, false);
});

const base = {
  id: ID,
  version: 2,
  created_at: '2026-11-22T10:00:00.000Z',
  updated_at: '2026-11-22T10:00:05.123Z',
  language: 'en',
  audio_duration: 11.05,
  sample_rate_hz: 16000,
};
const doneData = {
  ...base,
  status: 'done',
  asr_result: 'ask not what your country can do for you',
  asr_word_segments: [word('ask', 0.1, 0.3)],
  diarization_segments: [{ start_time: 0, end_time: 11, speaker: 'SPEAKER_00' }],
  itn_result: null,
  itn_word_segments: null,
  itn_output_formats: null,
  redaction_result: null,
  redaction_word_segments: null,
  redaction_labels: '',
  final_result: 'ask not what your country can do for you',
  final_word_segments: [word('ask', 0.1, 0.3)],
};

test('V2 envelope: done carries every result field', () => {
  assert.equal(validateJobV2({ message: 'success', data: doneData }).ok, true);
  const { final_result: _, ...missing } = doneData;
  assert.deepEqual(issuesOf(validateJobV2({ message: 'success', data: missing })), [
    '$.data.final_result is required',
  ]);
  assert.equal(parseJobV2({ message: 'success', data: doneData }).data.status, 'done');
});

test('V2 envelope: queued, processing, failed, cleared carry only the first eight fields', () => {
  for (const status of ['queued', 'processing', 'failed', 'cleared'] as const) {
    assert.equal(validateJobV2({ message: 'success', data: { ...base, status } }).ok, true, status);
    assert.deepEqual(
      issuesOf(validateJobV2({ message: 'success', data: { ...base, status, asr_result: 'x' } })),
      [`$.data.asr_result must be absent when status is ${status}`],
    );
  }
  assert.equal(validateJobV2({ message: 'ok', data: { ...base, status: 'queued' } }).ok, false);
  assert.equal(
    validateJobV2({ message: 'success', data: { ...base, created_at: '2026-11-22', status: 'queued' } }).ok,
    false,
  );
});

function v1(status: JobStatus, extra: Record<string, unknown> = {}) {
  return {
    status,
    APIVersion: 'v1',
    version: '1.0.0',
    metadata: { vendorVersion: 'emulator', jobId: ID, fileDuration: 11.05 },
    results: { transcript: '' },
    diarization_segments: status === 'cleared' ? [] : null,
    ...extra,
  };
}

test('V1 legacy shape for all five statuses', () => {
  for (const status of JOB_STATUSES) {
    if (status === 'done') continue;
    assert.equal(validateJobV1(v1(status)).ok, true, status);
  }
  const done = v1('done', {
    results: {
      transcript: 'ask not',
      offsets: [
        { word: 'ask', startTime: 0.1, endTime: 0.3, speaker: 'SPEAKER_00' },
        { word: 'not', startTime: 0.4, endTime: 0.5, speaker: null },
      ],
    },
    diarization_segments: [{ start_time: 0, end_time: 1, speaker: 'SPEAKER_00' }],
  });
  assert.equal(validateJobV1(done).ok, true);
});

test('V1: null versus empty diarization_segments by status', () => {
  assert.deepEqual(issuesOf(validateJobV1(v1('queued', { diarization_segments: [] }))), [
    '$.diarization_segments must be null when status is queued',
  ]);
  assert.deepEqual(issuesOf(validateJobV1(v1('cleared', { diarization_segments: null }))), [
    '$.diarization_segments must be [] when status is cleared',
  ]);
  assert.deepEqual(issuesOf(validateJobV1(v1('failed', { results: { transcript: 'x' } }))), [
    '$.results.transcript must be empty when status is failed',
  ]);
  assert.deepEqual(
    issuesOf(
      validateJobV1(v1('done', { diarization_segments: null, results: { transcript: '', offsets: [] } })),
    ),
    ['$.diarization_segments expected an array, got null'],
  );
});
