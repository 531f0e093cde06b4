#!/bin/sh
# `npm run test:unit [-- FILE... | -- --node-test-option...]`: every test file, or only the
# files given (with the same runner options and the handle check of test/setup.ts). Options
# alone (--test-name-pattern=...) apply to every file.
#
# The whole suite runs the longest files first: the runner starts files in the order given, and
# a long file started last keeps the run going alone after the others are done. Most files wait
# on other processes (the emulator, Redis, Chromium, OBS, ffmpeg) more than they compute, so four
# run at once on two cores. SPEECHPIPE_TEST_CONCURRENCY overrides it.
concurrency=${SPEECHPIPE_TEST_CONCURRENCY:-4}
for arg in "$@"; do
  case $arg in
  -*) ;;
  *) exec node --test --test-concurrency="$concurrency" --import ./test/setup.ts "$@" ;;
  esac
done
# The longest files (by their tests' time in a whole run), longest first; the rest after them.
slow="test/emulator-wer.test.ts test/soak.test.ts test/emulator-recognizer.test.ts
test/emulator-engine-contract.test.ts test/overlay-browser.test.ts test/sinks-obs-captions.test.ts
test/archive-cluster.test.ts test/cli-caption.test.ts test/hls-browser.test.ts
test/transforms-decode.test.ts test/cli-transcribe.test.ts test/package-tarball.test.ts
test/bench.test.ts test/emulator-workers.test.ts"
first=""
for f in $slow; do
  [ -f "$f" ] && first="$first $f"
done
rest=""
listed=" $(echo $slow) "
for f in $(find test -name "*.test.ts" | sort); do
  case $listed in
  *" $f "*) ;;
  *) rest="$rest $f" ;;
  esac
done
# shellcheck disable=SC2086
exec node --test --test-concurrency="$concurrency" --import ./test/setup.ts "$@" $first $rest
