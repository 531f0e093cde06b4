// Times in results (word and segment bounds, durations) are seconds to the millisecond.

/** `seconds` rounded to the nearest millisecond. */
export const roundToMs = (seconds: number): number => Math.round(seconds * 1000) / 1000;
