#!/bin/sh
# `npm run test:unit [-- FILE... | -- --node-test-option...]`: every test file, or only the
# files given (with the same runner options and the handle check of test/setup.ts). Options
# alone (--test-name-pattern=...) apply to every file.
#
# Node's runner starts files in the order of their names, whatever order they are given in, so
# the longest file (the soak, 50 s), named late, ran alone at the end. The whole suite is two
# runners at once: one for the long files named late listed below, two at a time from the
# start, and one for the rest, four at a time (most files wait on other processes: the
# emulator, Redis, Chromium, OBS, ffmpeg; SPEECHPIPE_TEST_CONCURRENCY changes it). The first
# runner's report is printed after the rest's; the exit status fails if either fails.
concurrency=${SPEECHPIPE_TEST_CONCURRENCY:-4}
for arg in "$@"; do
  case $arg in
  -*) ;;
  *) exec node --test --test-concurrency="$concurrency" --import ./test/setup.ts "$@" ;;
  esac
done
# Long files named late (20 s to 50 s each): a new file that takes more than about twenty
# seconds and is named late goes here.
long="test/sinks-obs-captions.test.ts test/soak.test.ts test/transforms-decode.test.ts"
first=""
for f in $long; do
  [ -f "$f" ] && first="$first $f"
done
rest=""
listed=" $(echo $long) "
for f in $(find test -name "*.test.ts" | sort); do
  case $listed in
  *" $f "*) ;;
  *) rest="$rest $f" ;;
  esac
done
report=$(mktemp)
trap 'rm -f "$report"' EXIT
# shellcheck disable=SC2086
node --test --test-concurrency=2 --import ./test/setup.ts "$@" $first >"$report" 2>&1 &
long_pid=$!
# shellcheck disable=SC2086
node --test --test-concurrency="$concurrency" --import ./test/setup.ts "$@" $rest
rest_status=$?
wait "$long_pid"
long_status=$?
echo
echo "# run beside the others:"
cat "$report"
[ "$rest_status" -eq 0 ] && [ "$long_status" -eq 0 ]
