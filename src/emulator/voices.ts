// The seven multilingual voice profiles with stable UUIDs. Each hides physical variants (one
// per language) whose UUIDs are internal: using one directly is rejected like an unknown voice.

import type { VoiceInfo } from './types.ts';

export interface VoiceProfile extends VoiceInfo {
  /** Hidden physical variants, by language. */
  readonly variants: Readonly<Record<'en' | 'ar', string>>;
  /** espeak-ng variant and prosody that give each profile its own sound. */
  readonly espeak: { variant: string; pitch: number; speed: number };
  /** Base frequency of the synthetic fallback voice, Hz. */
  readonly synthHz: number;
}

// One row per profile: name, espeak-ng variant, pitch, speed (words per minute), synthetic Hz.
const ROWS: readonly [string, string, number, number, number][] = [
  ['Amal', 'f2', 60, 165, 210],
  ['Omar', 'm3', 40, 160, 115],
  ['Layla', 'f4', 70, 175, 230],
  ['Sami', 'm1', 50, 180, 125],
  ['Noor', 'f1', 55, 150, 200],
  ['Karim', 'm7', 35, 170, 105],
  ['Hana', 'f3', 65, 185, 220],
];

/** Stable UUIDs: the profile's, and one hidden physical variant per language. */
const profileId = (n: number) => `5d9c1d0e-6f0a-4c1b-9a51-2b7e4f1c0a0${n}`;
const variantId = (language: 'en' | 'ar', n: number) =>
  language === 'en' ? `0c7b2e1a-3d4f-4a6b-8c9d-1e2f3a4b5c0${n}` : `9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b0${n}`;

export const VOICE_PROFILES: readonly VoiceProfile[] = Object.freeze(
  ROWS.map(([name, variant, pitch, speed, synthHz], i) => ({
    id: profileId(i + 1),
    name,
    languages: ['en', 'ar'],
    variants: { en: variantId('en', i + 1), ar: variantId('ar', i + 1) },
    espeak: { variant, pitch, speed },
    synthHz,
  })),
);

/** The profile a request may name, or undefined (unknown UUID or a hidden physical variant). */
export function voiceById(id: string): VoiceProfile | undefined {
  const lower = id.toLowerCase();
  return VOICE_PROFILES.find((v) => v.id === lower);
}

/** Hidden physical variant UUIDs of every profile (for tests that check they are refused). */
export function physicalVariantIds(): string[] {
  return VOICE_PROFILES.flatMap((v) => Object.values(v.variants));
}

/** The public listing: id, name and languages only. */
export function listVoices(): VoiceInfo[] {
  return VOICE_PROFILES.map((v) => ({ id: v.id, name: v.name, languages: [...v.languages] }));
}

/** The voice used when a request names none. */
export const DEFAULT_VOICE: VoiceProfile = VOICE_PROFILES[0]!;
