#!/bin/sh
# `npm run test:unit [-- FILE... | -- --node-test-option...]`: every test file, or only the
# files given (with the same runner options and the handle check of test/setup.ts). Options
# alone (--test-name-pattern=...) apply to every file.
for arg in "$@"; do
  case $arg in
  -*) ;;
  *) exec node --test --test-concurrency=2 --import ./test/setup.ts "$@" ;;
  esac
done
exec node --test --test-concurrency=2 --import ./test/setup.ts "$@" 'test/**/*.test.ts'
