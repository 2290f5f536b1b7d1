#!/usr/bin/env python3
"""One line per dsa_topk record of `penstock_bench_kernels --only dsa` output (JSON lines among log lines): the whole-
prompt calls (T, ms, row_smem_ms, tied rows, global fallbacks) and the chunk-after-prefix calls (prefix, ms, the serial
replay's and kRangeRadixRowSmem's ms, tied rows, fallbacks, mismatches). Used by the docs/perf call scripts.
  tools/dsa_topk_lines.py dsa.jsonl
"""
import json
import sys


def main(path):
    for line in open(path):
        if not line.startswith('{'):
            continue
        r = json.loads(line)
        if r.get('bench') != 'dsa_topk':
            continue
        if 'prefix' in r:
            print(r['input'], 'prefix', r['prefix'], 'ms', r['ms'], 'serial', r.get('serial_replay_ms'), 'row_smem',
                  r['row_smem_ms'], 'tied', r['tied_rows'], 'global', r['rows_from_global'], 'mism',
                  r['mismatches_vs_row_smem'], r.get('mismatches_vs_serial_replay'))
        elif 'input' not in r:
            print('T', r['tokens'], 'ms', round(r['ms'], 4), 'row_smem', r.get('row_smem_ms'), 'tied',
                  r.get('tied_rows'), 'global', r.get('rows_from_global'))


if __name__ == '__main__':
    main(sys.argv[1])
