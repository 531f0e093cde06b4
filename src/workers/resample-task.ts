// Piscina task file: run one resampling task in a worker thread and move the output back.

import { move } from 'piscina';
import { type ResampleTask, runResampleTask } from '../audio/resampler.ts';

export default function resampleTask(task: ResampleTask): Int16Array {
  // Transferred, not copied: the main thread gets the output buffer itself.
  return move(runResampleTask(task)) as Int16Array;
}
