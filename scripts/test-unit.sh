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
# Files given: those, in one runner. A reporter of one's own (its destination would be written
# by both runners): every file, in one runner.
one_runner=""
# An option written with its value apart (--test-name-pattern resume) takes the next argument:
# that is its value, not a file.
value_next=""
for arg in "$@"; do
  if [ -n "$value_next" ]; then
    value_next=""
    continue
  fi
  case $arg in
  --test-reporter=* | --test-reporter-destination=*) one_runner=yes ;;
  --test-reporter | --test-reporter-destination)
    one_runner=yes
    value_next=yes
    ;;
  --test-name-pattern | --test-skip-pattern | --test-concurrency | --test-timeout | --test-shard | \
    --import | --require | --experimental-test-coverage-include | --test-coverage-include | \
    --test-coverage-exclude) value_next=yes ;;
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
if [ -z "$first" ] || [ -n "$one_runner" ]; then
  # shellcheck disable=SC2086
  exec node --test --test-concurrency="$concurrency" --import ./test/setup.ts "$@" $first $rest
fi
report=$(mktemp)
# Both runners in the background, so that a signal to this shell (npm passes SIGTERM to it
# alone) reaches them: a shell waiting on a foreground child would not run its trap until then.
# shellcheck disable=SC2086
node --test --test-concurrency=2 --import ./test/setup.ts "$@" $first >"$report" 2>&1 &
long_pid=$!
# shellcheck disable=SC2086
node --test --test-concurrency="$concurrency" --import ./test/setup.ts "$@" $rest &
rest_pid=$!
stop() {
  kill "$long_pid" "$rest_pid" 2>/dev/null
  rm -f "$report"
  exit "$1"
}
trap 'stop 130' INT
trap 'stop 143' TERM
trap 'stop 129' HUP
wait "$rest_pid"
rest_status=$?
wait "$long_pid"
long_status=$?
trap - INT TERM HUP
echo
echo "# run beside the others:"
cat "$report"
rm -f "$report"
[ "$rest_status" -eq 0 ] && [ "$long_status" -eq 0 ]
