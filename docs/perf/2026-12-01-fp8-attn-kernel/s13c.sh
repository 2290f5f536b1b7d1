#!/usr/bin/env bash
# Session 13, call C: ex2.approx, the 2^8 scale in the exponent, the rescale skip and the row sums on the tensor cores
# (call.sh).
CALL=s13c MODES="default" LAYERS="dsv3n dsv3na k3mlan k3mlana" exec bash "$(dirname "$0")/call.sh"
