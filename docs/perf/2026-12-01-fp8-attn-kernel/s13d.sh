#!/usr/bin/env bash
# Session 13, call D: q in registers (default) vs shared memory, the MMA-only probe (a ceiling), the layer A/B
# (call.sh).
CALL=s13d MODES="default PENSTOCK_FP8_ATTN_QREGS=0" LAYERS="dsv3n dsv3na" exec bash "$(dirname "$0")/call.sh"
