#!/usr/bin/env bash
# Session 13, call A: the first version of Penstock's FP8 wgmma attention (scores, softmax, value product in sequence
# per warpgroup): the FP8 attention tests and the attention bench (call.sh). (Ran with the bench table listing the
# cuda_core and autotuned rows too.)
CALL=s13a exec bash "$(dirname "$0")/call.sh"
