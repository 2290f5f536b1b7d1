#!/usr/bin/env bash
# Session 13, call F: fewer ALU operations per tile (descriptors per tile, one-word e4m3 pack, tree max); the layers
# with bf16 weights, FP8 weights and FP8 weights + FP8 attention (call.sh).
CALL=s13f MODES="default" LAYERS="dsv3 dsv3n dsv3na k3mla k3mlan k3mlana" exec bash "$(dirname "$0")/call.sh"
