#!/usr/bin/env bash
# Set up a fresh Debian machine for speechpipe: the system tools its tests and main job use
# (ffmpeg, sox, espeak-ng, PocketSphinx and its US English model), then the npm dependencies
# (which pin Node 24 for npm scripts).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for tool in ffmpeg sox espeak-ng; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
# Cluster mode (transcribe --queue, worker) and its tests: Debian's Redis server.
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# The emulator's recognition engine (--engine pocketsphinx, npm start) and the WER tests.
command -v pocketsphinx_batch >/dev/null 2>&1 || missing+=(pocketsphinx)
[ -f /usr/share/pocketsphinx/model/en-us/en-us.lm.bin ] || missing+=(pocketsphinx-en-us)
if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]} with apt-get"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Headless Chromium for the overlay's browser test (puppeteer-core drives Debian's build; no
# browser is downloaded).
if ! command -v chromium >/dev/null 2>&1; then
  echo "setup: installing chromium with apt-get"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

# The OBS caption tests: OBS Studio (29 ships obs-websocket 5) headless under xvfb-run, streaming
# to nginx with the RTMP module. Optional: without them only those tests skip, saying why.
obs_missing=()
command -v obs >/dev/null 2>&1 || obs_missing+=(obs-studio)
command -v xvfb-run >/dev/null 2>&1 || obs_missing+=(xvfb)
command -v xauth >/dev/null 2>&1 || obs_missing+=(xauth)
command -v nginx >/dev/null 2>&1 || obs_missing+=(nginx)
[ -e /usr/lib/nginx/modules/ngx_rtmp_module.so ] || obs_missing+=(libnginx-mod-rtmp)
if ((${#obs_missing[@]} > 0)); then
  echo "setup: installing ${obs_missing[*]} with apt-get (for the OBS caption tests)"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  { $sudo apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${obs_missing[@]}" >/dev/null; } ||
    echo "setup: could not install ${obs_missing[*]}: the OBS caption tests will skip"
fi

npm ci --no-audit --no-fund
# TypeDoc (npm run docs) needs TypeScript 6; speechpipe builds with 7: its own folder.
npm ci --prefix tools/docs --no-audit --no-fund
