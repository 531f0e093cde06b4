// Languages of the service: names in paths and query strings, bytes in live input frames.

/** The service's languages and their byte in live input frames (interface, Live input frame, byte 17). */
export const LANGUAGES = { ar: 0, en: 1, codeswitch: 2, auto: 255 } as const;

/** A language name of the service: `ar`, `en`, `codeswitch` or `auto`. */
export type Language = keyof typeof LANGUAGES;

const BY_BYTE = new Map<number, Language>(
  Object.entries(LANGUAGES).map(([name, byte]) => [byte, name as Language]),
);

/** Whether `value` is a language name (own keys of `LANGUAGES` only, not `toString` and the like). */
export function isLanguage(value: unknown): value is Language {
  return typeof value === 'string' && Object.hasOwn(LANGUAGES, value);
}

/** The language a frame's language byte names, or `undefined` for a byte the service rejects. */
export function languageFromByte(byte: number): Language | undefined {
  return BY_BYTE.get(byte);
}
