// Audio primitives shared by the library and the emulator.

export * from './ffmpeg.ts';
export * from './pcm.ts';
export * from './wav.ts';
