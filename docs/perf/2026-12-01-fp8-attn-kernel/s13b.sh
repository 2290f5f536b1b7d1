#!/usr/bin/env bash
# Session 13, call B: the FP8 wgmma attention with the intra-warpgroup overlap (and the ping-pong knob); the tests, the
# bench, and DeepSeek-V3 / Kimi K3 MLA layers at 16K with native FP8 weights, bf16 attention (cuDNN) vs
# --fp8-attention, with and without ping-pong (call.sh).
CALL=s13b MODES="default PENSTOCK_FP8_ATTN_PINGPONG=1" LAYERS="dsv3n dsv3na k3mlan k3mlana" exec bash "$(dirname "$0")/call.sh"
