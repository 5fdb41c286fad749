#!/usr/bin/env python3
"""Joins tools/ncu-quant.sh's runs (one ncu CSV and one `bench gemv` JSON per format, form and shape) into one table:
DRAM bytes against the bytes the form reads, global-load sectors per request, warp instructions per weight, issue-slot
use and occupancy of one cold launch. Standard library only."""
import csv
import json
import sys


def metrics(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("ID", "").strip().isdigit()]
    if not rows:
        raise SystemExit(f"ncu_quant_table: no profiled kernel in {path}")
    return {k: v for k, v in rows[-1].items()}


def num(m, key):
    v = m.get(key, "").replace(",", "")
    try:
        return float(v)
    except ValueError:
        return float("nan")


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: ncu_quant_table.py RUNS_CSV (written by tools/ncu-quant.sh)")
    print("| format | shape | form | kernel us (cold) | DRAM MB read | form's bytes MB | DRAM GB/s | sectors/request "
          "| warp inst/weight | thread inst/weight | issue active % | warps active % |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with open(sys.argv[1]) as f:
        for q, form, shape, csv_path, json_path in csv.reader(f):
            m = metrics(csv_path)
            with open(json_path) as jf:
                r = json.load(jf)["results"][0]
            n, k = (int(v) for v in shape.split("x"))
            weights = n * k
            form_bytes = r["gbps_graph"] * r["us_per_call_graph"] * 1e3  # GB/s x us = the bytes the form reads
            t = num(m, "gpu__time_duration.sum") / 1e3  # ns -> us
            dram = num(m, "dram__bytes_read.sum")
            req = num(m, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
            sec = num(m, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
            inst = num(m, "smsp__inst_executed.sum")
            print(f"| {q.upper()} | {n}x{k} | {form} | {t:.2f} | {dram / 1e6:.2f} | {form_bytes / 1e6:.2f} | "
                  f"{dram / t / 1e3:.0f} | {sec / req if req else float('nan'):.2f} | {inst / weights:.4f} | "
                  f"{32 * inst / weights:.3f} | {num(m, 'smsp__issue_active.avg.pct_of_peak_sustained_active'):.1f} | "
                  f"{num(m, 'sm__warps_active.avg.pct_of_peak_sustained_active'):.1f} |")


if __name__ == "__main__":
    main()
