#!/bin/sh
# `npm run docs`: the API reference (TypeDoc) into docs/api/. TypeDoc colours its messages
# wherever they go; written to a pipe or a file, they go without colour codes (NO_COLOR).
if ! [ -t 1 ] || ! [ -t 2 ]; then export NO_COLOR=1; fi
exec node tools/docs/node_modules/typedoc/bin/typedoc "$@"
