#!/usr/bin/env bash
# Session 22, call C: call B's script (s22b.sh) on the package of e174a0f, where the pair kernel's index scan runs
# after the first pair's flags.
NAME=s22c exec bash "$(dirname "$0")/s22b.sh"
